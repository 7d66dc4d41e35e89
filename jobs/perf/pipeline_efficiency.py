"""DarkForest's pipeline throughput against the bound set by its busiest engine.

Two simulated engines (``--engine``):

  static     : jobs/perf/simengine.py: every backbone replica serves batches of up to C
               requests, each batch taking T = t0 + per_token * n seconds whatever its fill,
               every answer n tokens (an idealised engine). Three agent backbones; the
               coordinator shares b1 (as in jobs/configs/table1_*.yaml), so b1 serves 2 calls
               per sample and is the busiest engine: bound = replicas * C / (2 T) samples/s.
               T is scaled with the replica count so that the bound is the same at every size
               (the CPU work per second is then the same too, and only the pipeline's ability
               to keep more replicas busy is measured).
  continuous : df_ray.engines.simulated (kind ``simulated``): continuous batching as vLLM
               does it, up to C sequences at once, one token each per step of S seconds,
               completion lengths long-tailed (log-normal, mean --mean-tokens, shape --sigma,
               drawn per request). The bound is each replica's own offline time over the very
               requests it served (all of them waiting from the start, admitted in order into
               free slots: what vLLM's LLM.generate over the same work would take); the
               slowest replica's sets the run's bound. S is scaled with the replica count as T
               is above.

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
    .venv/bin/python jobs/perf/pipeline_efficiency.py --engine continuous --variants shipped
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

#: The continuous engine's per-step time at one replica (s); its bound follows from the
#: lengths drawn.
STEP_S = 0.02

NICENESS = "RAY_worker_niceness"  # Ray's own (lower-case) name


def run_one(variant: str, replicas: int, n: int, bound: float, capacity: int,
            tokens: int, concurrency: int | None = None, engine: str = "static",
            mean_tokens: float = 70.0, sigma: float = 1.0) -> dict:
    from df_ray.pipeline.runner import Runner, shared_backbones

    # bound = replicas * C / (2 T)  ->  T = replicas * C / (2 * bound)
    t_batch = replicas * capacity / (2.0 * bound)
    per_token = 0.0002
    params = SimParams(capacity=capacity, t0=max(0.0, t_batch - per_token * tokens),
                       per_token=per_token, tokens=tokens)
    step_s = STEP_S * replicas
    sim = {"kind": "simulated", "engine_args": {"capacity": capacity, "step_s": step_s,
                                                "mean_tokens": mean_tokens, "sigma": sigma}}
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
                              max_batch_size=capacity,
                              engine=sim if engine == "continuous" else None, **over)
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
        lengths: dict[str, list[int]] = {}
        running: dict[str, list[int]] = {}
        for f in os.listdir(logdir):
            with open(os.path.join(logdir, f)) as fh:
                rows = [line.split() for line in fh if line.strip()]
            if f.endswith(".lengths"):
                lengths[f] = [int(r[0]) for r in rows]
            else:
                spans[f] = [(float(r[0]), float(r[1])) for r in rows]
                running[f] = [int(r[2]) for r in rows if len(r) > 2]
    assert res.metrics["n_samples"] == n and res.metrics["llm_calls_per_sample"] == 4.0
    allspans = [s for v in spans.values() for s in v]
    window = max(e for _, e in allspans) - min(s for s, _ in allspans)
    busiest = max(sum(e - s for s, e in v) for v in spans.values())
    extra = {}
    if engine == "continuous":
        from df_ray.engines.simulated import offline_time

        # Each replica's own offline time over what it served; the slowest sets the bound.
        own = max(offline_time(v, capacity, step_s) for v in lengths.values())
        bound = n / own
        steps = [r for v in running.values() for r in v]
        all_lengths = [x for v in lengths.values() for x in v]
        extra = {"mean_running": sum(steps) / len(steps),
                 "mean_tokens": sum(all_lengths) / len(all_lengths), "batch_s": step_s}
    rate = n / wall
    win_rate = n / window
    head = min(s for s, _ in allspans) - t_wall0  # run start -> first engine batch
    tail = t_wall1 - max(e for _, e in allspans)  # last engine batch -> run end
    return {"variant": variant, "replicas": replicas, "batch_s": params.batch_time,
            "head": head, "tail": tail,
            "bound": bound, "rate": rate, "eff": rate / bound, "wall": wall, "win_rate": win_rate,
            "win_eff": win_rate / bound, "busy": busiest / window, **extra}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--variants", nargs="+", default=["shipped", "tuned"],
                    choices=["shipped", "tuned"])
    ap.add_argument("--samples", type=int, default=960,
                    help="per run; the fixed start-up (head) weighs less the longer the run")
    ap.add_argument("--bound", type=float, default=16.0,
                    help="the busiest engine's bound in samples/s (T is derived from it)")
    ap.add_argument("--engine", choices=["static", "continuous"], default="static",
                    help="the simulated engine (see the module docstring)")
    ap.add_argument("--capacity", type=int,
                    help="C: requests per engine batch / sequences at once (default: 8 "
                    "static, 64 continuous)")
    ap.add_argument("--mean-tokens", type=float, default=70.0,
                    help="continuous: mean completion length")
    ap.add_argument("--sigma", type=float, default=1.0,
                    help="continuous: log-normal shape of the lengths (0: all equal)")
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--concurrency", type=int,
                    help="stage actors (the config's concurrency; default: the config default)")
    ap.add_argument("--keep-niceness", action="store_true",
                    help="leave Ray's default worker niceness (15) instead of 0")
    args = ap.parse_args(argv)
    if args.capacity is None:
        args.capacity = 64 if args.engine == "continuous" else 8
    if not args.keep_niceness:
        # Ray starts workers at nice 15: on a shared machine the engine and stage actors then
        # measure the neighbours' load, not df_ray (see the report). Local Ray only.
        os.environ.setdefault(NICENESS, "0")
    header("pipeline efficiency: DarkForest samples/s / busiest-engine bound")
    if args.engine == "continuous":
        print(f"# {args.samples} samples per run, continuous engine: C={args.capacity} "
              f"sequences, step {STEP_S} s x replicas, lengths log-normal mean "
              f"{args.mean_tokens:g} sigma {args.sigma:g}; bound = the slowest replica's own "
              "offline time over its requests; 3 agent backbones, coordinator on b1; Ray "
              f"worker niceness {os.environ.get(NICENESS, '15 (Ray default)')}")
    else:
        print(f"# {args.samples} samples per run, C={args.capacity}, bound {args.bound} "
              "samples/s at every size (T = replicas * C / (2 * bound)); 3 agent backbones, "
              "coordinator on b1; Ray worker niceness "
              f"{os.environ.get(NICENESS, '15 (Ray default)')}")
    os.environ["DFPERF_SIM_LOG"] = tempfile.mkdtemp(prefix="dfperf-simlog-")  # before Ray starts
    start_ray()
    rows = []
    print(f"{'variant':8} {'replicas':>8} {'T(s)':>6} {'bound/s':>8} {'got/s':>7} "
          f"{'eff':>5} {'win/s':>7} {'win.eff':>7} {'busy':>5} {'wall(s)':>7}")
    for variant in args.variants:
        for r in args.replicas:
            row = run_one(variant, r, args.samples, args.bound, args.capacity, args.tokens,
                          args.concurrency, args.engine, args.mean_tokens, args.sigma)
            rows.append(row)
            print(f"{row['variant']:8} {row['replicas']:>8} {row['batch_s']:>6.2f} "
                  f"{row['bound']:>8.1f} {row['rate']:>7.2f} {row['eff']:>5.2f} "
                  f"{row['win_rate']:>7.2f} {row['win_eff']:>7.2f} {row['busy']:>5.2f} "
                  f"{row['wall']:>7.1f} {row['head']:>5.1f} {row['tail']:>5.1f}"
                  + (f" running {row['mean_running']:.1f}/{args.capacity} tokens "
                     f"{row['mean_tokens']:.0f}" if "mean_running" in row else ""),
                  flush=True)
    for key in ("eff", "win_eff"):
        worst = {v: min(r[key] for r in rows if r["variant"] == v) for v in args.variants}
        print(f"# worst {key} per variant: " + ", ".join(f"{v} {e:.2f}" for v, e in worst.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
