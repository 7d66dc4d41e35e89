"""A shared lab cluster for real, on one machine: the simulated cluster (`SimCluster`,
jobs/perf/sim_cluster.py: a Ray head and two worker nodes declaring 2 GPUs each), a real
``mlflow server``, the engine service deployed with ``df-ray serve`` (two scripted backbones,
one replica and one GPU each, so on the GPU nodes), and two users (alice, bob) who submit
sweeps with ``ray job submit`` at the same time.

Phase A (sharing): both users submit the same sweep at once, with the paper files' storage
(relative results/calibration/cache paths, ``tracking.uri: sqlite:///mlflow.db``) and the
cluster's DF_RAY_HOME and MLFLOW_TRACKING_URI. Both finish; each user's runs are in their own
experiment on the server; every backbone was loaded once (replicas started = configured, no
job started an engine of its own); every call both users made was generated once.

Phase B (faults): both submit a slower sweep; mid-sweep the worker node hosting a replica is
killed (SIGKILL of its raylet) and bob's job is stopped with ``ray job stop``. Alice's sweep
finishes once Serve has replaced the replica, with nothing lost (no failed call); the cache
stays readable; bob's rerun finishes with every configuration logged exactly once.

Everything is private to the test: the cluster's own --temp-dirs, ports, auth token and
processes, stopped by signalling the processes it started (never `ray stop`, which would stop
every Ray on the machine).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from jobs.perf.sim_cluster import VENV_BIN, SimCluster, free_ports, kill_group
from tests.helpers import REPO

pytestmark = pytest.mark.slow

JOB_TIMEOUT_S = 480.0
N_SAMPLES_A = 6
N_SAMPLES_B = 12
RESPONDER = "tests.cluster.responders:logged_majority_slow"
EXPERIMENT = "shared-service"


# --------------------------------------------------------------------------- the lab


class Lab:
    """The simulated cluster (`SimCluster`: a head with 4 CPUs for the jobs' drivers and
    stages, two worker nodes of 2 declared GPUs and no CPU), a real MLflow server and the
    clients' environment; every Serve replica logs the calls it makes (DF_RAY_CALL_LOG)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "df_ray_home"  # the lab's shared storage
        self.call_log = tmp / "calls.log"
        self.mlflow_port, self.http_port = free_ports(2)
        self.mlflow_uri = f"http://127.0.0.1:{self.mlflow_port}"
        self.cluster = SimCluster(tmp / "cluster", [0, 2, 2], head_cpus=4, worker_cpus=0,
                                  env={"DF_RAY_CALL_LOG": str(self.call_log),
                                       "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
        for v in ("MLFLOW_TRACKING_URI", "DF_RAY_HOME", "DF_RAY_USER", "DF_RAY_JOB"):
            self.cluster.env.pop(v, None)
        self.mlflow: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.tmp / "mlflow.log", "ab") as log:
            self.mlflow = subprocess.Popen([
                str(VENV_BIN / "mlflow"), "server", "--host", "127.0.0.1",
                "--port", str(self.mlflow_port), "--workers", "1",
                "--backend-store-uri", f"sqlite:///{self.tmp / 'mlflow-server.db'}",
                "--artifacts-destination", str(self.tmp / "mlflow-artifacts")],
                env=self.cluster.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=str(self.tmp))
        self.cluster.start()
        self.cluster.wait(self.mlflow_up, "the MLflow server")

    def stop(self) -> None:
        self.cluster.stop()
        kill_group(self.mlflow, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            if self.mlflow is not None:
                self.mlflow.wait(timeout=20)
        kill_group(self.mlflow)

    def mlflow_up(self) -> bool:
        with urllib.request.urlopen(self.mlflow_uri + "/health", timeout=5) as r:
            return r.status == 200

    def cli(self, *args: str, timeout_s: float = 300) -> str:
        p = subprocess.run([sys.executable, "-m", "df_ray.cli", *args,
                            "--address", self.cluster.gcs_address], env=self.cluster.env,
                           capture_output=True, text=True, timeout=timeout_s, cwd=str(REPO))
        assert p.returncode == 0, f"df-ray {' '.join(args)} failed:\n{p.stdout}\n{p.stderr[-5000:]}"
        return p.stdout

    def serve_status(self) -> dict:
        out = self.cli("serve", "status", "--json")
        return json.loads(out[out.index("{"):])

    def submit(self, user: str, config: Path, submission_id: str) -> str:
        """`ray job submit` as ``user``, with the lab's DF_RAY_HOME and MLflow server."""
        return self.cluster.submit(config, submission_id, {
            "DF_RAY_HOME": str(self.home), "MLFLOW_TRACKING_URI": self.mlflow_uri,
            "USER": user})

    def job_status(self, job_id: str) -> str:
        return str(self.cluster.client().get_job_status(job_id)).split(".")[-1]

    def wait_job(self, job_id: str) -> tuple[str, str]:
        return self.cluster.wait_job(job_id, JOB_TIMEOUT_S)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = Lab(tmp_path_factory.mktemp("lab").resolve())
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
    """Two scripted backbones, one replica each, one declared GPU each: on the GPU nodes."""
    path.write_text(yaml.safe_dump({
        "backbones": {f"s{i}": {"kind": "scripted", "model": f"m{i}", "script": RESPONDER,
                                "max_batch_size": 16} for i in (1, 2)},
        "serve": {"num_cpus": 0, "num_gpus": 1},
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
    nodes = {n["id"]: n["resources"] for n in lab.cluster.alive_nodes()}
    for app in ("s1", "s2"):
        assert st[app]["status"] == "RUNNING" and st[app]["running"] == 1, st
        assert st[app]["replicas_started"] == 1, st
        (node,) = st[app]["replica_nodes"]
        assert nodes[node].get("GPU") == 2, "a replica landed off the GPU nodes"
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
    owned = lab.cluster.driver("from ray.util.state import list_actors\n"
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
    victim = 1 if nodes[victim_node].get("node1") else 2
    lost = [a for a in ("s1", "s2") if victim_node in st[a]["replica_nodes"]]
    before = len(call_keys(lab))
    jobs = {u: lab.submit(u, cfg_b, f"{u}-b") for u in ("alice", "bob")}
    lab.cluster.wait(lambda: len(call_keys(lab)) - before >= 4, "phase B to be under way", 300)
    assert lab.cluster.client().stop_job(jobs["bob"]), "bob's job ended before it could be stopped"
    lab.cluster.kill_node(victim)
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
