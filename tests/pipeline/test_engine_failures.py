"""Engines that cannot generate stop the job at once, with one message naming the backbone,
model, replica, node and cause; `df-ray run` exits non-zero. Real local Ray, real MLflow
store, the real CLI entry point; scripted engines whose process kills itself with a signal
(as native code that faults does) or whose start raises."""

from __future__ import annotations

import time

import pytest
from mlflow.tracking import MlflowClient

from df_ray.cli import main
from df_ray.pipeline import faults
from df_ray.pipeline.cache import GenerationCache
from tests.helpers import base_config, write_mmlu_goa, write_sweep

pytestmark = pytest.mark.slow

#: From the fatal signal to the command's return ("at once"), generous for a loaded 2-core
#: machine; whole runs (engine and stage starts included) are bounded by RUN_WITHIN_S.
STOP_WITHIN_S = 60
RUN_WITHIN_S = 300


def sweep_file(tmp_path, b1_engine_args: dict, runs=None, **b1_extra):
    src = write_mmlu_goa(tmp_path / "mmlu.json", 4)
    base = base_config(tmp_path, src, batch_size=2, concurrency=1)
    base["backbones"]["b1"]["engine_args"].update(b1_engine_args)
    base["backbones"]["b1"].update(b1_extra)
    return write_sweep(tmp_path / "sweep.yaml", base, runs or [{"name": "df"}], fuse=False)


def run_cli(path, capsys) -> tuple[int, str, float]:
    t = time.time()
    rc = main(["run", "--config", str(path)])
    out = capsys.readouterr()
    took = time.time() - t
    assert took < RUN_WITHIN_S
    return rc, out.out + out.err, took


def since_last_signal(label: str = "engine-b1-0") -> float:
    """Seconds from the last fatal signal of ``label``'s processes (their fault logs) to now."""
    killed = [p.stat().st_mtime for p in faults.job_fault_dir().glob(f"{label}-*.log")
              if faults.read_fault(p) is not None]
    assert killed, "no process of the engine died of a signal"
    return time.time() - max(killed)


@pytest.mark.parametrize("sig", ["SIGILL", "SIGSEGV"])
def test_engine_killed_by_a_signal_while_generating_stops_the_job(ray_local, tmp_path, capsys,
                                                                   sig):
    # b1 passes its start-up check, then every process of it dies on its first real request:
    # Ray restarts it and the retried request kills it again. With max_restarts 1 the second
    # restart is a crash loop, seen before the client's retries (2) run out.
    # The first configuration does not use b1: its calls stay in the cache, its run finished.
    path = sweep_file(tmp_path, {"signal_on_call": 1, "signal_name": sig},
                      runs=[{"name": "single-a2", "method": "single",
                             "method_args": {"agent": "a2"}}, {"name": "df"}],
                      max_restarts=1)
    rc, out, _ = run_cli(path, capsys)
    assert rc == 1, out
    assert since_last_signal() < STOP_WITHIN_S
    msg = next(line for line in out.splitlines() if "engine failure" in line)
    assert "'b1'" in msg and "model m1" in msg and "replica 0" in msg and "node " in msg
    assert sig in msg and "crash loop" in msg, msg
    assert "scripted.py" in msg  # where it died: the fault log's innermost frames
    assert len(GenerationCache(str(tmp_path / "cache"))) >= 4  # single-a2's 4 calls kept
    client = MlflowClient(f"sqlite:///{tmp_path.resolve()}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("reliability").experiment_id])
    status = {r.info.run_name: r.info.status for r in runs}
    assert status["single-a2"] == "FINISHED"
    assert "df" not in status  # the configuration that hit the dead engine left no run
    assert status["reliability"] == "FAILED"  # the sweep's run


def test_engine_killed_while_starting_stops_the_job(ray_local, tmp_path, capsys):
    path = sweep_file(tmp_path, {"signal_on_start": True, "signal_name": "SIGILL"})
    rc, out, _ = run_cli(path, capsys)
    assert rc == 1, out
    assert since_last_signal() < STOP_WITHIN_S
    msg = next(line for line in out.splitlines() if "engine failure" in line)
    assert "'b1'" in msg and "model m1" in msg and "replica 0" in msg
    assert "died while starting" in msg and "SIGILL (Illegal instruction)" in msg, msg


def test_engine_whose_start_raises_stops_the_job(ray_local, tmp_path, capsys):
    path = sweep_file(tmp_path, {"raise_on_start": "the model file is corrupt"})
    rc, out, _ = run_cli(path, capsys)
    assert rc == 1, out
    msg = next(line for line in out.splitlines() if "engine failure" in line)
    assert "'b1'" in msg and "model m1" in msg and "replica 0" in msg
    assert "InjectedFault: the model file is corrupt" in msg, msg
    assert "scripted.py" in out  # the first lines of its traceback follow
