"""The fault table's rows that happen during a run or need a truly unwritable folder
(docs/faults.md), from outside: a real ``df-ray run`` subprocess, a real full or read-only
file system (a tmpfs mounted for the test, so root's writes are refused too) and a real
sqlite lock held by another process. Each checks the one line, the exit status and that no
LLM call is lost: the rerun makes none of the calls made before the fault again."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers import (
    base_config,
    configuration_runs,
    finish,
    one_line,
    run_to_end,
    start_cli,
    tmpfs,
    wait_for,
    write_mmlu_goa,
)
from tests.reliability.responders import read_call_log

RUN_TIMEOUT_S = 900


def _sweep(tmp_path: Path, base: dict) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "faults", "base": base, "runs": [{}]}))
    return path


def _logged_line(log: Path, rc: int, want_rc: int, *needles: str) -> str:
    """:func:`one_line` over a run's combined output (its log file)."""
    done = subprocess.CompletedProcess([], rc, stdout="", stderr=log.read_text(errors="replace"))
    return one_line(done, want_rc, *needles)


@pytest.mark.slow
def test_disk_full_during_a_run(tmp_path):
    """results_dir on a tmpfs with room for the write probe but not for the results file:
    the calls are made and cached, then the write of samples.parquet fails with ENOSPC."""
    src = write_mmlu_goa(tmp_path / "mmlu.json", 6)
    full = tmp_path / "full"
    with tmpfs(full, "size=8k,mode=0755"):
        base = base_config(tmp_path, src)
        base["results_dir"] = str(full)
        sweep = _sweep(tmp_path, base)
        calls = tmp_path / "calls.log"
        log = tmp_path / "run1.log"
        rc = run_to_end(["run", "--config", str(sweep)], log, calls, RUN_TIMEOUT_S)
        message = _logged_line(log, rc, 1, "environment error", "No space left on device",
                                  str(full), "free space", "kept in the generation cache")
        assert "\n" not in message.strip(), message
        made = read_call_log(calls)
        assert made, "the run made no call before the disk filled"
        assert not [r for r in configuration_runs(base["tracking"]["uri"], "reliability")
                    if r.info.status == "FINISHED"]
        # space freed on that device: the same command finishes without a repeated call
        subprocess.run(["mount", "-o", "remount,size=64m", str(full)], check=True)
        calls2 = tmp_path / "calls2.log"
        log2 = tmp_path / "run2.log"
        rc2 = run_to_end(["run", "--config", str(sweep)], log2, calls2, RUN_TIMEOUT_S)
        assert rc2 == 0, log2.read_text(errors="replace")[-3000:]
        assert read_call_log(calls2) == []
        assert list(full.glob("faults/*/samples.parquet"))
        assert not list(full.rglob("*.tmp"))


@pytest.mark.slow
def test_mlflow_db_locked_by_another_process_mid_run(tmp_path):
    """The run opens the store at its start; once the engines answer, this process (another
    process than the run's) takes an exclusive lock on mlflow.db and keeps it until the run
    exits: logging the configuration fails with one line, every call is kept, and the rerun
    logs exactly one FINISHED run."""
    src = write_mmlu_goa(tmp_path / "mmlu.json", 6)
    base = base_config(tmp_path, src, latency_s=0.2, batch_size=2, concurrency=1)
    sweep = _sweep(tmp_path, base)
    db = tmp_path / "mlflow.db"
    calls = tmp_path / "calls.log"
    log = tmp_path / "run1.log"
    rc = None
    for _attempt in range(5):  # a run whose Ray failed to start under load is retried
        proc = start_cli(["run", "--config", str(sweep)], log, calls)
        try:
            wait_for(lambda: bool(read_call_log(calls)), RUN_TIMEOUT_S,
                     "the first LLM call", proc, log, every=0.02)
        except AssertionError:
            finish(proc, 60)
            if "timed out during startup" in log.read_text(errors="replace"):
                continue
            raise
        assert db.exists()  # opened (and created) before the lock is taken
        con = sqlite3.connect(db, isolation_level=None, timeout=60)
        try:
            con.execute("BEGIN EXCLUSIVE")
            assert proc.poll() is None, "the run ended before the lock was taken"
            rc = finish(proc, RUN_TIMEOUT_S)
        finally:
            con.execute("ROLLBACK")
            con.close()
        break
    assert rc is not None, "Ray did not start"
    _logged_line(log, rc, 1, "tracking error", str(db), "locked by another process",
                 "logging configuration 'df'", "every LLM call are kept",
                 "rerun the same command")
    assert read_call_log(calls)
    calls2 = tmp_path / "calls2.log"
    log2 = tmp_path / "run2.log"
    rc2 = run_to_end(["run", "--config", str(sweep)], log2, calls2, RUN_TIMEOUT_S)
    assert rc2 == 0, log2.read_text(errors="replace")[-3000:]
    assert read_call_log(calls2) == []
    runs = configuration_runs(f"sqlite:///{db}", "reliability")
    finished = [r for r in runs if r.info.status == "FINISHED"]
    assert [r.data.tags["mlflow.runName"] for r in finished] == ["df"], \
        [(r.info.run_name, r.info.status) for r in runs]
    assert not [r for r in runs if r.info.status == "RUNNING"]
