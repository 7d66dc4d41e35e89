"""What idle engine replicas cost: N simulated ``EngineActor`` replicas started on a local
Ray, left with nothing to do, their processes' CPU over ``--seconds`` (from /proc).

A cost per second of each replica, not per request: on a loaded 2-core machine a sweep's
engines' window stretches, and this background is then counted, by ``cluster_scale.py``,
against fewer requests per second of window, so the engine actors' CPU-ms per request rises
with the replicas (a sweep at full speed on a real cluster spreads it over far more
requests per second).

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/idle_actors.py --replicas 8 --seconds 20
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header, start_ray


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--window-s", type=float, default=27.0,
                   help="an engines' window to spread it over (cluster_scale.py's)")
    p.add_argument("--requests", type=int, default=4000, help="... and its requests")
    a = p.parse_args()
    header("Idle engine replicas' CPU (simulated engines, local Ray)")
    import psutil
    import ray

    from df_ray.engines import make_spec
    from df_ray.pipeline.engine_pool import EnginePool

    start_ray()
    spec = make_spec(kind="simulated", model="sim", replicas=a.replicas,
                     engine_args={"capacity": 256, "step_s": 0.02, "mean_tokens": 70})
    pool = EnginePool({"b": spec})
    try:
        pool.wait_ready()
        procs = [psutil.Process(int(s["pid"])) for s in pool.stats()]
        time.sleep(2.0)
        before = [sum(p.cpu_times()[:2]) for p in procs]
        time.sleep(a.seconds)
        used = sum(sum(p.cpu_times()[:2]) - b for p, b in zip(procs, before, strict=True))
    finally:
        pool.shutdown()
        ray.shutdown()
    rate = used / a.seconds
    print(f"{a.replicas} idle replicas: {used:.2f} CPU-s in {a.seconds:.0f} s, "
          f"{1000 * rate / a.replicas:.1f} CPU-ms per replica per second")
    print(f"over an engines' window of {a.window_s:.0f} s and {a.requests} requests: "
          f"{1000 * rate * a.window_s / a.requests:.2f} ms per request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
