"""DarkForest's pipeline throughput against the bound set by its busiest engine.

Simulated engines (jobs/perf/simengine.py): every backbone replica serves batches of up to C
requests, each batch taking T = t0 + per_token * n seconds whatever its fill. Three agent
backbones; the coordinator shares b1 (as in jobs/configs/table1_*.yaml), so b1 serves 2 calls
per sample and is the busiest engine: bound = replicas * C / (2 T) samples/s. T is scaled with
the replica count so that the bound is the same at every size (the CPU work per second is then
the same too, and only the pipeline's ability to keep more replicas busy is measured).

Two efficiencies, both = samples/s / bound:
  eff      : samples / wall time of Runner.run (engines already up; Ray Data stage actors'
             start-up and the pipeline's fill and drain included);
  win.eff  : samples / the engine window (first engine batch start to last engine batch end,
             from the simulated engines' logs): the pipeline's steady ability to feed engines,
             without stage start-up.
busy = the busiest replica's busy time / engine window (1.0 = never idle).
head = run start to the first engine batch (Ray Data plans the dataset and starts the stage's
       actors, Ray worker processes that import Ray Data and df_ray: 2 to 3 s on 2 cores, paid
       once per pipeline);
tail = the last engine batch's end to the run's end (grading and writing the last batch).

Variants:
  shipped  : the config defaults (batch_size 8, concurrency 1; --concurrency N overrides).
  tuned    : batch_size = replicas * C (one stage call fills every replica of a backbone).

    .venv/bin/python jobs/perf/pipeline_efficiency.py                    # all, ~12 min on 2 cores
    .venv/bin/python jobs/perf/pipeline_efficiency.py --replicas 1 8 --variants shipped
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header, math_samples, scripted_config, start_ray
from jobs.perf.simengine import SimParams

NICENESS = "RAY_worker_niceness"  # Ray's own (lower-case) name


def run_one(variant: str, replicas: int, n: int, bound: float, capacity: int,
            tokens: int, concurrency: int | None = None) -> dict:
    from df_ray.pipeline.runner import Runner, shared_backbones

    # bound = replicas * C / (2 T)  ->  T = replicas * C / (2 * bound)
    t_batch = replicas * capacity / (2.0 * bound)
    per_token = 0.0002
    params = SimParams(capacity=capacity, t0=max(0.0, t_batch - per_token * tokens),
                       per_token=per_token, tokens=tokens)
    over = {}
    if variant == "tuned":
        over = {"batch_size": replicas * capacity, "concurrency": 2}
    if concurrency is not None:
        over["concurrency"] = concurrency
    with tempfile.TemporaryDirectory(prefix="dfperf-") as tmp:
        logdir = os.environ["DFPERF_SIM_LOG"]
        for f in os.listdir(logdir):
            os.unlink(os.path.join(logdir, f))
        cfg = scripted_config(tmp, script=params.script(), replicas=replicas,
                              max_batch_size=capacity, **over)
        runner = Runner(shared_backbones([cfg]), tracker=None, progress=lambda m: None)
        try:
            _ = runner.pool  # engines up before the clock starts
            samples = math_samples(n, prefix=f"{variant[0]}{replicas}-")
            t0, t_wall0 = time.perf_counter(), time.time()
            res = runner.run(cfg, samples)
            wall = time.perf_counter() - t0
            t_wall1 = t_wall0 + wall
        finally:
            runner.shutdown()
        spans: dict[str, list[tuple[float, float]]] = {}
        for f in os.listdir(logdir):
            with open(os.path.join(logdir, f)) as fh:
                spans[f] = [tuple(map(float, line.split())) for line in fh if line.strip()]
    assert res.metrics["n_samples"] == n and res.metrics["llm_calls_per_sample"] == 4.0
    rate = n / wall
    allspans = [s for v in spans.values() for s in v]
    window = max(e for _, e in allspans) - min(s for s, _ in allspans)
    busiest = max(sum(e - s for s, e in v) for v in spans.values())
    win_rate = n / window
    head = min(s for s, _ in allspans) - t_wall0  # run start -> first engine batch
    tail = t_wall1 - max(e for _, e in allspans)  # last engine batch -> run end
    return {"variant": variant, "replicas": replicas, "batch_s": params.batch_time,
            "head": head, "tail": tail,
            "bound": bound, "rate": rate, "eff": rate / bound, "wall": wall, "win_rate": win_rate,
            "win_eff": win_rate / bound, "busy": busiest / window}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--variants", nargs="+", default=["shipped", "tuned"],
                    choices=["shipped", "tuned"])
    ap.add_argument("--samples", type=int, default=960,
                    help="per run; the fixed start-up (head) weighs less the longer the run")
    ap.add_argument("--bound", type=float, default=16.0,
                    help="the busiest engine's bound in samples/s (T is derived from it)")
    ap.add_argument("--capacity", type=int, default=8, help="C: requests per engine batch")
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--concurrency", type=int,
                    help="stage actors (the config's concurrency; default: the config default)")
    ap.add_argument("--keep-niceness", action="store_true",
                    help="leave Ray's default worker niceness (15) instead of 0")
    args = ap.parse_args(argv)
    if not args.keep_niceness:
        # Ray starts workers at nice 15: on a shared machine the engine and stage actors then
        # measure the neighbours' load, not df_ray (see the report). Local Ray only.
        os.environ.setdefault(NICENESS, "0")
    header("pipeline efficiency: DarkForest samples/s / busiest-engine bound")
    print(f"# {args.samples} samples per run, C={args.capacity}, bound {args.bound} samples/s "
          "at every size (T = replicas * C / (2 * bound)); 3 agent backbones, coordinator on b1; "
          f"Ray worker niceness {os.environ.get(NICENESS, '15 (Ray default)')}")
    os.environ["DFPERF_SIM_LOG"] = tempfile.mkdtemp(prefix="dfperf-simlog-")  # before Ray starts
    start_ray()
    rows = []
    print(f"{'variant':8} {'replicas':>8} {'T(s)':>6} {'bound/s':>8} {'got/s':>7} "
          f"{'eff':>5} {'win/s':>7} {'win.eff':>7} {'busy':>5} {'wall(s)':>7}")
    for variant in args.variants:
        for r in args.replicas:
            row = run_one(variant, r, args.samples, args.bound, args.capacity, args.tokens,
                          args.concurrency)
            rows.append(row)
            print(f"{row['variant']:8} {row['replicas']:>8} {row['batch_s']:>6.2f} "
                  f"{row['bound']:>8.1f} {row['rate']:>7.2f} {row['eff']:>5.2f} "
                  f"{row['win_rate']:>7.2f} {row['win_eff']:>7.2f} {row['busy']:>5.2f} "
                  f"{row['wall']:>7.1f} {row['head']:>5.1f} {row['tail']:>5.1f}",
                  flush=True)
    for key in ("eff", "win_eff"):
        worst = {v: min(r[key] for r in rows if r["variant"] == v) for v in args.variants}
        print(f"# worst {key} per variant: " + ", ".join(f"{v} {e:.2f}" for v, e in worst.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
