"""A run's fixed costs on the embedded local Ray: where the time goes from the job's start to
the first engine step, and from the last answer to the job's end, for a small sweep run as
``df-ray run`` runs it (`run_sweep`: preflight, MLflow, a local Ray, the engines, the Ray Data
pipeline, the results and the MLflow runs, the engines stopped, the cache's journals folded)
over DarkForest on four scripted backbones, which answer at once: what is left is df_ray's and
Ray's own start and end.

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/startup_drain.py --samples 32 --repeat 2
    PYTHONPATH=$PWD .venv/bin/python jobs/perf/startup_drain.py --baseline <other checkout>

Each run is a fresh process and prints, in seconds from its start: Ray up, engines ready
(started and smoke-tested), the first engine step, the last answer, every configuration
graded and logged, the sweep's end and Ray shut down; then start-up (process start to the
first engine step), the engines' start (Ray up to engines ready), the stage's start (engines
ready to the first engine step: Ray Data's stage actor, a worker process of its own), the
engines' window, the drain (last answer to the sweep's end) and Ray's shutdown. ``--baseline``: the same runs in another checkout,
alternated with this one's in one invocation, so that both see the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = time.time()  # the process's start, before anything is imported

#: The checkout a run imports df_ray from (``--baseline`` runs set it), else this one.
TREE = os.environ.get("DF_RAY_PERF_TREE") or str(Path(__file__).resolve().parents[2])
sys.path.insert(0, TREE)

from jobs.perf.common import header  # noqa: E402

PHASES = ("ray_up", "engines_ready", "first_step", "last_answer", "graded", "sweep_end",
          "ray_down")


def one_run(samples: int) -> dict[str, float]:
    """One small sweep in this process, as ``df-ray run`` runs it (`run_sweep`: preflight,
    MLflow, a local Ray, the engines, the pipeline, the end): each phase's time since the
    process started."""
    import ray

    from df_ray.config import SweepConfig
    from df_ray.pipeline import runner
    from tests.helpers import base_config, write_mmlu_goa

    at: dict[str, float] = {}
    stats: list[dict] = []

    def mark(name: str) -> None:
        at.setdefault(name, time.time() - T0)

    init_ray, shutdown = runner.init_ray, runner.Runner.shutdown

    def timed_init(*a, **k):
        init_ray(*a, **k)
        mark("ray_up")

    def timed_shutdown(self):  # the configurations are done: the engines' own figures first
        mark("graded")
        if self.engines._pool is not None:
            stats.extend(self.pool.stats())
        shutdown(self)

    runner.init_ray, runner.Runner.shutdown = timed_init, timed_shutdown
    with tempfile.TemporaryDirectory(prefix="dfperf-startup-") as tmp:
        base = base_config(Path(tmp), write_mmlu_goa(Path(tmp) / "mmlu.json", samples),
                           batch_size=8, concurrency=1)
        sweep = SweepConfig(name="startup", base=base, runs=[{"name": "df"}])
        results = runner.run_sweep(sweep, progress=lambda m: m.startswith("engines ready")
                                   and mark("engines_ready"))
        mark("sweep_end")
        ray.shutdown()
        mark("ray_down")
    assert [r.metrics["n_samples"] for r in results] == [samples]
    at["first_step"] = min(s["first_at"] for s in stats if s["first_at"]) - T0
    at["last_answer"] = max(s["last_at"] for s in stats if s["last_at"]) - T0
    return at


def figures(at: dict[str, float]) -> dict[str, float]:
    return {"start-up": at["first_step"],
            "engines' start": at["engines_ready"] - at["ray_up"],
            "stage start": at["first_step"] - at["engines_ready"],
            "window": at["last_answer"] - at["first_step"],
            "drain": at["sweep_end"] - at["last_answer"],
            "Ray shutdown": at["ray_down"] - at["sweep_end"]}


def in_process(tree: Path, samples: int) -> dict[str, float]:
    """One run in a fresh process of ``tree``'s checkout (its df_ray on PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "DF_RAY_PERF_TREE": str(tree)}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                          "--samples", str(samples)], cwd=tree, env=env,
                         capture_output=True, text=True, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        raise SystemExit(f"a run in {tree} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--repeat", type=int, default=1, help="runs per checkout")
    p.add_argument("--baseline", type=Path, help="another checkout, run alternately")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(one_run(a.samples)))
        return 0
    header("start-up and drain of a small local sweep (DarkForest, four scripted backbones)")
    here = Path(__file__).resolve().parents[2]
    trees = [("baseline", a.baseline.resolve()), ("this", here)] if a.baseline \
        else [("this", here)]
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for _ in range(a.repeat):
        for name, tree in trees:
            at = in_process(tree, a.samples)
            rows[name].append(at)
            phases = "  ".join(f"{k} {at[k]:.1f}" for k in PHASES)
            print(f"{name:>8}: {phases}  |  " + "  ".join(
                f"{k} {v:.2f} s" for k, v in figures(at).items()), flush=True)
    for name, runs in rows.items():
        mean = {k: sum(figures(r)[k] for r in runs) / len(runs) for k in figures(runs[0])}
        print(f"{name:>8} mean of {len(runs)}: " + "  ".join(
            f"{k} {v:.2f} s" for k, v in mean.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
