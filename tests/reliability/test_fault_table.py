"""One clear line for every fault of the table (docs/faults.md): the run ends with one
``df-ray: ...`` line that names the file or field, no traceback; exit status 2 for bad input
found before Ray starts, 1 for an environment fault during a run."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, base_config, cli_env, one_line, tmpfs, write_mmlu_goa


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "df_ray.cli", *args], cwd=REPO,
                          env=cli_env(), capture_output=True, text=True, timeout=timeout)


def _write(tmp_path: Path, base: dict, name: str = "faults") -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": base, "runs": [{}]}))
    return path


@pytest.fixture
def base(tmp_path):
    src = write_mmlu_goa(tmp_path / "mmlu.json", 3)
    return base_config(tmp_path, src)


@pytest.mark.slow  # a df-ray subprocess
def test_corrupted_mlflow_db(tmp_path, base):
    (tmp_path / "mlflow.db").write_bytes(b"this is not a database" * 100)
    one_line(_cli("run", "--config", str(_write(tmp_path, base))), 2,
              "mlflow.db", "not a readable sqlite database", "move")


@pytest.mark.slow  # a df-ray subprocess
def test_mlflow_db_locked_by_another_process_at_start(tmp_path, base):
    db = tmp_path / "mlflow.db"
    con = sqlite3.connect(db, isolation_level=None, timeout=0)
    con.execute("CREATE TABLE hold (x)")
    con.execute("BEGIN EXCLUSIVE")
    try:
        one_line(_cli("run", "--config", str(_write(tmp_path, base))), 2,
                  "mlflow.db", "locked by another process")
    finally:
        con.execute("ROLLBACK")
        con.close()


@pytest.mark.slow  # a df-ray subprocess
def test_missing_data_file(tmp_path, base):
    base["source"] = str(tmp_path / "nowhere.json")
    one_line(_cli("run", "--config", str(_write(tmp_path, base))), 2,
              "nowhere.json", "does not exist")


@pytest.mark.slow  # a df-ray subprocess
def test_unsupported_tracking_uri(tmp_path, base):
    base["tracking"]["uri"] = "nosuch://x"
    one_line(_cli("run", "--config", str(_write(tmp_path, base))), 2,
              "tracking.uri", "nosuch")


@pytest.mark.slow  # a df-ray subprocess
def test_results_dir_that_cannot_be_written(tmp_path, base):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    base["results_dir"] = str(blocker / "results")
    one_line(_cli("run", "--config", str(_write(tmp_path, base))), 2,
              "results_dir", "not writable")


@pytest.mark.slow  # a df-ray subprocess
@pytest.mark.parametrize("which", ["results_dir", "cache_root"])
def test_read_only_folder_is_refused_before_ray(tmp_path, base, which):
    """A folder on a read-only mount, which root cannot write either: refused with the
    field's one line before Ray starts, exit 2."""
    ro = tmp_path / "ro"
    with tmpfs(ro, "size=1m,ro"):
        base[which] = str(ro)
        out = _cli("run", "--config", str(_write(tmp_path, base)))
        one_line(out, 2, f"configuration error: {which} {str(ro)!r} is not writable",
                  "Read-only file system", f"set {which} to a folder you can write")
        assert "Ray" not in out.stdout + out.stderr, out.stderr  # found before Ray starts


@pytest.mark.parametrize("content, says", [
    (None, "does not exist"),
    ('{"schema_version": 1, "agents": [', "is not valid JSON"),
    ('{"schema_version": 1, "agents": "a1", "benchmark": "mmlu_pro"}', "field 'agents'"),
])
@pytest.mark.slow  # a df-ray subprocess
def test_calibration_file_missing_truncated_or_wrong(tmp_path, base, content, says):
    path = tmp_path / "cal.json"
    if content is not None:
        path.write_text(content)
    base["method_args"] = {}  # full DarkForest: it reads the calibration
    base["calibration"]["path"] = str(path)
    one_line(_cli("run", "--config", str(_write(tmp_path, base))), 2, "cal.json", says)


@pytest.mark.slow  # a df-ray subprocess
@pytest.mark.parametrize("cmd", ["validate", "run"])
def test_engine_args_typo_is_found_before_ray(tmp_path, base, cmd):
    base["backbones"]["b1"]["engine_args"] = {"latncy_s": 0.1}
    one_line(_cli(cmd, "--config", str(_write(tmp_path, base))), 2,
              "backbones.b1.engine_args", "'latncy_s'", "did you mean 'latency_s'")


@pytest.mark.parametrize("edit, says", [
    (lambda b: b["backbones"]["b1"].update(replicas=1_000_000), "replicas"),
    (lambda b: b.update(name="bad\x00name"), "name"),
    (lambda b: b.update(name="a/b"), "path separator"),
])
@pytest.mark.slow  # a df-ray subprocess
def test_counts_and_names_are_refused_by_validate(tmp_path, base, edit, says):
    edit(base)
    one_line(_cli("validate", "--config", str(_write(tmp_path, base))), 2, says)


@pytest.mark.slow  # a df-ray subprocess
def test_sweep_named_dot_dot_is_refused(tmp_path, base):
    one_line(_cli("validate", "--config", str(_write(tmp_path, base, name=".."))), 2,
              "sweep name")


def test_environment_fault_during_a_run_is_one_line():
    import errno

    from df_ray.cli import environment_failure_text

    text = environment_failure_text(OSError(errno.ENOSPC, "No space left on device",
                                            "/data/results/x.tmp"))
    assert "\n" not in text and "/data/results/x.tmp" in text and "free space" in text
    # pyarrow's own OSError names no file and words errno 28 its way: the line names the
    # folder of the temporary file being written and the errno's own words
    from df_ray.pipeline.file_errors import naming

    with pytest.raises(OSError) as raised, naming("/data/results/.samples-x.parquet.tmp"):
        raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space "
                      "left on device")
    text = environment_failure_text(raised.value)
    assert ("environment error, the run stopped: No space left on device "
            "(/data/results); free space on that device") in text


def test_a_configuration_fingerprint_holds_no_file_location(tmp_path, base):
    from df_ray.config import RunConfig

    a = RunConfig.model_validate(base)
    moved = json.loads(json.dumps(base))
    moved["calibration"]["dir"] = "/elsewhere/calibration"
    moved["results_dir"] = "/elsewhere/results"
    moved["cache_root"] = "/elsewhere/cache"
    assert RunConfig.model_validate(moved).fingerprint() == a.fingerprint()
    other = json.loads(json.dumps(base))
    other["method_args"] = {**other["method_args"], "guardrail": {"tau_p": 0.8}}
    assert RunConfig.model_validate(other).fingerprint() != a.fingerprint()
