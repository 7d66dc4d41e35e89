"""Exactly one run per configuration: two concurrent runs of one sweep on one (fresh) MLflow
store, and a rerun after a kill while a configuration's run was being logged."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from df_ray.config import SweepConfig
from df_ray.tracking import FAILURE_TAG, Tracker
from tests.helpers import (
    base_config,
    configuration_runs,
    run_to_end,
    start_cli,
    write_mmlu_goa,
    write_sweep,
)

RUNS = [{"name": "tau066"}, {"name": "tau080", "method_args.guardrail.tau_p": 0.8}]


@pytest.mark.slow
def test_two_concurrent_runs_of_one_sweep_leave_one_finished_run_per_configuration(tmp_path):
    src = write_mmlu_goa(tmp_path / "mmlu.json", 6)
    base = base_config(tmp_path, src, latency_s=0.05, batch_size=2)
    sweep = write_sweep(tmp_path / "sweep.yaml", base, RUNS, fuse=False)
    assert not (tmp_path / "mlflow.db").exists()  # a fresh store, created by both at once
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [start_cli(["run", "--config", str(sweep)], log) for log in logs]
    rcs = [run_to_end(["run", "--config", str(sweep)], log, None, 900, proc=p)
           for p, log in zip(procs, logs, strict=True)]
    texts = [log.read_text(errors="replace") for log in logs]
    assert rcs == [0, 0], texts
    runs = configuration_runs(f"sqlite:///{tmp_path}/mlflow.db")
    finished = sorted(r.data.tags["mlflow.runName"] for r in runs
                      if r.info.status == "FINISHED")
    assert finished == ["tau066", "tau080"], [(r.info.run_name, r.info.status) for r in runs]
    assert not [r for r in runs if r.info.status == "RUNNING"]
    # the second run waited for the first and reused what it finished
    assert any("already finished" in t for t in texts), texts


@pytest.mark.slow
def test_a_rerun_closes_the_running_run_a_kill_during_logging_left(tmp_path, ray_local):
    from df_ray.pipeline.runner import run_sweep

    src = write_mmlu_goa(tmp_path / "mmlu.json", 4)
    base = base_config(tmp_path, src, batch_size=4, concurrency=1)
    sweep = SweepConfig.model_validate({"name": "kill-log", "base": base, "runs": [{}]})
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    (first,) = run_sweep(sweep, progress=lambda m: None)
    client = MlflowClient(tracking_uri=uri)
    # the state a kill between create_run and set_terminated leaves: a RUNNING run
    client.update_run(first.run_id, status="RUNNING")
    (again,) = run_sweep(sweep, progress=lambda m: None)
    assert not again.skipped and again.metrics["fresh_calls"] == 0
    runs = {r.info.run_id: r for r in configuration_runs(uri)}
    # the rerun logged into the run the kill left: one FINISHED run, no KILLED one beside it
    assert again.run_id == first.run_id
    assert [r.info.status for r in runs.values()] == ["FINISHED"]
    assert FAILURE_TAG not in runs[again.run_id].data.tags
    # a rerun interrupted again before it logs leaves the run KILLED, with the reason
    tracker = Tracker(uri, "reliability", str(tmp_path / "results"))
    client.update_run(first.run_id, status="RUNNING")
    cfg = sweep.expand()[0]
    tracker.parent_id = runs[first.run_id].data.tags["mlflow.parentRunId"]
    assert tracker.close_interrupted(cfg) == 1
    closed = client.get_run(first.run_id)
    assert closed.info.status == "KILLED" and "interrupted" in closed.data.tags[FAILURE_TAG]


@pytest.mark.slow  # three spawned processes, each opening MLflow
def test_a_fresh_sqlite_store_is_created_once_under_its_lock(tmp_path):
    import multiprocessing as mp

    uri = f"sqlite:///{tmp_path}/fresh.db"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_open_store, args=(uri,)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    exps = [e.name for e in MlflowClient(tracking_uri=uri).search_experiments()]
    assert exps.count("shared") == 1
    assert (Path(tmp_path) / ".fresh.db.df_ray-locks").is_dir()


def _open_store(uri: str) -> None:
    Tracker(uri, "shared")


def _claimant(uri: str, sweep_yaml: str, role: str, flags: str) -> None:
    """One of two runs of one sweep: ``first`` claims the configuration, waits until the
    ``second`` says it waits for the claim, then logs the run; ``second`` then finds it."""
    import time

    import yaml as _yaml

    from df_ray.config import SweepConfig as _Sweep

    flag = Path(flags)

    def wait_for(name: str) -> None:
        deadline = time.monotonic() + 300
        while not (flag / name).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(name)
            time.sleep(0.05)

    sweep = _Sweep.model_validate(_yaml.safe_load(Path(sweep_yaml).read_text()))
    (cfg,) = sweep.expand()
    tracker = Tracker(uri, "claims")
    with tracker.sweep(sweep):
        if role == "second":
            wait_for("first-holds")

        def said(msg: str) -> None:
            (flag / "second-waits").write_text(msg)

        with tracker.claim([cfg], say=said):
            if role == "first":
                (flag / "first-holds").write_text("")
                wait_for("second-waits")
                samples = flag / "samples.parquet"
                samples.write_bytes(b"")
                tracker.log_run(cfg, {"accuracy": 1.0}, samples)
            else:
                done = tracker.finished_run(cfg)
                (flag / "second-result").write_text("finished" if done else "none")


@pytest.mark.slow  # two spawned processes, each opening MLflow
def test_a_second_run_waits_for_the_claim_and_reuses_the_finished_run(tmp_path):
    import multiprocessing as mp

    import yaml

    src = write_mmlu_goa(tmp_path / "mmlu.json", 2)
    base = base_config(tmp_path, src)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "claims", "base": base, "runs": [{}]}))
    uri = f"sqlite:///{tmp_path}/claims.db"
    flags = tmp_path / "flags"
    flags.mkdir()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_claimant, args=(uri, str(sweep), role, str(flags)))
             for role in ("first", "second")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    assert [p.exitcode for p in procs] == [0, 0]
    assert "waiting for it" in (flags / "second-waits").read_text()
    assert (flags / "second-result").read_text() == "finished"
    runs = configuration_runs(uri, "claims")
    assert [r.info.status for r in runs] == ["FINISHED"]
    parents = MlflowClient(tracking_uri=uri).search_runs(
        [runs[0].info.experiment_id], filter_string="tags.`df_ray.kind` = 'sweep'")
    assert len(parents) == 1  # both runs shared the sweep's parent run


@pytest.mark.slow  # MLflow's sqlite store waits out its busy timeout first (about 20 s)
def test_a_locked_store_logs_no_traceback_of_mlflow_s_own(tmp_path, capfd):
    """Progress logged while another process holds the store's lock fails quietly (the run
    reports a store fault in one line): MLflow's own error log with its traceback stays out."""
    import sqlite3

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri, "quiet")
    run = tracker.client.create_run(tracker.experiment_id)
    tracker.parent_id = run.info.run_id
    capfd.readouterr()
    con = sqlite3.connect(tmp_path / "mlflow.db", isolation_level=None, timeout=0)
    con.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(Exception, match="locked"):
            tracker.log_progress({"progress.done": 1.0}, 0)
    finally:
        con.execute("ROLLBACK")
        con.close()
    out = capfd.readouterr()
    assert "Traceback" not in out.out + out.err, out.err
