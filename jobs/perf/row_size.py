"""Fused row size: bytes of one encoded row carrying 47 configurations (the sweep of
sweep_sharing.py: Table 1 methods, DarkForest ablations, disclosure policies, lazy, the
3 x 3 x 3 Table 9 grid) over heavy samples (HumanEval tests, FinQA tables), in two encodings:

- ``before``: every configuration's state holds its own copy of the sample (one JSON list);
- ``after``: the row holds the sample once (``sample`` column) plus each configuration's
  state without it, each completion that several configurations share written once
  (``state`` column), as ``df_ray.evaluation.driver.encode_row`` writes it.

Measured on the first row (before any call) and on the row after every round (all calls in
it), running the rounds in this process with the evaluation driver and scripted engines (no
Ray). The in-process driver encodes its rows between rounds; the pipeline's stage runs every
round of a batch itself, so its rows carry the sample alone.

    .venv/bin/python jobs/perf/row_size.py                 # 4 samples per benchmark
    .venv/bin/python jobs/perf/row_size.py --samples 8 --benchmarks humaneval
    .venv/bin/python jobs/perf/row_size.py --meta-kb 8     # samples as heavy as real ones
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import ROOT, header, scripted_config
from jobs.perf.sweep_sharing import configurations

FIXTURES = {"humaneval": ROOT / "tests" / "fixtures" / "humaneval.jsonl",
            "finqa": ROOT / "tests" / "fixtures" / "finqa",
            "math": ROOT / "tests" / "fixtures" / "math500.jsonl"}


def before(states) -> int:
    """The encoding with the sample in every state."""
    return len(json.dumps([st.to_dict() for st in states]).encode())


def after(states) -> int:
    from df_ray.evaluation.driver import encode_row

    return sum(len(v.encode()) for v in encode_row(states).values())


def padded(samples, kb: int):
    """The samples with ``kb`` KB more in ``meta`` (a stand-in for a full test suite or a
    long report table: the fixtures are short)."""
    from dataclasses import replace

    if kb <= 0:
        return samples
    return [replace(s, meta={**s.meta, "padding": "x" * (1024 * kb)}) for s in samples]


def measure(benchmark: str, n: int, meta_kb: int = 0) -> dict[str, float]:
    from df_ray.engines.scripted import ScriptedEngine
    from df_ray.evaluation import Driver, EngineRouter, Member
    from df_ray.evaluation.context import load_samples

    with tempfile.TemporaryDirectory(prefix="dfperf-rows-") as tmp:
        cfgs = [scripted_config(tmp, benchmark=benchmark, source=str(FIXTURES[benchmark]),
                                limit=n, **{"ablation": "full", **run})
                for run in configurations("full")]
        samples = padded(load_samples(cfgs[0]), meta_kb)
        members = [Member.from_config(c) for c in cfgs]
        models = {s.model: ScriptedEngine(s.model, "majority") for s in cfgs[0].backbones.values()}
        driver = Driver(members, EngineRouter(models))
        rows = driver.new_rows(samples)
        first = [(before(r), after(r)) for r in rows]
        rows = driver.run(samples)
        last = [(before(r), after(r)) for r in rows]
    mean = statistics.fmean
    return {"configs": len(cfgs), "samples": len(samples),
            "first_before": mean(b for b, _ in first), "first_after": mean(a for _, a in first),
            "last_before": mean(b for b, _ in last), "last_after": mean(a for _, a in last),
            "sample_bytes": mean(len(json.dumps(s.meta)) + len(s.question) for s in samples)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--benchmarks", nargs="+", default=["humaneval", "finqa", "math"],
                    choices=sorted(FIXTURES))
    ap.add_argument("--meta-kb", type=int, default=0,
                    help="add this many KB to every sample's meta (a real test suite, a table)")
    args = ap.parse_args(argv)
    header("fused row size: the sample once per row vs. once per configuration")
    print(f"{'benchmark':10} {'configs':>7} {'sample B':>9} {'first row before':>17} "
          f"{'after':>9} {'graded row before':>18} {'after':>9} {'ratio':>6}")
    for b in args.benchmarks:
        m = measure(b, args.samples, args.meta_kb)
        print(f"{b:10} {m['configs']:>7} {m['sample_bytes']:>9.0f} {m['first_before']:>17,.0f} "
              f"{m['first_after']:>9,.0f} {m['last_before']:>18,.0f} {m['last_after']:>9,.0f} "
              f"{m['last_before'] / m['last_after']:>5.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
