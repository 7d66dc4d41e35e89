"""Placement and node loss on a simulated 2-node cluster (head and one worker, 2 declared GPUs
each; `tests/cluster/conftest.py`), sweeps submitted with `ray job submit` as a lab does.

- A ``tensor_parallel_size: 2`` engine's replica holds two GPUs of one node; the replicas of
  a backbone go to different nodes; a sweep asking for more GPUs than exist is refused
  before any engine starts, naming what it asked and what exists.
- (a) Each backbone has a replica on both nodes; the worker is killed mid-sweep: the sweep
  finishes on the head's replicas with every sample exactly once, and a resubmit makes no call.
- (b) Four one-replica backbones fill the four GPUs; the worker is killed mid-sweep: the
  backbones it held have no replica left and no GPU free, so the job stops with one line
  naming one of them, within 2 minutes; once the worker is back, a resubmit makes only the
  calls that were not cached.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from df_ray.pipeline.cache import GenerationCache
from tests.helpers import base_config, write_mmlu_goa, write_sweep
from tests.reliability.responders import read_call_log

pytestmark = pytest.mark.slow

N = 24


def _keys(root: Path) -> set[str]:
    return set(GenerationCache(str(root))._entries)


def _sweep(tmp: Path, backbones: dict, agents: list[str], coordinator: str,
           latency_s: float, n: int = N) -> Path:
    """The sweep file (``sweep-<latency>.yaml``): a resubmit without latency shares every
    call with the first (engine settings are not part of a call's key) and runs faster."""
    tmp.mkdir(exist_ok=True)
    src = write_mmlu_goa(tmp / "mmlu.json", n)
    base = base_config(tmp, src, batch_size=2, concurrency=1, experiment="cluster")
    base["backbones"] = {name: {"kind": "scripted", "model": f"m-{name}", "num_gpus": 1,
                                "script": "tests.reliability.responders:logged_majority",
                                "engine_args": {"latency_s": latency_s}, **extra}
                         for name, extra in backbones.items()}
    base["agents"] = [{"id": f"a{i + 1}", "backbone": b} for i, b in enumerate(agents)]
    base["coordinator"] = {"id": "coord", "backbone": coordinator}
    return write_sweep(tmp / f"sweep-{latency_s:g}.yaml", base, [{"name": "df"}], name="cluster")


def _env(tmp: Path, log: str, **extra: str) -> dict[str, str]:
    return {"DF_RAY_HOME": str(tmp / "home"), "DF_RAY_CALL_LOG": str(tmp / log), **extra}


def _revive(cluster) -> None:
    """The worker back (after a test that lost it)."""
    if len(cluster.alive_nodes()) < 2:
        cluster.start_node(1)
        cluster.wait_nodes(2)


def _wait_calls(path: Path, n: int, timeout_s: float = 240) -> None:
    deadline = time.time() + timeout_s
    while len(read_call_log(path)) < n:
        assert time.time() < deadline, f"fewer than {n} calls in {timeout_s:.0f}s"
        time.sleep(0.2)


def _results(tmp: Path) -> list[str]:
    (path,) = (tmp / "results").rglob("*.parquet")
    return pq.read_table(path, columns=["sample_id"]).column("sample_id").to_pylist()


def test_tensor_parallel_replicas_hold_two_gpus_of_one_node_and_spread(two_nodes):
    """Driver-level: the pool's placement, read back from the replicas' life reports."""
    _revive(two_nodes)
    lives = two_nodes.driver(
        "from df_ray.engines import make_spec\n"
        "from df_ray.pipeline.engine_pool import EnginePool\n"
        "pool = EnginePool({'tp': make_spec(kind='simulated', model='m', replicas=2,\n"
        "                                   tensor_parallel_size=2)})\n"
        "pool.wait_ready(180)\n"
        "result = [lives[-1] for lives in pool.supervisor.lives().values()]\n"
        "pool.shutdown()\n")
    assert len(lives) == 2
    assert all(len(life["gpu_ids"]) == 2 for life in lives)  # both GPUs of a node
    assert len({life["node_id"] for life in lives}) == 2  # one replica per node


def test_a_sweep_asking_for_more_gpus_than_exist_is_refused_before_engines(two_nodes,
                                                                            tmp_path):
    _revive(two_nodes)
    sweep = _sweep(tmp_path / "big", {"b1": {"replicas": 3}, "b2": {"replicas": 2}},
                   ["b1", "b2", "b1"], "b2", 0.0)
    job = two_nodes.submit(sweep, "too-big", _env(tmp_path, "calls.log"))
    status, logs = two_nodes.wait_job(job, 300)
    assert status == "FAILED"
    (line,) = [ln for ln in logs.splitlines() if ln.startswith("df-ray:")]
    assert ("2 backbone(s) ask for 5 GPUs and 0 CPUs together (replicas x per replica: "
            "'b1' 3 x 1 GPUs / 0 CPUs, 'b2' 2 x 1 GPUs / 0 CPUs)") in line
    assert "the cluster has 4 GPUs" in line and "(GPUs per node: 2, 2)" in line
    assert "starting engines" not in logs
    assert read_call_log(tmp_path / "calls.log") == []


def test_a_lost_worker_costs_only_its_calls_in_flight(two_nodes, tmp_path):
    _revive(two_nodes)
    sweep = _sweep(tmp_path / "a", {"b1": {"replicas": 2}, "b2": {"replicas": 2}},
                   ["b1", "b2", "b1"], "b2", 0.3)
    calls = tmp_path / "a" / "calls.log"
    job = two_nodes.submit(sweep, "lose-worker", _env(tmp_path / "a", "calls.log"))
    _wait_calls(calls, 16)
    two_nodes.kill_node(1)
    status, logs = two_nodes.wait_job(job, 300)
    assert status == "SUCCEEDED", logs[-4000:]
    assert "is gone" in logs  # the client moved the lost replicas' calls
    ids = _results(tmp_path / "a")
    assert sorted(ids) == sorted(set(ids)) and len(ids) == N  # every sample exactly once
    made = len(read_call_log(calls))
    _revive(two_nodes)  # the sweep asks for 4 GPUs: the pre-start check wants them there
    # the same sweep without latency: another fingerprint, so it runs again, from the cache
    again = _sweep(tmp_path / "a", {"b1": {"replicas": 2}, "b2": {"replicas": 2}},
                   ["b1", "b2", "b1"], "b2", 0.0)
    job = two_nodes.submit(again, "lose-worker-again", _env(tmp_path / "a", "calls.log"))
    status, logs = two_nodes.wait_job(job, 300)
    assert status == "SUCCEEDED", logs[-4000:]
    assert len(read_call_log(calls)) == made  # the resubmit made no call


def test_a_backbone_lost_with_its_only_node_stops_the_sweep_in_one_line(two_nodes, tmp_path):
    _revive(two_nodes)
    root = tmp_path / "b"
    sweep = _sweep(root, {"b1": {}, "b2": {}, "b3": {}, "bc": {}}, ["b1", "b2", "b3"], "bc",
                   2.0, n=48)
    env = _env(root, "calls1.log", DF_RAY_LOST_BACKBONE_WAIT_S="10")
    job = two_nodes.submit(sweep, "lose-backbone", env)
    _wait_calls(root / "calls1.log", 8)
    worker = next(n["id"] for n in two_nodes.alive_nodes() if "node1" in n["resources"])
    two_nodes.kill_node(1)
    lost_at = time.time()
    on_worker = two_nodes.driver(
        "import json\n"
        "from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_list\n"
        "keys = _internal_kv_list('df_ray/engines/')\n"
        f"result = sorted({{json.loads(_internal_kv_get(k))['backbone'] for k in keys\n"
        f"  if json.loads(_internal_kv_get(k)).get('node_id') == {worker!r}}})\n")
    assert len(on_worker) == 2  # SPREAD: two of the four one-GPU replicas on each node
    status, logs = two_nodes.wait_job(job, 120 - (time.time() - lost_at))  # within 2 minutes
    assert status == "FAILED", logs[-4000:]
    (line,) = [ln for ln in logs.splitlines() if ln.startswith("df-ray:")]
    assert any(f"engine {b!r}" in line for b in on_worker), line
    assert "on node node1: no replica left: node node1 (" in line  # its --node-name
    assert re.search(r"no replica left: node node1 \(\w{8}\) was lost with its 1 replica\(s\), "
                     r"and none could be placed again in 10 s; 1 live node\(s\) have 0 of 2 "
                     r"GPUs free, a replica asks for 1 GPUs$", line), line
    cached = _keys(root / "cache")
    _revive(two_nodes)
    fast = _sweep(root, {"b1": {}, "b2": {}, "b3": {}, "bc": {}}, ["b1", "b2", "b3"], "bc", 0.0,
                  n=48)
    job = two_nodes.submit(fast, "lose-backbone-resume", _env(root, "calls2.log"))
    status, logs = two_nodes.wait_job(job, 300)
    assert status == "SUCCEEDED", logs[-4000:]
    again = read_call_log(root / "calls2.log")
    assert again and not set(again) & cached  # only calls that were not cached
    assert len(_results(root)) == 48
