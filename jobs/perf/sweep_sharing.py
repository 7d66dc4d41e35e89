"""Sweep sharing: fresh LLM calls a full one-benchmark sweep makes through the generation
cache, against the calls its configurations would make if each ran on its own.

The sweep (scripted engines, synthetic MATH samples, one shared engine pool and cache, run
in order like jobs/sweep.py does): Table 1 (every method in df_ray.methods.REGISTRY, with the
method_args of jobs/configs/table1_math.yaml), every DarkForest ablation (no_calibration,
agent_only, no_independence, no_confidence), the disclosure policies (moderate, permissive,
adaptive; strict is the base), the lazy coordinator, and the Table 9 grid
(guardrail k x tau_p x tau_m, 3 x 3 x 3). Ratio = sum of fresh_calls / sum of
llm_calls_per_sample * n. Target <= 0.3.

Two ways to run the sweep (``--mode``): ``fused`` (the default of `df-ray run`: every
configuration over the same samples in one pipeline, each shared call made once) and
``sequential`` (``fuse: false``: one pipeline per configuration, each finding the earlier
ones' calls in the cache). Both print the ratio and the sweep's wall time.

    .venv/bin/python jobs/perf/sweep_sharing.py --samples 8           # ~47 configurations
    .venv/bin/python jobs/perf/sweep_sharing.py --samples 8 --grid small   # 2 x 2 x 2 grid
    .venv/bin/python jobs/perf/sweep_sharing.py --mode fused
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header, math_samples, scripted_config, start_ray

TABLE1 = [
    {"name": "darkforest", "method": "darkforest"},
    {"name": "single-a1", "method": "single", "method_args": {"agent": "a1"}},
    {"name": "single-a2", "method": "single", "method_args": {"agent": "a2"}},
    {"name": "single-a3", "method": "single", "method_args": {"agent": "a3"}},
    {"name": "self_consistency", "method": "self_consistency",
     "method_args": {"agent": "a1", "samples": 5}},
    {"name": "weighted_vote", "method": "weighted_vote"},
    {"name": "debate", "method": "debate", "method_args": {"rounds": 2}},
    {"name": "reconcile", "method": "reconcile", "method_args": {"rounds": 2}},
    {"name": "moa", "method": "moa", "method_args": {"layers": 2}},
    {"name": "goa_mean", "method": "goa_mean"},
    {"name": "goa_max", "method": "goa_max"},
    {"name": "self_refine", "method": "self_refine", "method_args": {"agent": "a1", "iterations": 2}},
]


def configurations(grid: str) -> list[dict]:
    from df_ray.methods import REGISTRY

    runs = [r for r in TABLE1 if r["method"] in REGISTRY]
    runs += [{"name": f"ablation-{a}", "method_args": {"ablation": a}}
             for a in ("no_calibration", "agent_only", "no_independence", "no_confidence")]
    runs += [{"name": f"disclosure-{p}", "method_args": {"disclosure": p}}
             for p in ("moderate", "permissive", "adaptive")]
    runs += [{"name": "lazy", "method_args": {"lazy": True}}]
    ks, tps, tms = ([1, 2, 3], [0.5, 0.66, 0.8], [0.1, 0.3, 0.5]) if grid == "full" else \
        ([1, 2], [0.5, 0.8], [0.1, 0.5])
    runs += [{"name": f"t9 k={k} tau_p={p} tau_m={m}",
              "method_args": {"guardrail": {"k": k, "tau_p": p, "tau_m": m}}}
             for k in ks for p in tps for m in tms]
    return runs


def measure(mode: str, samples, grid: str) -> tuple[float, float, float]:
    """(fresh calls, calls one by one, wall seconds) of the whole sweep in ``mode``."""
    from df_ray.core import fit_calibration
    from df_ray.pipeline.runner import Runner, shared_backbones

    with tempfile.TemporaryDirectory(prefix="dfperf-sweep-") as tmp:
        cal = fit_calibration([], agents=["a1", "a2", "a3"], benchmark="math")
        cal_path = cal.save(Path(tmp) / "cal.json")
        base = {"batch_size": 64, "concurrency": 1,
                "calibration": {"path": str(cal_path), "auto_fit": False}}
        cfgs = []
        for run in configurations(grid):
            over = {**base, "method_args": {}, **run}
            if over.get("method", "darkforest") == "darkforest":  # calibrated, unless it says
                over["method_args"] = {"ablation": "full", **over["method_args"]}
            cfgs.append(scripted_config(tmp, script="majority", **over))
        runner = Runner(shared_backbones(cfgs), tracker=None, progress=lambda m: None)
        print(f"# {mode}: {len(cfgs)} configurations x {len(samples)} samples; scripted "
              "'majority' engines")
        print(f"{'configuration':34} {'calls/sample':>12} {'calls':>6} {'fresh':>6}")
        tot_calls = tot_fresh = 0.0
        try:
            _ = runner.pool  # engines up before the clock starts
            t = time.time()
            if mode == "fused":
                results = runner.run_many(cfgs, samples)
            else:
                results = [runner.run(cfg, samples) for cfg in cfgs]
            wall = time.time() - t
        finally:
            runner.shutdown()
        for cfg, r in zip(cfgs, results, strict=True):
            m = r.metrics
            calls = m["llm_calls_per_sample"] * m["n_samples"]
            tot_calls += calls
            tot_fresh += m["fresh_calls"]
            print(f"{cfg.name:34} {m['llm_calls_per_sample']:>12.2f} {calls:>6.0f} "
                  f"{m['fresh_calls']:>6.0f}", flush=True)
    print(f"# {mode}: {tot_fresh:.0f} fresh calls / {tot_calls:.0f} calls one by one = "
          f"{tot_fresh / tot_calls:.3f} (target <= 0.3); sweep wall time {wall:.1f} s")
    return tot_fresh, tot_calls, wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--grid", choices=["full", "small"], default="full")
    ap.add_argument("--mode", choices=["fused", "sequential", "both"], default="both")
    args = ap.parse_args(argv)
    header("sweep sharing: fresh LLM calls / calls made one configuration at a time")
    start_ray()
    samples = math_samples(args.samples, prefix="sw")
    modes = ["sequential", "fused"] if args.mode == "both" else [args.mode]
    walls = {m: measure(m, samples, args.grid)[2] for m in modes}
    if len(walls) == 2:
        print(f"# sweep wall time: sequential {walls['sequential']:.1f} s, fused "
              f"{walls['fused']:.1f} s ({walls['sequential'] / walls['fused']:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
