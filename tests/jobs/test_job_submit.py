"""`ray job submit` end to end: a real Ray head with the dashboard (the Job API), a sweep of
scripted backbones on a 3-row MMLU-Pro fixture, and what the job logged to MLflow.

This is the path a lab uses on its cluster (cluster/README.md): the repository is uploaded as
the job's working dir with the excludes of cluster/runtime_env.yaml, the entrypoint is
``python jobs/sweep.py --config ...`` and `init_ray` joins the cluster through RAY_ADDRESS.

The head is private to this test: its own ports, its own --temp-dir, its own auth token, and
it is stopped by signalling the `ray start --block` process (never `ray stop`, which stops
every Ray on the machine). Every path the job writes to is absolute, so the job (whose cwd
is the uploaded copy of the working dir) writes where the test reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
RAY = VENV_BIN / "ray"
HEAD_START_TIMEOUT_S = 150.0
JOB_TIMEOUT_S = 300.0  # generous: on a loaded host the job alone took ~150 s

OPTIONS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
FIXTURE = [  # GoA's sampled MMLU-Pro schema: options inlined as (A) ... (J), gold letter
    {"question": "How many legs does a spider have?", "gold_answer": "H", "category": "biology"},
    {"question": "What is 2 + 3?", "gold_answer": "E", "category": "math"},
    {"question": "How many sides does a hexagon have?", "gold_answer": "F", "category": "math"},
]


def _free_ports(n: int) -> list[int]:
    """Ports free on all interfaces, outside the kernel's ephemeral range (where outgoing
    connections could take them before Ray binds) and Ray's worker range (10002-19999)."""
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < n:
        port = rng.randrange(20000, 32700)
        if port in ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def _pids_under(marker: str) -> list[int]:
    """Processes whose command line names `marker` (this test's private Ray temp dir)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            out.append(int(d.name))
    return out


class Head:
    """A private Ray head started with `ray start --head --block` in its own session."""

    def __init__(self) -> None:
        # A short temp dir: Ray puts unix sockets under it (108-byte path limit).
        self.temp_dir = tempfile.mkdtemp(prefix="dfrj", dir="/tmp")
        # Fixed ports only where Ray's defaults are fixed (and so shared with any other Ray
        # on this machine); the rest Ray picks itself.
        self.gcs_port, self.dash_port, self.client_port, self.agent_port = _free_ports(4)
        self.address = f"http://127.0.0.1:{self.dash_port}"
        self.log_path = Path(self.temp_dir + ".log")
        self.env = dict(os.environ)
        # `python` in the job's entrypoint resolves through the head's PATH: the venv first.
        self.env["PATH"] = f"{VENV_BIN}{os.pathsep}{self.env.get('PATH', '')}"
        # Token auth with a token of our own, so neither ~/.ray/auth_token nor other
        # clusters on this machine matter; clients get the same env.
        self.env["RAY_AUTH_MODE"] = "token"
        self.env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        self.env.pop("RAY_ADDRESS", None)
        self.env.pop("RAY_API_SERVER_ADDRESS", None)
        self.env["RAY_USAGE_STATS_ENABLED"] = "0"
        self.env.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        cmd = [str(RAY), "start", "--head", "--block",
               f"--port={self.gcs_port}", f"--dashboard-port={self.dash_port}",
               "--dashboard-host=127.0.0.1", "--include-dashboard=true",
               f"--ray-client-server-port={self.client_port}",
               f"--dashboard-agent-listen-port={self.agent_port}",
               "--num-cpus=4", "--num-gpus=0", "--object-store-memory=300000000",
               "--disable-usage-stats",
               f"--temp-dir={self.temp_dir}"]
        log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the head
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=self.temp_dir)
        log.close()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.env['RAY_AUTH_TOKEN']}"}

    def client(self):
        """A Job API client that sends this head's token whatever this process's Ray auth
        settings are (another test's ray.init may have set RAY_AUTH_MODE here)."""
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.address, headers=self.headers)

    def wait_ready(self) -> None:
        """Until the dashboard answers the Job API (its head agent may come up later; the
        submission retries for that)."""
        deadline = time.time() + HEAD_START_TIMEOUT_S
        last = None
        while time.time() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"`ray start --head` exited with {self.proc.returncode}:\n"
                                   f"{self.tail()}")
            try:
                self.client().list_jobs()
                return
            except Exception as e:  # connection refused, 503 while starting, ...
                last = e
                time.sleep(1.0)
        raise TimeoutError(f"the Ray dashboard at {self.address} did not answer the Job API "
                           f"in {HEAD_START_TIMEOUT_S:.0f}s (last error: {last!r}); is "
                           f"ray[default] installed?\n{self.tail()}")

    def tail(self, n: int = 60) -> str:
        parts = []
        with contextlib.suppress(OSError):
            parts.append(self.log_path.read_text(errors="replace").splitlines()[-n:])
        for logs in Path(self.temp_dir).glob("session_*/logs"):
            for name in ("dashboard.err", "dashboard.log", "dashboard_agent.log"):
                f = logs / name
                if f.is_file():
                    parts.append([f"--- {f}", *f.read_text(errors="replace").splitlines()[-20:]])
        return "\n".join(line for p in parts for line in p)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # `ray start --block` drains and stops its node
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # Workers run in their own process groups: anything still naming our temp dir is ours.
        deadline = time.time() + 15
        while _pids_under(self.temp_dir) and time.time() < deadline:
            time.sleep(0.5)
        for pid in _pids_under(self.temp_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.log_path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def ray_head():
    """A started head; a second try with other ports if the first one dies while starting
    (a port taken between our probe and Ray's bind)."""
    for attempt in (1, 2):
        head = Head()
        head.start()
        try:
            head.wait_ready()
        except RuntimeError:
            head.stop()
            if attempt == 2:
                raise
            continue
        except BaseException:
            head.stop()
            raise
        break
    try:
        yield head
    finally:
        head.stop()


def write_fixture(path: Path) -> None:
    rows = []
    for r in FIXTURE:
        opts = "\n".join(f"({chr(65 + i)}) {o}" for i, o in enumerate(OPTIONS))
        rows.append({**r, "question": f"{r['question']}\n{opts}"})
    path.write_text(json.dumps(rows, indent=1))


def sweep_config(tmp: Path) -> dict:
    backbones = {f"s{i}": {"kind": "scripted", "model": f"m{i}", "script": "majority"}
                 for i in (1, 2, 3)}
    return {
        "name": "job-submit-test",
        "base": {
            "benchmark": "mmlu_pro",
            "source": str(tmp / "mmlu_pro_fixture.json"),
            "backbones": backbones,
            "agents": [{"id": f"a{i}", "backbone": f"s{i}", "seed": i, "temperature": 0.7}
                       for i in (1, 2, 3)],
            "coordinator": {"id": "coord", "backbone": "s1", "seed": 7, "temperature": 0.2},
            "ablation": "no_calibration",
            "calibration": {"dir": str(tmp / "calibration"), "auto_fit": False},
            "cache_root": str(tmp / "cache"),
            "results_dir": str(tmp / "results"),
            "tracking": {"uri": f"sqlite:///{tmp / 'mlflow.db'}",
                         "experiment": "job-submit-test"},
            "batch_size": 2,
            "concurrency": 1,
        },
        "runs": [{"name": "strict", "disclosure": "strict"},
                 {"name": "permissive", "disclosure": "permissive"}],
    }


def runtime_env(tmp: Path) -> dict:
    """The cluster's runtime env (its excludes: the real upload) with this machine's paths."""
    data = yaml.safe_load((REPO / "cluster" / "runtime_env.yaml").read_text())
    return {"excludes": data["excludes"],
            "env_vars": {"DF_RAY_HOME": str(tmp / "df_ray_home"), "DF_RAY_USER": "tester",
                         "HF_HUB_OFFLINE": "1",
                         "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}}


def submit(head: Head, tmp: Path, entrypoint: list[str]) -> str:
    env_file = tmp / "runtime_env.json"
    env_file.write_text(json.dumps(runtime_env(tmp)))
    cmd = [str(RAY), "job", "submit", "--address", head.address, "--working-dir", str(REPO),
           "--runtime-env", str(env_file), "--no-wait", "--", *entrypoint]
    deadline = time.time() + 90
    while True:
        p = subprocess.run(cmd, env=head.env, capture_output=True, text=True, timeout=180,
                           cwd=str(tmp))
        out = p.stdout + p.stderr
        if p.returncode == 0:
            break
        # The head's job agent registers a little after the dashboard answers.
        if "No available agent" in out and time.time() < deadline:
            time.sleep(2.0)
            continue
        raise AssertionError(f"`ray job submit` failed ({p.returncode}):\n{out}")
    for line in out.splitlines():
        if "submitted successfully" in line and "'" in line:
            return line.split("'")[1]
    jobs = head.client().list_jobs()
    assert jobs, f"no job id in the submit output:\n{out}"
    return max(jobs, key=lambda j: j.start_time or 0).submission_id


def wait_job(head: Head, job_id: str) -> tuple[str, str]:
    from ray.job_submission import JobStatus

    client = head.client()
    deadline = time.time() + JOB_TIMEOUT_S
    status = None
    while time.time() < deadline:
        status = client.get_job_status(job_id)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            break
        time.sleep(2.0)
    logs = client.get_job_logs(job_id)
    if status not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        client.stop_job(job_id)
    return str(status), logs


def test_ray_job_submit_sweep_logs_to_mlflow(ray_head, tmp_path):
    tmp = tmp_path.resolve()
    write_fixture(tmp / "mmlu_pro_fixture.json")
    cfg_path = tmp / "sweep.yaml"
    cfg_path.write_text(yaml.safe_dump(sweep_config(tmp), sort_keys=False))
    summary = tmp / "summary.json"

    # Which python runs the entrypoint (it must be the venv's), then the sweep itself.
    script = ("python -c 'import sys; print(\"JOB_PREFIX=\" + sys.prefix)' && "
              f"python jobs/sweep.py --config {cfg_path} --summary-json {summary}")
    job_id = submit(ray_head, tmp, ["bash", "-c", script])
    status, logs = wait_job(ray_head, job_id)
    assert status == "SUCCEEDED", f"job {job_id} ended {status}; its logs:\n{logs[-8000:]}"

    prefix = [ln.split("=", 1)[1] for ln in logs.splitlines() if ln.startswith("JOB_PREFIX=")]
    assert prefix and Path(prefix[0]).resolve() == Path(sys.prefix).resolve(), logs[-3000:]
    assert "configuration" in logs and "strict" in logs and "permissive" in logs

    # What the job reported.
    results = {r["name"]: r for r in json.loads(summary.read_text())}
    assert set(results) == {"strict", "permissive"}
    for r in results.values():
        assert r["run_id"]
        assert r["metrics"]["n_samples"] == 3
        assert 0.0 <= r["metrics"]["accuracy"] <= 1.0
    # The sweep shares its cache: the second configuration repeats the agents' calls.
    assert results["permissive"]["metrics"]["fresh_calls"] < \
        results["strict"]["metrics"]["fresh_calls"]

    # What MLflow holds: one sweep run, two configuration runs nested under it.
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    # A job runs on a shared cluster: its experiment is namespaced by the submitting user.
    exp = client.get_experiment_by_name("tester/job-submit-test")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("df_ray.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("df_ray.kind") == "configuration"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(r.info.run_name for r in children) == ["permissive", "strict"]
    for r in children:
        assert r.info.status == "FINISHED"
        assert r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id
        assert r.info.run_id == results[r.info.run_name]["run_id"]
        assert r.data.params["benchmark"] == "mmlu_pro"
        assert r.data.params["backbones.s1.kind"] == "scripted"
        assert r.data.metrics["n_samples"] == 3
        assert "accuracy" in r.data.metrics and "accuracy_se" in r.data.metrics
        arts = [a.path for a in client.list_artifacts(r.info.run_id)]
        assert "samples.parquet" in arts, arts

    # Per-sample results and the generation cache landed at the configured absolute paths.
    import pyarrow.parquet as pq

    files = sorted((tmp / "results").rglob("samples.parquet"))
    assert len(files) == 2
    for f in files:
        assert pq.read_table(f).num_rows == 3
    assert list((tmp / "cache").glob("part-*.parquet"))
