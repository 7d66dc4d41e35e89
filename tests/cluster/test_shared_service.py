"""A shared lab cluster for real, on one machine: a Ray head and two worker nodes whose custom
resource ``gpu_slot`` stands in for GPUs, a real ``mlflow server``, the engine service deployed
with ``df-ray serve`` (two scripted backbones, one replica each, placed on the "GPU" nodes),
and two users (alice, bob) who submit sweeps with ``ray job submit`` at the same time.

Phase A (sharing): both users submit the same sweep at once, with the paper files' storage
(relative results/calibration/cache paths, ``tracking.uri: sqlite:///mlflow.db``) and the
cluster's DF_RAY_HOME and MLFLOW_TRACKING_URI. Both finish; each user's runs are in their own
experiment on the server; every backbone was loaded once (replicas started = configured, no
job started an engine of its own); every call both users made was generated once.

Phase B (faults): both submit a slower sweep; mid-sweep the worker node hosting a replica is
killed (SIGKILL of its raylet) and bob's job is stopped with ``ray job stop``. Alice's sweep
finishes once Serve has replaced the replica, with nothing lost (no failed call); the cache
stays readable; bob's rerun finishes with every configuration logged exactly once.

Everything is private to the test: its own --temp-dir, ports, auth token, and processes,
stopped by signalling the processes it started (never `ray stop`, which would stop every Ray
on the machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, free_ports, pids_matching

pytestmark = pytest.mark.slow

VENV_BIN = Path(sys.executable).parent
RAY = str(VENV_BIN / "ray")
START_TIMEOUT_S = 240.0
JOB_TIMEOUT_S = 480.0
N_SAMPLES_A = 6
N_SAMPLES_B = 12
RESPONDER = "tests.cluster.responders:logged_majority_slow"
EXPERIMENT = "shared-service"


# --------------------------------------------------------------------------- processes


def _kill_group(proc: subprocess.Popen | None, sig=signal.SIGKILL) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class Lab:
    """The cluster, the MLflow server and the clients' environment."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.temp_dir = tempfile.mkdtemp(prefix="dfsv", dir="/tmp")  # short: unix sockets
        (self.gcs, self.dash, self.client_port, self.mlflow_port, self.http_port,
         *self.node_ports) = free_ports(5 + 3 * 6)
        self.gcs_address = f"127.0.0.1:{self.gcs}"
        self.dash_address = f"http://127.0.0.1:{self.dash}"
        self.mlflow_uri = f"http://127.0.0.1:{self.mlflow_port}"
        self.home = tmp / "df_ray_home"  # the lab's shared storage
        self.call_log = tmp / "calls.log"
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.starts: dict[int, int] = {}
        env = dict(os.environ)
        for v in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "MLFLOW_TRACKING_URI", "DF_RAY_HOME",
                  "DF_RAY_USER", "DF_RAY_JOB"):
            env.pop(v, None)
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
        env["RAY_AUTH_MODE"] = "token"
        env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
        env["DF_RAY_CALL_LOG"] = str(self.call_log)  # the replicas log every call they make
        env["HF_HUB_OFFLINE"] = "1"
        env["HF_DATASETS_OFFLINE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        # A raylet waits this long for its node's agents to come up (slow on a loaded machine).
        env["RAY_agent_register_timeout_ms"] = "300000"
        self.env = env

    # -- processes
    def _spawn(self, name: str, cmd: list[str], env: dict | None = None) -> subprocess.Popen:
        log = self.tmp / f"{name}.log"
        with open(log, "ab") as f:
            p = subprocess.Popen(cmd, env=env or self.env, stdout=f, stderr=subprocess.STDOUT,
                                 start_new_session=True, cwd=str(self.tmp))
        self.procs[name], self.logs[name] = p, log
        return p

    def _node_ports(self, i: int) -> list[str]:
        nm, om, al, ag, me, re_ = self.node_ports[6 * i:6 * i + 6]
        return [f"--node-manager-port={nm}", f"--object-manager-port={om}",
                f"--dashboard-agent-listen-port={al}", f"--dashboard-agent-grpc-port={ag}",
                f"--metrics-export-port={me}", f"--runtime-env-agent-port={re_}"]

    def start(self) -> None:
        self._spawn("mlflow", [
            str(VENV_BIN / "mlflow"), "server", "--host", "127.0.0.1",
            "--port", str(self.mlflow_port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{self.tmp / 'mlflow-server.db'}",
            "--artifacts-destination", str(self.tmp / "mlflow-artifacts")])
        for attempt in range(1, 5):
            self._spawn("head", [
                RAY, "start", "--head", "--block", f"--port={self.gcs}",
                f"--dashboard-port={self.dash}", "--dashboard-host=127.0.0.1",
                "--include-dashboard=true", f"--ray-client-server-port={self.client_port}",
                "--node-ip-address=127.0.0.1", "--num-cpus=4", "--num-gpus=0",
                "--object-store-memory=200000000", "--disable-usage-stats",
                f"--temp-dir={self.temp_dir}", *self._node_ports(0)])
            try:
                self.wait_jobs_api()
                break
            except RuntimeError:
                # `ray start` gives its node 30 s to register; a loaded machine may need more.
                if self.procs["head"].poll() is None or attempt == 4:
                    raise
                self.kill_leftovers()
        for i in (1, 2):
            self.start_worker(i)
        self.wait(self.workers_joined, "the two worker nodes to join", 2 * START_TIMEOUT_S)
        self.wait(self.mlflow_up, "the MLflow server")

    def start_worker(self, i: int) -> None:
        """A "GPU" node: no CPU for stages, two gpu_slots, a resource naming it."""
        self.starts[i] = self.starts.get(i, 0) + 1
        self._spawn(f"worker{i}", [
            RAY, "start", "--block", f"--address={self.gcs_address}",
            "--node-ip-address=127.0.0.1", "--num-cpus=0", "--num-gpus=0",
            f"--resources={json.dumps({'gpu_slot': 2, f'worker{i}': 1})}",
            "--object-store-memory=100000000", "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}/w{i}", *self._node_ports(i)])

    def workers_joined(self) -> bool:
        # `ray start` gives a raylet 30 s to register; on a loaded machine it may need more:
        # a worker whose start gave up is started again (a few times).
        for i in (1, 2):
            p = self.procs[f"worker{i}"]
            if p.poll() is not None:
                if self.starts[i] >= 8:
                    raise RuntimeError(f"worker{i} did not start:\n{self.tail(f'worker{i}')}")
                # what the failed start left (its agents hold the node's ports)
                for pid in pids_matching(f"{self.temp_dir}/w{i}"):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(2.0)
                self.start_worker(i)
        return len(self.alive_nodes()) == 3

    def wait(self, cond, what: str, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            for name in ("head", "mlflow"):
                p = self.procs.get(name)
                if p is not None and p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}):\n{self.tail(name)}")
            with contextlib.suppress(Exception):
                if cond():
                    return
            time.sleep(2.0)
        raise TimeoutError(f"waited {timeout_s:.0f}s for {what}\n" + "\n".join(
            self.tail(n) for n in self.procs))

    def tail(self, name: str, n: int = 40) -> str:
        try:
            lines = self.logs[name].read_text(errors="replace").splitlines()[-n:]
        except (OSError, KeyError):
            lines = []
        return "\n".join([f"--- {name}", *lines])

    def mlflow_up(self) -> bool:
        with urllib.request.urlopen(self.mlflow_uri + "/health", timeout=5) as r:
            return r.status == 200

    def client(self):
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.dash_address, headers={
            "Authorization": f"Bearer {self.env['RAY_AUTH_TOKEN']}"})

    def wait_jobs_api(self) -> None:
        self.wait(lambda: self.client().list_jobs() is not None, "the Job API")

    # -- a driver on the cluster (this test process never joins it: it may hold its own Ray)
    def driver(self, code: str, timeout_s: float = 180) -> object:
        script = self.tmp / f"driver-{time.time_ns()}.py"
        script.write_text("import json, ray\n"
                          f"ray.init(address={self.gcs_address!r}, log_to_driver=False)\n"
                          + code + "\nprint('RESULT=' + json.dumps(result, default=str))\n")
        p = subprocess.run([sys.executable, str(script)], env=self.env, capture_output=True,
                           text=True, timeout=timeout_s, cwd=str(self.tmp))
        for line in p.stdout.splitlines():
            if line.startswith("RESULT="):
                return json.loads(line[len("RESULT="):])
        raise AssertionError(f"driver failed ({p.returncode}):\n{p.stdout[-3000:]}\n"
                             f"{p.stderr[-5000:]}")

    def alive_nodes(self) -> list[dict]:
        return self.driver("result = [{'id': n['NodeID'], 'resources': n['Resources']} "
                           "for n in ray.nodes() if n['Alive']]")

    def cli(self, *args: str, timeout_s: float = 300) -> str:
        p = subprocess.run([sys.executable, "-m", "df_ray.cli", *args,
                            "--address", self.gcs_address], env=self.env, capture_output=True,
                           text=True, timeout=timeout_s, cwd=str(REPO))
        assert p.returncode == 0, f"df-ray {' '.join(args)} failed:\n{p.stdout}\n{p.stderr[-5000:]}"
        return p.stdout

    def serve_status(self) -> dict:
        out = self.cli("serve", "status", "--json")
        return json.loads(out[out.index("{"):])

    # -- jobs
    def submit(self, user: str, config: Path, submission_id: str) -> str:
        data = yaml.safe_load((REPO / "cluster" / "runtime_env.yaml").read_text())
        runtime_env = {"excludes": data["excludes"], "env_vars": {
            "DF_RAY_HOME": str(self.home), "MLFLOW_TRACKING_URI": self.mlflow_uri,
            "USER": user, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1"}}
        env_file = self.tmp / f"runtime_env-{submission_id}.json"
        env_file.write_text(json.dumps(runtime_env))
        cmd = [RAY, "job", "submit", "--address", self.dash_address, "--working-dir", str(REPO),
               "--runtime-env", str(env_file), "--submission-id", submission_id, "--no-wait",
               "--", "python", "jobs/sweep.py", "--config", str(config)]
        deadline = time.time() + 120
        while True:
            p = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=180,
                               cwd=str(self.tmp))
            out = p.stdout + p.stderr
            if p.returncode == 0:
                return submission_id
            if "No available agent" in out and time.time() < deadline:
                time.sleep(2.0)
                continue
            raise AssertionError(f"`ray job submit` failed ({p.returncode}):\n{out}")

    def job_status(self, job_id: str) -> str:
        return str(self.client().get_job_status(job_id))

    def wait_job(self, job_id: str) -> tuple[str, str]:
        deadline = time.time() + JOB_TIMEOUT_S
        status = None
        while time.time() < deadline:
            status = self.job_status(job_id)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                break
            time.sleep(2.0)
        logs = self.client().get_job_logs(job_id)
        if status not in ("SUCCEEDED", "FAILED", "STOPPED"):
            self.client().stop_job(job_id)
        return str(status), logs

    # -- faults
    def kill_worker(self, i: int) -> None:
        """SIGKILL the raylet of worker ``i`` (and the rest of its node's processes)."""
        port = self.node_ports[6 * i]
        for pid in pids_matching("raylet", f"--node_manager_port={port}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _kill_group(self.procs.get(f"worker{i}"))

    def kill_leftovers(self) -> None:
        """Every process of this cluster still running (they name its temp dir)."""
        for pid in pids_matching(self.temp_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(2.0)

    def stop(self) -> None:
        for name in ("worker1", "worker2", "head"):
            _kill_group(self.procs.get(name), signal.SIGTERM)
        for name in ("worker1", "worker2", "head"):
            p = self.procs.get(name)
            if p is not None:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    _kill_group(p)
        _kill_group(self.procs.get("mlflow"), signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            if "mlflow" in self.procs:
                self.procs["mlflow"].wait(timeout=20)
        _kill_group(self.procs.get("mlflow"))
        deadline = time.time() + 15
        while pids_matching(self.temp_dir) and time.time() < deadline:
            time.sleep(0.5)
        for pid in pids_matching(self.temp_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for port in self.node_ports[::6]:  # raylets of this cluster, whatever their state
            for pid in pids_matching("raylet", f"--node_manager_port={port}"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab").resolve()
    lab = Lab(tmp)
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()


# --------------------------------------------------------------------------- the sweeps


def write_fixture(path: Path, n: int) -> Path:
    opts = [str(k) for k in range(1, 11)]
    rows = []
    for i in range(n):
        a, b = 2 + i, 3 + (i % 5)
        gold = chr(65 + (a + b - 1) % 10)
        q = f"What is {a} + {b} (question {i})?\n" + "\n".join(
            f"({chr(65 + j)}) {o}" for j, o in enumerate(opts))
        rows.append({"question": q, "gold_answer": gold, "category": "math"})
    path.write_text(json.dumps(rows, indent=1))
    return path


def pool_file(path: Path) -> Path:
    """Two scripted backbones, one replica each, on the "GPU" nodes only."""
    path.write_text(yaml.safe_dump({
        "backbones": {f"s{i}": {"kind": "scripted", "model": f"m{i}", "script": RESPONDER,
                                "max_batch_size": 16} for i in (1, 2)},
        "serve": {"num_cpus": 0, "resources": {"gpu_slot": 1}},
    }, sort_keys=False))
    return path


def sweep_file(path: Path, name: str, source: Path, *, seed: int, latency: float) -> Path:
    """The paper files' storage, unchanged: relative paths and a local sqlite store."""
    system = f"Answer the question. [latency {latency}]" if latency else None
    agents = [{"id": f"a{i}", "backbone": b, "seed": seed + i, "system_prompt": system}
              for i, b in ((1, "s1"), (2, "s2"), (3, "s1"))]
    path.write_text(yaml.safe_dump({
        "name": name,
        "base": {
            "benchmark": "mmlu_pro", "source": str(source),
            "backbones": {f"s{i}": {"kind": "serve", "model": f"m{i}", "max_batch_size": 8,
                                    "request_timeout_s": 45} for i in (1, 2)},
            "agents": agents,
            "coordinator": {"id": "coord", "backbone": "s2", "seed": seed, "temperature": 0.2},
            "method_args": {"ablation": "no_calibration"},
            "calibration": {"dir": "calibration", "auto_fit": False},
            "tracking": {"uri": "sqlite:///mlflow.db", "experiment": EXPERIMENT},
            "results_dir": "results",
            "cache_root": "generations",  # per user: DF_RAY_HOME/users/<user>/generations
            "cache_read_from": ["*"],  # this lab's users replay one another's calls
            "batch_size": 2, "concurrency": 1, "max_request_retries": 3,
        },
        "runs": [{"name": "strict"}, {"name": "permissive", "method_args.disclosure": "permissive"}],
    }, sort_keys=False))
    return path


def call_keys(lab: Lab) -> list[str]:
    from tests.reliability.responders import read_call_log

    return read_call_log(lab.call_log)


def user_runs(lab: Lab, user: str, sweep: str) -> tuple[list, list]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=lab.mlflow_uri)
    exp = client.get_experiment_by_name(f"{user}/{EXPERIMENT}")
    assert exp is not None, [e.name for e in client.search_experiments()]
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("df_ray.kind") == "sweep"
               and r.info.run_name == sweep]
    assert len(parents) == 1, [(r.info.run_name, r.info.status) for r in runs]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    return parents, children


def results_of(lab: Lab, user: str, sweep: str) -> dict[str, list[dict]]:
    import pyarrow.parquet as pq

    out = {}
    for f in sorted((lab.home / "users" / user / "results" / sweep).glob("*/samples.parquet")):
        out[f.parent.name.rsplit("-", 1)[0]] = pq.read_table(f).to_pylist()
    return out


def test_two_users_share_one_engine_service_and_survive_faults(lab):
    tmp = lab.tmp
    # -- the service: one application per backbone, replicas on the "GPU" nodes
    token_file = tmp / "serve-token"
    token_file.write_text("the-lab-service-token-0123456789\n")
    token_file.chmod(0o600)
    out = lab.cli("serve", "--config", str(pool_file(tmp / "pool.yaml")),
                  "--http-host", "127.0.0.1", "--http-port", str(lab.http_port),
                  "--token-file", str(token_file))
    assert "s1" in out and "s2" in out
    st = lab.serve_status()
    nodes = {n["id"]: n["resources"] for n in lab.alive_nodes()}
    for app in ("s1", "s2"):
        assert st[app]["status"] == "RUNNING" and st[app]["running"] == 1, st
        assert st[app]["replicas_started"] == 1, st
        (node,) = st[app]["replica_nodes"]
        assert nodes[node].get("gpu_slot") == 2, "a replica landed off the GPU nodes"
    # The OpenAI-compatible route, for clients outside the cluster.
    body = json.dumps({"model": "m1", "messages": [{"role": "user", "content": "(A) 1\n(B) 2"}],
                       "max_tokens": 50}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{lab.http_port}/s1/v1/chat/completions",
                                 data=body, headers={
                                     "Content-Type": "application/json",
                                     "Authorization": "Bearer the-lab-service-token-0123456789"})
    with urllib.request.urlopen(req, timeout=60) as r:
        answer = json.loads(r.read())
    assert "boxed" in answer["choices"][0]["message"]["content"]
    assert answer["usage"]["completion_tokens"] > 0
    http_calls = len(call_keys(lab))

    # -- phase A: the same sweep from two accounts at once
    src_a = write_fixture(tmp / "mmlu_a.json", N_SAMPLES_A)
    cfg_a = sweep_file(tmp / "sweep_a.yaml", "sweep-a", src_a, seed=10, latency=0.0)
    jobs = {u: lab.submit(u, cfg_a, f"{u}-a") for u in ("alice", "bob")}
    for u, j in jobs.items():
        status, logs = lab.wait_job(j)
        assert status == "SUCCEEDED", f"{u}'s job ended {status}:\n{logs[-6000:]}"
    results = {}
    for u in ("alice", "bob"):
        parents, children = user_runs(lab, u, "sweep-a")
        assert parents[0].info.status == "FINISHED"
        assert sorted(r.info.run_name for r in children) == ["permissive", "strict"]
        for r in children:
            assert r.info.status == "FINISHED"
            assert r.data.metrics["n_samples"] == N_SAMPLES_A
        results[u] = results_of(lab, u, "sweep-a")
        assert sorted(results[u]) == ["permissive", "strict"]
    # identical answers for both users (the same calls), nothing failed
    for name in ("strict", "permissive"):
        a = {r["sample_id"]: r["final_answer"] for r in results["alice"][name]}
        b = {r["sample_id"]: r["final_answer"] for r in results["bob"][name]}
        assert a == b and len(a) == N_SAMPLES_A
        assert all(r["n_errors"] == 0 for r in results["alice"][name] + results["bob"][name])
    # every backbone loaded once; no job started an engine of its own
    st = lab.serve_status()
    assert [st[a]["replicas_started"] for a in ("s1", "s2")] == [1, 1], st
    owned = lab.driver("from ray.util.state import list_actors\n"
                       "result = len(list_actors(address=ray.get_runtime_context().gcs_address, "
                       "filters=[('class_name', '=', 'EngineActor')], "
                       "raise_on_missing_output=False))")
    assert owned == 0
    # every call both users made was generated once: per sample 3 agents, and a coordinator
    # per configuration (its prompt discloses differently)
    keys = call_keys(lab)[http_calls:]
    assert len(keys) == len(set(keys)) == N_SAMPLES_A * 5, (len(keys), len(set(keys)))
    # the storage of the sweep file landed on the lab's shared storage, not in the job's cwd
    assert list((lab.home / "users" / "alice" / "generations").glob("part-*.parquet"))
    assert not (lab.home / "mlflow.db").exists()  # the server took the runs

    # -- phase B: faults under a slower sweep
    src_b = write_fixture(tmp / "mmlu_b.json", N_SAMPLES_B)
    cfg_b = sweep_file(tmp / "sweep_b.yaml", "sweep-b", src_b, seed=20, latency=1.0)
    st = lab.serve_status()  # where the replicas are, known before the sweeps start
    victim_node = st["s1"]["replica_nodes"][0]
    victim = 1 if nodes[victim_node].get("worker1") else 2
    lost = [a for a in ("s1", "s2") if victim_node in st[a]["replica_nodes"]]
    before = len(call_keys(lab))
    jobs = {u: lab.submit(u, cfg_b, f"{u}-b") for u in ("alice", "bob")}
    lab.wait(lambda: len(call_keys(lab)) - before >= 4, "phase B to be under way", 300)
    assert lab.client().stop_job(jobs["bob"]), "bob's job ended before it could be stopped"
    lab.kill_worker(victim)
    assert lab.job_status(jobs["alice"]) == "RUNNING"
    status, logs = lab.wait_job(jobs["alice"])
    assert status == "SUCCEEDED", f"alice's job ended {status}:\n{logs[-8000:]}"
    bob_status, _ = lab.wait_job(jobs["bob"])
    assert bob_status == "STOPPED"
    # nothing lost: every sample of alice's graded with no failed call
    parents, children = user_runs(lab, "alice", "sweep-b")
    assert sorted(r.info.run_name for r in children) == ["permissive", "strict"]
    res_alice = results_of(lab, "alice", "sweep-b")
    for name, rows in res_alice.items():
        assert len({r["sample_id"] for r in rows}) == len(rows) == N_SAMPLES_B, name
        assert all(r["n_errors"] == 0 for r in rows), name
    # Serve replaced the lost replica(s) on the surviving "GPU" node
    st = lab.serve_status()
    for app in ("s1", "s2"):
        assert st[app]["running"] == 1, st
        # An app on the killed node started a replacement (Serve may first place one on the
        # node before it is declared dead, so more than one can start); the other app's
        # engine was never reloaded.
        if app in lost:
            assert st[app]["replicas_started"] >= 2, st
        else:
            assert st[app]["replicas_started"] == 1, st
        assert victim_node not in st[app]["replica_nodes"]
    # the cache stays readable after the stop and the kill: every part is whole
    import pyarrow.parquet as pq

    from df_ray.pipeline.cache import SCHEMA, GenerationCache

    parts = sorted(lab.home.glob("users/*/generations/part-*.parquet"))
    for part in parts:
        assert pq.read_table(part).schema.equals(SCHEMA)
    cache = GenerationCache(str(lab.home / "users" / "alice" / "generations"), user="alice",
                            read_from=[str(lab.home / "users" / "bob" / "generations")])
    assert len(cache) >= N_SAMPLES_A * 5
    # bob's rerun finishes; every configuration logged exactly once, nothing counted twice
    status, logs = lab.wait_job(lab.submit("bob", cfg_b, "bob-b2"))
    assert status == "SUCCEEDED", f"bob's rerun ended {status}:\n{logs[-8000:]}"
    parents, children = user_runs(lab, "bob", "sweep-b")
    assert sorted(r.info.run_name for r in children if r.info.status == "FINISHED") == \
        ["permissive", "strict"]
    res_bob = results_of(lab, "bob", "sweep-b")
    for name, rows in res_bob.items():
        assert len({r["sample_id"] for r in rows}) == len(rows) == N_SAMPLES_B, name
        assert all(r["n_errors"] == 0 for r in rows), name
        assert {r["sample_id"]: r["final_answer"] for r in rows} == \
            {r["sample_id"]: r["final_answer"] for r in res_alice[name]}
    # each phase-B call was generated once, except those lost with the killed replica
    keys_b = call_keys(lab)[before:]
    assert len(set(keys_b)) == N_SAMPLES_B * 5
    assert len(keys_b) - len(set(keys_b)) <= 2 * 16, "calls generated again beyond the lost ones"
