"""The head's loss, measured: a sweep submitted with `ray job submit` to a simulated cluster
(`jobs/perf/sim_cluster.py`: a head that runs the job's driver and stages, a worker node
declaring the GPUs), the head lost mid-sweep as a machine is lost (every process of its node
SIGKILLed, the driver with it), then a NEW cluster (another head and worker: other ports,
temp dirs and Ray session) on the same shared DF_RAY_HOME, and the same sweep submitted
again.

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/head_loss.py --samples 48 --kill-after 16

Every backbone is a scripted engine (``latency_s`` seconds a request, one GPU a replica) that
logs each call it makes (``DF_RAY_CALL_LOG``), so the calls of both jobs are counted where
they are made. Printed: what the client sees when the head is gone; how long the worker's
engines went on working without their head, and the calls they made then (nobody receives
them; their replicas journal them); the calls in the cache after the loss (its parts and the
engines' journals); the resubmit's calls: made again though cached, made again though answered
but not cached (lost), never made before; the calls answered before the loss that the
resubmit made again (the goal: 0); the results' rows; and the resubmit's line about the lost
run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header
from jobs.perf.sim_cluster import SimCluster, pids_matching, sim_cluster
from tests.helpers import base_config, write_mmlu_goa, write_sweep
from tests.reliability.responders import read_call_log


def sweep_file(work: Path, home: Path, n: int, latency_s: float) -> Path:
    """DarkForest, 3 agents and a coordinator, one scripted backbone each (one GPU, one
    replica), every path on the shared ``home``."""
    base = base_config(home, write_mmlu_goa(work / "mmlu.json", n), batch_size=2,
                       concurrency=1, experiment="head-loss")
    base["backbones"] = {b: {"kind": "scripted", "model": f"m-{b}", "num_gpus": 1,
                             "script": "tests.reliability.responders:logged_majority",
                             "engine_args": {"latency_s": latency_s}}
                         for b in ("b1", "b2", "b3", "bc")}
    return write_sweep(work / "sweep.yaml", base, [{"name": "df"}], name="head-loss")


def cache_keys(home: Path) -> set[str]:
    from df_ray.pipeline.cache import GenerationCache

    return set(GenerationCache(str(home / "cache")).keys())


def lose_head(c: SimCluster, job: str, calls: Path, after: int) -> dict:
    """Wait for ``after`` calls, lose the head; what the client saw, and how long the
    worker's engines went on."""
    deadline = time.time() + 600
    while len(read_call_log(calls)) < after:
        if time.time() > deadline:
            raise TimeoutError(f"fewer than {after} calls in 600 s")
        time.sleep(0.2)
    at_loss = len(read_call_log(calls))
    c.kill_head()
    lost_at = time.time()
    try:
        seen = f"status {c.client().get_job_status(job)}"
    except Exception as e:  # what `ray job status` / a following `ray job submit` gets
        seen = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    last_call, n = lost_at, at_loss
    while pids_matching(f"{c.temp_dir}/n1") and time.time() - lost_at < 300:
        if len(read_call_log(calls)) > n:
            n, last_call = len(read_call_log(calls)), time.time()
        time.sleep(0.5)
    return {"at_loss": at_loss, "client": seen, "worker_gone_s": time.time() - lost_at,
            "calls_after_s": last_call - lost_at, "made": read_call_log(calls)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=48)
    p.add_argument("--latency", type=float, default=0.5, help="seconds per request")
    p.add_argument("--kill-after", type=int, default=16, help="calls made before the loss")
    p.add_argument("--workdir", default=None)
    a = p.parse_args()
    header("head_loss: the head lost mid-sweep, the sweep resubmitted on a new head")
    work = Path(a.workdir or tempfile.mkdtemp(prefix="df-ray-head-loss-"))
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    sweep = sweep_file(work, home, a.samples, a.latency)
    env = {"DF_RAY_HOME": str(home)}
    with sim_cluster(work / "first", [0, 4], head_cpus=4) as c:
        job = c.submit(sweep, "first", {**env, "DF_RAY_CALL_LOG": str(work / "calls1.log")})
        lost = lose_head(c, job, work / "calls1.log", a.kill_after)
    cached, made1 = cache_keys(home), set(lost["made"])
    t = time.time()
    with sim_cluster(work / "second", [0, 4], head_cpus=4) as c:
        job = c.submit(sweep, "again", {**env, "DF_RAY_CALL_LOG": str(work / "calls2.log")})
        status, logs = c.wait_job(job, 900)
    made2 = read_call_log(work / "calls2.log")
    import pyarrow.parquet as pq

    rows = [r for f in (home / "results").rglob("samples.parquet")
            for r in pq.read_table(f, columns=["sample_id"]).column("sample_id").to_pylist()]
    said = [ln for ln in logs.splitlines() if "previous run never ended" in ln]
    print(f"first job: {lost['at_loss']} calls when the head was lost; the client then got: "
          f"{lost['client']}")
    print(f"without their head the worker's engines made {len(lost['made']) - lost['at_loss']}"
          f" more calls for {lost['calls_after_s']:.1f} s (nobody received them); the worker "
          f"node gave up after {lost['worker_gone_s']:.0f} s")
    print(f"cache after the loss (parts and engine journals): {len(cached)} calls of "
          f"{len(made1)} distinct calls made")
    print(f"resubmit on a new head: {status} in {time.time() - t:.0f} s (new cluster "
          f"included), {len(made2)} calls: {len(set(made2) & cached)} of them cached "
          f"(made again), {len((set(made2) & made1) - cached)} answered before the loss "
          f"but not cached (lost in flight), {len(set(made2) - made1)} never made before")
    before = set(lost["made"][:lost["at_loss"]])
    print(f"calls answered before the loss made again: {len(set(made2) & before)} of "
          f"{len(before)} (and of every call the first job made: {len(set(made2) & made1)} "
          f"of {len(made1)})")
    print(f"results: {len(rows)} rows, {len(set(rows))} distinct samples of {a.samples}")
    print(f"the resubmit said: {said[0].strip() if said else '(nothing)'}")
    return 0 if status == "SUCCEEDED" and not set(made2) & cached else 1


if __name__ == "__main__":
    from jobs.perf.sim_cluster import stop_on_sigterm

    stop_on_sigterm()
    sys.exit(main())
