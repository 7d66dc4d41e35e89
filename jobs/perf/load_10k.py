"""Load benchmark: a 10,000-sample DarkForest run on scripted engines at high concurrency,
with the driver's peak memory measured.

    .venv/bin/python jobs/perf/load_10k.py                        # 10,000 samples
    .venv/bin/python jobs/perf/load_10k.py --samples 1000,10000   # one process per size,
                                                                  # plus the per-sample slope

What runs: an MMLU-Pro source of N distinct GoA-style questions (150 per category, so the
test split takes all of them), 3 agents + a coordinator on scripted engines (the builtin
``majority`` responder, no latency), ablation no_calibration, batch_size 64, concurrency 4,
a fresh generation cache and a local SQLite MLflow store under --out. The run goes through
``run_sweep`` exactly as ``df-ray run`` does (preflight, engines, Ray Data stages, metrics,
MLflow), in this process, which is therefore the driver.

Measured: wall time, samples/s, and the driver's resident set size, sampled every 50 ms by a
thread (psutil; ``ru_maxrss`` as a cross-check): its baseline after Ray has started and the
peak during the run. Checked: every sample is graded exactly once (samples.parquet) and
every call was fresh (4 per sample).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PER_CATEGORY = 150  # MMLU-Pro's test split takes the first 150 rows of each category


def write_source(path: Path, n: int) -> None:
    rows = []
    for i in range(n):
        opts = " ".join(f"({c}) option {c.lower()} of item {i}" for c in "ABCD")
        rows.append({"question": f"[load{i}] Which option is right for item {i}? "
                                 f"The options are: {opts}.",
                     "gold_answer": "ABCD"[i % 4], "category": f"c{i // PER_CATEGORY}"})
    path.write_text(json.dumps(rows))


class RssSampler(threading.Thread):
    def __init__(self, every_s: float = 0.05) -> None:
        super().__init__(daemon=True)
        import psutil

        self.proc = psutil.Process()
        self.every_s = every_s
        self.peak = self.proc.memory_info().rss
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.every_s)

    def stop(self) -> int:
        self._halt.set()
        self.join()
        return self.peak


def darkforest_base(name: str, n: int, out: Path, backbone, batch_size: int,
                    concurrency: int) -> dict:
    """A DarkForest configuration over ``n`` written questions in ``out``: three agents and a
    coordinator, each on its own backbone (``backbone(name)``: b1, b2, b3, bc), no
    calibration; its cache, results and MLflow store under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    src = out / "mmlu_load.json"
    write_source(src, n)
    return {
        "name": f"{name}{n}", "benchmark": "mmlu_pro", "source": str(src),
        "backbones": {f"b{m}": backbone(m) for m in ("1", "2", "3", "c")},
        "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2, 3)],
        "coordinator": {"id": "coord", "backbone": "bc"},
        "method_args": {"ablation": "no_calibration"}, "calibration": {"auto_fit": False},
        "cache_root": str(out / "cache"), "results_dir": str(out / "results"),
        "tracking": {"uri": f"sqlite:///{out}/mlflow.db", "experiment": name},
        "batch_size": batch_size, "concurrency": concurrency,
    }


def run_one(n: int, out: Path, batch_size: int, concurrency: int) -> dict:
    import pyarrow.parquet as pq

    from df_ray.config import SweepConfig
    from df_ray.pipeline.runner import init_ray, run_sweep

    base = darkforest_base("load", n, out, lambda m: {
        "kind": "scripted", "model": f"m{m}", "script": "majority", "max_batch_size": 64},
        batch_size, concurrency)
    sweep = SweepConfig.model_validate({"name": "load", "base": base})
    for attempt in range(3):  # Ray gives its raylet 30 s to start: too short on a loaded box
        try:
            init_ray()
            break
        except Exception as e:
            if "timed out during startup" not in str(e) or attempt == 2:
                raise
            import ray

            ray.shutdown()
    import psutil

    baseline = psutil.Process().memory_info().rss
    sampler = RssSampler()
    sampler.start()
    t0 = time.time()
    (res,) = run_sweep(sweep, progress=lambda m: None)
    wall = time.time() - t0
    peak = sampler.stop()
    ids = pq.read_table(res.samples_path, columns=["sample_id"]).column("sample_id").to_pylist()
    return {
        "samples": n, "graded": int(res.metrics["n_samples"]), "unique_ids": len(set(ids)),
        "rows": len(ids), "fresh_calls": int(res.metrics["fresh_calls"]),
        "failed_calls": int(res.metrics.get("failed_calls", 0)),
        "wall_s": round(wall, 1), "samples_per_s": round(n / wall, 1),
        "rss_baseline_mb": round(baseline / 2**20, 1), "rss_peak_mb": round(peak / 2**20, 1),
        "rss_growth_mb": round((peak - baseline) / 2**20, 1),
        "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "batch_size": batch_size, "concurrency": concurrency, "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", default="10000", help="a size, or sizes separated by commas")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--out", help="work folder (default: a fresh temporary one)")
    p.add_argument("--json", help="also write the figures here (a list, one per size)")
    args = p.parse_args(argv)
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    sizes = [int(s) for s in args.samples.split(",")]
    out = Path(args.out or tempfile.mkdtemp(prefix="df_ray_load_"))
    if len(sizes) == 1:
        figures = [run_one(sizes[0], out / f"n{sizes[0]}", args.batch_size, args.concurrency)]
    else:  # a fresh driver process per size, so that the peaks are comparable
        figures = []
        for n in sizes:
            f = out / f"n{n}.json"
            subprocess.run([sys.executable, __file__, "--samples", str(n), "--out", str(out),
                            "--batch-size", str(args.batch_size),
                            "--concurrency", str(args.concurrency), "--json", str(f)],
                           check=True)
            figures.extend(json.loads(f.read_text()))
    print(f"\ncommand: {command}")
    print(f"{'samples':>8} {'graded':>7} {'wall s':>7} {'samp/s':>7} {'fresh calls':>11} "
          f"{'RSS base MB':>11} {'RSS peak MB':>11} {'growth MB':>9}")
    for f in figures:
        print(f"{f['samples']:>8} {f['graded']:>7} {f['wall_s']:>7} {f['samples_per_s']:>7} "
              f"{f['fresh_calls']:>11} {f['rss_baseline_mb']:>11} {f['rss_peak_mb']:>11} "
              f"{f['rss_growth_mb']:>9}")
    if len(figures) > 1:
        a, b = figures[0], figures[-1]
        slope = (b["rss_peak_mb"] - a["rss_peak_mb"]) * 1024 / (b["samples"] - a["samples"])
        print(f"driver peak RSS grows by {slope:.2f} KB per sample")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    ok = all(f["graded"] == f["samples"] == f["unique_ids"] == f["rows"]
             and f["fresh_calls"] == 4 * f["samples"] for f in figures)
    print("every sample accounted for" if ok else "SAMPLES MISSING OR DUPLICATED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
