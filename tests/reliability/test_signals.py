"""SIGINT and SIGTERM stop a real ``df-ray run`` cleanly (docs/faults.md): the answers the
stage held are written to the generation cache first, the sweep's MLflow run ends KILLED,
the Ray the run started is stopped, one line, exit 130 / 143; the rerun makes no call that
was answered before.

SIGINT goes to the run's whole process group, as a terminal's Ctrl-C sends it (Ray's agents
are in it); SIGTERM to the driver alone, as ``kill`` and ``ray job stop`` send it. Either way
no process of the run, Ray's own included, is alive 10 s after it exits.

Backbone b3 answers after 120 s, the others at once: when the signal comes, the agents a1
and a2 have answered round 0 and a3 has not, so their answers are held by the stage (it
writes a cache part at most every 30 s, or when the round ends): only the interrupt's flush
can have put them in the cache."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from df_ray.pipeline.cache import GenerationCache
from tests.helpers import (
    base_config,
    configuration_runs,
    finish,
    run_to_end,
    start_and_wait,
    write_mmlu_goa,
    write_sweep,
)
from tests.reliability.responders import read_call_log

pytestmark = pytest.mark.slow

STARTUP_S = 420


def session(sid: int) -> list[psutil.Process]:
    """The live processes of session ``sid`` (the run was started as its leader)."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def _sweep(tmp_path, slow_s: float):
    tmp_path.mkdir(exist_ok=True)
    src = write_mmlu_goa(tmp_path / "mmlu.json", 4)
    base = base_config(tmp_path, src, batch_size=4, concurrency=1)
    if slow_s:
        base["backbones"]["b3"]["engine_args"] = {"latency_s": slow_s}
    return write_sweep(tmp_path / "sweep.yaml", base, [{}], name="signals")


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_run_with_its_answers_cached(tmp_path, sig, status):
    sweep = _sweep(tmp_path, slow_s=120)
    log, calls = tmp_path / "run.log", tmp_path / "calls.log"
    args = ["run", "--config", str(sweep)]
    # a1's and a2's round-0 calls of the 4 samples answered (b3's still sleeping)
    proc = start_and_wait(args, log, calls, lambda: len(read_call_log(calls)) >= 8,
                          STARTUP_S, "a1's and a2's answers")
    time.sleep(1.0)  # their answers reach the stage
    answered = set(read_call_log(calls))
    running = [" ".join(p.cmdline()) for p in session(proc.pid)]
    assert any("ray::RuntimeEnvAgent" in c for c in running), running  # what was left before
    t = time.monotonic()
    if sig == signal.SIGINT:  # a terminal's Ctrl-C: the whole foreground process group
        os.killpg(proc.pid, sig)
    else:  # the driver alone, as `kill` or `ray job stop` sends it
        os.kill(proc.pid, sig)
    rc = finish(proc, 120)
    took = time.monotonic() - t
    text = log.read_text(errors="replace")
    assert rc == status, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    lines = [ln for ln in text.splitlines() if ln.startswith("df-ray:")]
    assert lines == [f"df-ray: interrupted by {signal.Signals(sig).name}, the run stopped: "
                     "answers received so far are in the generation cache and the MLflow "
                     "runs are marked KILLED; rerun the same command to resume"], text[-3000:]
    assert took < 60, took  # not b3's 120 s
    # every answer the engines gave is in the cache, though no round had ended
    cached = set(GenerationCache(str(tmp_path / "cache"))._entries)
    assert answered and answered <= cached, (len(answered), len(cached))
    # the sweep's run is marked; no configuration run half-written
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("reliability")
    (parent,) = client.search_runs([exp.experiment_id], "tags.`df_ray.kind` = 'sweep'")
    assert parent.info.status == "KILLED"
    assert f"interrupted by {signal.Signals(sig).name}" in parent.data.tags[
        "df_ray.failure_reason"]
    assert configuration_runs(f"sqlite:///{tmp_path}/mlflow.db") == []
    # the Ray the run started is gone with it, Ray's agents included: nothing of the run's
    # session (its process group, and the workers' own groups in it) 10 s after it exited
    deadline = time.monotonic() + 10
    alive = session(proc.pid)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = session(proc.pid)
    names = [" ".join(p.cmdline())[:100] for p in alive]
    for p in alive:
        p.kill()
    assert not alive, names
    if sig != signal.SIGINT:
        return
    # the rerun (b3 now quick) makes no call that was answered before
    sweep = _sweep(tmp_path / "again", slow_s=0)
    sweep.write_text(sweep.read_text().replace(str(tmp_path / "again" / "cache"),
                                               str(tmp_path / "cache")))
    rc = run_to_end(["run", "--config", str(sweep)], tmp_path / "rerun.log", calls,
                    STARTUP_S)
    assert rc == 0, (tmp_path / "rerun.log").read_text()[-3000:]
    made = read_call_log(calls)
    assert len(made) == len(set(made)), "a call answered before was made again"
