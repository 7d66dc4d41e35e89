"""A simulated GPU cluster on one machine: a Ray head and worker nodes, each a `ray start
--block` process with its own --temp-dir and ports, declaring GPUs it does not have
(``--num-gpus``). Engines of kind ``simulated`` (or scripted) with ``num_gpus: 1`` are then
placed as vLLM engines are on a real cluster; sweeps are submitted with `ray job submit` to
`jobs/sweep.py`, as a lab does.

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/sim_cluster.py --nodes 2 --gpus-per-node 4

starts one (the head holds no GPU: it runs the job's driver and stages), prints the Job API
address and the `ray job submit` command, and stops it on Ctrl-C. Tests use `SimCluster`
(``tests/cluster/conftest.py``), the perf script `jobs/perf/cluster_scale.py`.

Everything is stopped by signalling the processes it started and any process naming its temp
dir: never `ray stop`, which would stop every Ray cluster on the machine.
"""

from __future__ import annotations

import argparse
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
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
RAY = str(VENV_BIN / "ray")
START_TIMEOUT_S = 240.0
#: Ports each node gets: node manager, object manager, agent listen, agent gRPC, metrics,
#: runtime-env agent.
NODE_PORTS = 6


def free_ports(n: int) -> list[int]:
    """Ports free on all interfaces now, outside the kernel's ephemeral range (where outgoing
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


def pids_matching(*needles: str) -> list[int]:
    """Processes (not this one) whose command line contains every one of ``needles``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if all(n in cmd for n in needles):
            out.append(int(d.name))
    return out


