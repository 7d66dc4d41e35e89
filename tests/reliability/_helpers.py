"""Shared builders for the reliability tests: tiny MMLU-Pro fixtures, sweep files, and
`df-ray` subprocesses in their own process group."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "tests.reliability.responders:logged_majority"
LETTERS = "ABCD"


def write_mmlu_goa(path: Path, n: int, tag: str = "q") -> Path:
    """A GoA-style MMLU-Pro file: ``question`` with options ``(A) ... (D)`` inlined,
    ``gold_answer`` letter, one category (so the test split takes every row)."""
    rows = []
    for i in range(n):
        opts = " ".join(f"({c}) {tag}{i}-{c.lower()}" for c in LETTERS)
        rows.append({"question": f"[{tag}{i}] Which option fits item {tag}{i}? "
                                 f"The options are: {opts}.",
                     "gold_answer": LETTERS[(i * 7) % 4], "category": "reliability"})
    path.write_text(json.dumps(rows, indent=1))
    return path


def backbones(latency_s: float = 0.0, **extra: Any) -> dict[str, dict]:
    args = {"latency_s": latency_s} if latency_s else {}
    return {f"b{m}": {"kind": "scripted", "model": f"m{m}", "script": SCRIPT,
                      "engine_args": dict(args), **extra}
            for m in ("1", "2", "3", "c")}


def base_config(tmp: Path, source: Path, *, latency_s: float = 0.0, batch_size: int = 2,
                concurrency: int = 2, cache_root: Path | None = None,
                experiment: str = "reliability") -> dict[str, Any]:
    tmp = tmp.resolve()
    return {
        "name": "df",
        "benchmark": "mmlu_pro",
        "source": str(source.resolve()),
        "backbones": backbones(latency_s),
        "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2, 3)],
        "coordinator": {"id": "coord", "backbone": "bc"},
        "ablation": "no_calibration",
        "calibration": {"dir": str(tmp / "calibration"), "auto_fit": False},
        "cache_root": str((cache_root or tmp / "cache").resolve()),
        "results_dir": str(tmp / "results"),
        "tracking": {"uri": f"sqlite:///{tmp}/mlflow.db", "experiment": experiment},
        "batch_size": batch_size,
        "concurrency": concurrency,
    }


def write_sweep(path: Path, base: dict[str, Any], runs: list[dict[str, Any]],
                name: str = "reliability", fuse: bool = True) -> Path:
    path.write_text(yaml.safe_dump({"name": name, "base": base, "runs": runs, "fuse": fuse},
                                   sort_keys=False))
    return path


def cli_env(call_log: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    env["PYTHONUNBUFFERED"] = "1"
    if call_log is not None:
        env["DF_RAY_CALL_LOG"] = str(call_log)
    return env


def start_cli(args: list[str], log: Path, call_log: Path | None = None) -> subprocess.Popen:
    """`python -m df_ray.cli ARGS` as the leader of a new session (and process group)."""
    out = open(log, "wb")  # noqa: SIM115 - closed by the caller through proc.stdout_file
    proc = subprocess.Popen([sys.executable, "-m", "df_ray.cli", *args], cwd=REPO,
                            env=cli_env(call_log), stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    proc.log_file = out  # type: ignore[attr-defined]
    return proc


def finish(proc: subprocess.Popen, timeout: float) -> int:
    try:
        rc = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            kill_group(proc)
        proc.log_file.close()  # type: ignore[attr-defined]
    return rc


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def wait_for(pred, timeout: float, what: str, proc: subprocess.Popen | None = None,
             log: Path | None = None, every: float = 0.1) -> None:
    t = time.monotonic()
    while not pred():
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise AssertionError(f"the run exited (rc {proc.returncode}) before {what}:\n{tail}")
        if time.monotonic() - t > timeout:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise AssertionError(f"timed out waiting for {what}:\n{tail}")
        time.sleep(every)


def configuration_runs(tracking_uri: str, experiment: str = "reliability") -> list:
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return client.search_runs([exp.experiment_id], filter_string="tags.`df_ray.kind` = 'configuration'",
                              run_view_type=ViewType.ALL)


def cache_parts(root: Path) -> list[Path]:
    return sorted(root.glob("part-*.parquet")) if root.exists() else []


# Ray's node start gives the raylet a fixed 30 s to register; on an overloaded machine that
# can fail before anything of ours ran. Such a start is retried; any other failure is not.
RAY_START_FAILED = "timed out during startup"


def _ray_start_failed(proc: subprocess.Popen, log: Path) -> bool:
    return proc.poll() not in (None, 0) and RAY_START_FAILED in log.read_text(errors="replace")


def start_and_wait(args: list[str], log: Path, call_log: Path | None, pred, timeout: float,
                   what: str, tries: int = 5) -> subprocess.Popen:
    """Start a run and wait until ``pred()``; retries a run whose Ray failed to start."""
    for attempt in range(tries):
        proc = start_cli(args, log, call_log)
        try:
            wait_for(pred, timeout, what, proc, log, every=0.05)
            return proc
        except AssertionError:
            retry = attempt + 1 < tries and _ray_start_failed(proc, log)
            finish(proc, 60)
            if not retry:
                raise
    raise AssertionError("unreachable")


def run_to_end(args: list[str], log: Path, call_log: Path | None, timeout: float,
               proc: subprocess.Popen | None = None, tries: int = 5) -> int:
    """Run (or finish ``proc``) to its exit status; retries a run whose Ray failed to start."""
    for attempt in range(tries):
        if proc is None:
            proc = start_cli(args, log, call_log)
        rc = finish(proc, timeout)
        if rc == 0 or attempt + 1 == tries or not _ray_start_failed(proc, log):
            return rc
        proc = None
    return rc