def pids_working_under(prefix: str) -> list[int]:
    """Processes (not this one) whose working directory is under ``prefix`` (a job's
    driver: its command line names only its script, its working dir is in the session)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if os.readlink(d / "cwd").startswith(prefix):
                out.append(int(d.name))
    return out


def stop_on_sigterm() -> None:
    """A SIGTERM (``kill``, ``timeout``) ends the script through its ``finally`` blocks, so
    the clusters it started are stopped, not left running (call from the main thread)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def kill_group(proc: subprocess.Popen | None, sig: int = signal.SIGKILL) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class SimCluster:
    """Node 0 is the head (``head_cpus`` CPUs for the job's driver and stages, ``gpus[0]``
    GPUs, the dashboard's Job API); node i > 0 is a worker declaring ``gpus[i]`` GPUs and
    ``worker_cpus`` CPUs. ``env`` is what clients (``ray job submit``, a driver) need."""

    def __init__(self, workdir: Path, gpus: list[int], *, head_cpus: int = 4,
                 worker_cpus: int = 0, object_store_mb: int = 200,
                 env: dict[str, str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.gpus = list(gpus)
        self.head_cpus, self.worker_cpus = head_cpus, worker_cpus
        self.object_store = object_store_mb * 1_000_000
        # A short temp dir: Ray puts unix sockets under it (108-byte path limit).
        self.temp_dir = tempfile.mkdtemp(prefix="dfsc", dir="/tmp")
        self.gcs, self.dash, self.client_port, *self.node_ports = free_ports(
            3 + NODE_PORTS * len(gpus))
        self.gcs_address = f"127.0.0.1:{self.gcs}"
        self.dash_address = f"http://127.0.0.1:{self.dash}"
        self.procs: dict[int, subprocess.Popen] = {}
        self.starts: dict[int, int] = {}
        e = dict(os.environ)
        for v in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
            e.pop(v, None)
        e["PATH"] = f"{VENV_BIN}{os.pathsep}{e.get('PATH', '')}"
        e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        e["RAY_AUTH_MODE"] = "token"
        e["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        e["RAY_USAGE_STATS_ENABLED"] = "0"
        e["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
        e["RAY_worker_niceness"] = "0"
        e["PYTHONUNBUFFERED"] = "1"
        # A raylet waits this long for its node's agents (slow on a loaded machine).
        e["RAY_agent_register_timeout_ms"] = "300000"
        e.update(env or {})
        self.env = e

    # -- nodes
    def _ports(self, i: int) -> list[str]:
        nm, om, al, ag, me, re_ = self.node_ports[NODE_PORTS * i:NODE_PORTS * (i + 1)]
        return [f"--node-manager-port={nm}", f"--object-manager-port={om}",
                f"--dashboard-agent-listen-port={al}", f"--dashboard-agent-grpc-port={ag}",
                f"--metrics-export-port={me}", f"--runtime-env-agent-port={re_}"]

    def _spawn(self, i: int, cmd: list[str]) -> None:
        self.starts[i] = self.starts.get(i, 0) + 1
        with open(self.log(i), "ab") as f:
            self.procs[i] = subprocess.Popen(cmd, env=self.env, stdout=f,
                                             stderr=subprocess.STDOUT, start_new_session=True,
                                             cwd=str(self.workdir))

    def log(self, i: int) -> Path:
        return self.workdir / f"node{i}.log"

    def start_node(self, i: int) -> None:
        # --node-name: how df_ray names the node in its lines (Ray turns the loopback address
        # into this machine's, the same for every node here).
        common = ["--block", "--node-ip-address=127.0.0.1", f"--node-name=node{i}",
                  f"--num-gpus={self.gpus[i]}",
                  f"--object-store-memory={self.object_store}", "--disable-usage-stats",
                  f"--resources={json.dumps({f'node{i}': 1})}", *self._ports(i)]
        if i == 0:
            self._spawn(0, [RAY, "start", "--head", f"--port={self.gcs}",
                            f"--dashboard-port={self.dash}", "--dashboard-host=127.0.0.1",
                            "--include-dashboard=true",
                            f"--ray-client-server-port={self.client_port}",
                            f"--num-cpus={self.head_cpus}", f"--temp-dir={self.temp_dir}",
                            *common])
        else:
            self._spawn(i, [RAY, "start", f"--address={self.gcs_address}",
                            f"--num-cpus={self.worker_cpus}",
                            f"--temp-dir={self.temp_dir}/n{i}", *common])

    def start(self) -> SimCluster:
        """The head (until its Job API answers), then every worker (until all joined)."""
        t = time.time()
        for attempt in range(1, 5):
            self.start_node(0)
            try:
                # the Job API comes up before the head's raylet has registered, which a
                # loaded machine can miss (`ray start` then exits): wait for the node too
                self.wait(lambda: self.jobs_api_up() and len(self.alive_nodes()) >= 1,
                          "the head's Job API and its node")
                break
            except RuntimeError:
                # `ray start` gives its node's processes fixed timeouts (the dashboard's, the
                # raylet's 30 s); a loaded machine can miss them: start the head again.
                if attempt == 4:
                    raise
                for pid in pids_matching(self.temp_dir):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(2.0)
        for i in range(1, len(self.gpus)):
            self.start_node(i)
        self.wait_nodes(len(self.gpus))
        self.started_s = time.time() - t
        return self

    def wait_nodes(self, n: int, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until ``n`` nodes are alive; a worker whose `ray start` gave up is started again."""

        def joined() -> bool:
            for i in range(1, len(self.gpus)):
                p = self.procs.get(i)
                if p is not None and p.poll() is not None and self.starts.get(i, 0) < 6:
                    self._kill_node_processes(i)
                    self.start_node(i)
            return len(self.alive_nodes()) >= n

        self.wait(joined, f"{n} nodes to be alive", timeout_s)

    def kill_node(self, i: int) -> None:
        """Lose worker ``i`` as a machine is lost: SIGKILL its raylet and its processes."""
        port = self.node_ports[NODE_PORTS * i]
        for pid in pids_matching("raylet", f"--node_manager_port={port}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        kill_group(self.procs.get(i))
        self._kill_node_processes(i)

    def kill_head(self) -> None:
        """Lose the head as a machine is lost: SIGKILL every process of its node (GCS,
        raylet, dashboard, its workers: the stage actors) and the job drivers it runs. The
        workers' nodes give up on the GCS on their own (Ray's reconnect timeout, 60 s)."""
        session = f"{self.temp_dir}/session"
        kill_group(self.procs.get(0))
        for pid in {*pids_matching(session), *pids_working_under(session)}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _kill_node_processes(self, i: int) -> None:
        for pid in pids_matching(f"{self.temp_dir}/n{i}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        for i in sorted(self.procs, reverse=True):
            kill_group(self.procs[i], signal.SIGTERM)
        for i in sorted(self.procs, reverse=True):
            try:
                self.procs[i].wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill_group(self.procs[i])
        deadline = time.time() + 10
        while pids_matching(self.temp_dir) and time.time() < deadline:
            time.sleep(0.5)
        for pid in pids_matching(self.temp_dir):  # workers run in their own process groups
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for port in self.node_ports[::NODE_PORTS]:  # raylets, whatever their state
            for pid in pids_matching("raylet", f"--node_manager_port={port}"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    # -- asking the cluster
    def wait(self, cond, what: str, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            head = self.procs.get(0)
            if head is not None and head.poll() is not None:
                raise RuntimeError(f"the head exited ({head.returncode}):\n{self.tail(0)}")
            with contextlib.suppress(Exception):
                if cond():
                    return
            time.sleep(1.0)
        raise TimeoutError(f"waited {timeout_s:.0f}s for {what}\n" + "\n".join(
            self.tail(i) for i in self.procs))

    def tail(self, i: int, n: int = 30) -> str:
        try:
            lines = self.log(i).read_text(errors="replace").splitlines()[-n:]
        except OSError:
            lines = []
        return "\n".join([f"--- node {i}", *lines])

    def client(self):
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.dash_address, headers={
            "Authorization": f"Bearer {self.env['RAY_AUTH_TOKEN']}"})

    def jobs_api_up(self) -> bool:
        return self.client().list_jobs() is not None

    def driver(self, code: str, timeout_s: float = 180) -> Any:
        """Run ``code`` in a fresh driver joined to the cluster (this process never joins
        it); it sets ``result``, which comes back through JSON."""
        script = self.workdir / f"driver-{time.time_ns()}.py"
        script.write_text("import json, ray\n"
                          f"ray.init(address={self.gcs_address!r}, log_to_driver=False)\n"
                          + code + "\nprint('RESULT=' + json.dumps(result, default=str))\n")
        p = subprocess.run([sys.executable, str(script)], env=self.env, capture_output=True,
                           text=True, timeout=timeout_s, cwd=str(ROOT))
        for line in p.stdout.splitlines():
            if line.startswith("RESULT="):
                return json.loads(line[len("RESULT="):])
        raise RuntimeError(f"driver failed ({p.returncode}):\n{p.stdout[-3000:]}\n"
                           f"{p.stderr[-5000:]}")

    def alive_nodes(self) -> list[dict]:
        return self.driver("result = [{'id': n['NodeID'], 'resources': n['Resources']} "
                           "for n in ray.nodes() if n['Alive']]")

    # -- jobs
    def submit(self, config: Path, submission_id: str, env_vars: dict[str, str] | None = None,
               args: tuple[str, ...] = (), working_dir: Path = ROOT) -> str:
        """`ray job submit --working-dir <repo> -- python jobs/sweep.py --config ...`
        (``working_dir``: another checkout, e.g. an earlier commit to compare with)."""
        import yaml

        data = yaml.safe_load((ROOT / "cluster" / "runtime_env.yaml").read_text())
        runtime_env = {"excludes": data["excludes"],
                       "env_vars": {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
                                    "HF_DATASETS_OFFLINE": "1", **(env_vars or {})}}
        env_file = self.workdir / f"runtime_env-{submission_id}.json"
        env_file.write_text(json.dumps(runtime_env))
        cmd = [RAY, "job", "submit", "--address", self.dash_address, "--working-dir", str(working_dir),
               "--runtime-env", str(env_file), "--submission-id", submission_id, "--no-wait",
               "--", "python", "jobs/sweep.py", "--config", str(config), *args]
        deadline = time.time() + 120
        while True:
            p = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=180,
                               cwd=str(self.workdir))
            out = p.stdout + p.stderr
            if p.returncode == 0:
                return submission_id
            if "No available agent" in out and time.time() < deadline:
                time.sleep(2.0)
                continue
            raise RuntimeError(f"`ray job submit` failed ({p.returncode}):\n{out}")

    def wait_job(self, job_id: str, timeout_s: float = 600) -> tuple[str, str]:
        """The job's final status and its logs."""
        deadline = time.time() + timeout_s
        status = ""
        while time.time() < deadline:
            status = str(self.client().get_job_status(job_id))
            if status.split(".")[-1] in ("SUCCEEDED", "FAILED", "STOPPED"):
                return status.split(".")[-1], self.client().get_job_logs(job_id)
            time.sleep(1.0)
        raise TimeoutError(f"job {job_id} still {status} after {timeout_s:.0f}s:\n"
                           + self.client().get_job_logs(job_id)[-4000:])

    def job_logs(self, job_id: str) -> str:
        return self.client().get_job_logs(job_id)


@contextlib.contextmanager
def sim_cluster(workdir: Path, gpus: list[int], **kw: Any):
    """A started `SimCluster`, stopped at the end whatever happens."""
    c = SimCluster(workdir, gpus, **kw)
    try:
        yield c.start()
    finally:
        c.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=2, help="worker nodes (besides the head)")
    p.add_argument("--gpus-per-node", type=int, default=4)
    p.add_argument("--head-cpus", type=int, default=4)
    p.add_argument("--workdir", default=None)
    a = p.parse_args()
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="df-ray-sim-cluster-"))
    with sim_cluster(workdir, [0] + [a.gpus_per_node] * a.nodes, head_cpus=a.head_cpus) as c:
        print(f"simulated cluster up in {c.started_s:.1f}s: {a.nodes} x {a.gpus_per_node} GPUs;"
              f" Ray address {c.gcs_address}, Job API {c.dash_address}; logs in {workdir}")
        print(f"submit with RAY_AUTH_TOKEN={c.env['RAY_AUTH_TOKEN']} RAY_AUTH_MODE=token "
              f"ray job submit --address {c.dash_address} --working-dir . -- python "
              "jobs/sweep.py --config <sweep.yaml>")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
