"""Shared engine service vs job-owned engines: two users run the same sweep at the same time.

A private Ray cluster (a head started with `ray start`, its own temp dir and ports) hosts two
"users": each runs ``jobs/sweep.py``'s entry point as its own driver process joined to the
cluster (USER=alice / bob; one shared DF_RAY_HOME, so one generation cache, as on a lab
cluster), both started at once. Two modes:

- ``owned``: each job starts its own engines (EngineActor per backbone), as with a plain
  ``kind: embedded`` / ``scripted`` config;
- ``served``: ``df-ray serve`` deploys the backbones once (timed apart: it is paid once for
  every user and job), and both jobs' backbones are ``kind: serve``.

Printed per mode: wall time (both jobs started -> both done), engine loads (engine processes
started), peak engine RSS (the largest sum over all engine processes at one time, sampled
every 0.2 s from /proc), engine calls generated of those asked (the service generates a
request that two jobs send at once only once), and requests per engine batch (mean; asked
and generated).

    .venv/bin/python jobs/perf/serve_sharing.py                     # embedded models (real RSS)
    .venv/bin/python jobs/perf/serve_sharing.py --engine scripted --samples 40

With ``--nodes N`` it runs on a simulated multi-node cluster instead (`SimCluster`: a head for
the jobs' drivers and stages, N worker nodes of 2 declared GPUs): the service's scripted
backbones (``user_timed``: a fixed engine time per request) hold one GPU a replica, N replicas
each, and two users submit their own sweeps (other seeds: no call in common) with `ray job
submit` at once. Printed per user: the calls the engines made for it, its share of the
engines' time over the whole run and while both users' calls were being served, its job's
wall time, its results' rows and its MLflow runs (in its own experiment).

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/serve_sharing.py --nodes 2 --samples 40
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import ROOT, header

PY = sys.executable
RAY = str(Path(sys.executable).parent / "ray")


def _ports(n: int) -> list[int]:
    out: list[int] = []
    while len(out) < n:
        p = random.randrange(20000, 32700)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", p))
            except OSError:
                continue
        if p not in out:
            out.append(p)
    return out


def backbones(engine: str) -> dict:
    if engine == "embedded":
        return {"smol": {"kind": "embedded", "model": "smollm2-135m-instruct", "n_ctx": 1024,
                         "max_batch_size": 8},
                "gemma": {"kind": "embedded", "model": "gemma3-270m", "n_ctx": 1024,
                          "prompt_format": "completion", "max_batch_size": 8}}
    sim = "jobs.perf.simengine:sim_c8_t0.2_p0.002_n50"
    return {"smol": {"kind": "scripted", "model": "sim-a", "script": sim, "max_batch_size": 8},
            "gemma": {"kind": "scripted", "model": "sim-b", "script": sim, "max_batch_size": 8}}


def sweep(tmp: Path, engine: str, served: bool, n: int, max_tokens: int) -> Path:
    bb = backbones(engine)
    if served:
        bb = {name: {"kind": "serve", "model": s["model"], "max_batch_size": s["max_batch_size"]}
              for name, s in bb.items()}
    rows = [{"problem": f"What is {i} + {2 * i + 3}?", "answer": str(3 * i + 3),
             "subject": "Algebra", "level": 1, "unique_id": f"perf/{i}.json"}
            for i in range(n)]
    src = tmp / "math.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = {"name": "serve-sharing", "base": {
        "benchmark": "math", "source": str(src),
        "backbones": bb,
        "agents": [{"id": "a1", "backbone": "smol", "seed": 1, "max_tokens": max_tokens},
                   {"id": "a2", "backbone": "gemma", "seed": 2, "max_tokens": max_tokens},
                   {"id": "a3", "backbone": "smol", "seed": 3, "max_tokens": max_tokens}],
        "coordinator": {"id": "coord", "backbone": "smol", "temperature": 0.2,
                        "max_tokens": max_tokens},
        "method_args": {"ablation": "no_calibration"}, "batch_size": 4, "concurrency": 1,
        # As a paper sweep file: relative storage, resolved against DF_RAY_HOME per job.
        "tracking": {"uri": "sqlite:///mlflow.db", "experiment": "serve-sharing"},
    }}
    import yaml

    path = tmp / ("served.yaml" if served else "owned.yaml")
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


class Monitor:
    """Engine processes (job-owned EngineActors, Serve replicas of our apps) seen in /proc."""

    MARKERS = ("ray::EngineActor", "ray::ServeReplica:smol", "ray::ServeReplica:gemma")

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.peak_sum = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *a):
        self._stop.set()
        self._t.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for d in Path("/proc").iterdir():
                if not d.name.isdigit():
                    continue
                try:
                    cmd = (d / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
                    if not cmd.startswith(self.MARKERS):
                        continue
                    for line in (d / "status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
                    self.seen.add(int(d.name))
                except OSError:
                    continue
            self.peak_sum = max(self.peak_sum, total)
            self._stop.wait(0.2)


def user_main(args) -> int:
    """One user's job: jobs/sweep.py's run, plus the job-owned engines' batch statistics."""
    import ray

    from df_ray.cli import load_with_overrides
    from df_ray.pipeline import runner as runner_mod

    stats: list[dict] = []
    orig = runner_mod.Runner.shutdown

    def shutdown(self):
        pool = self.engines._pool  # the job-owned engines, if they were started
        if pool is not None:
            for hs in pool.handles.values():
                for h in hs:
                    if hasattr(h, "stats"):
                        with contextlib.suppress(Exception):
                            stats.append(ray.get(h.stats.remote(), timeout=30))
        orig(self)

    runner_mod.Runner.shutdown = shutdown
    results = runner_mod.run_sweep(load_with_overrides(args.config, [], None))
    Path(args.out).write_text(json.dumps({
        "engine_stats": stats, "fresh_calls": sum(r.metrics.get("fresh_calls", 0)
                                                  for r in results)}))
    return 0


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.temp_dir = tempfile.mkdtemp(prefix="dfps", dir="/tmp")
        gcs, dash, cl, nm, om, al, ag, me, rt = _ports(9)
        self.address = f"127.0.0.1:{gcs}"
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
        self.env.update({"PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0",
                         "RAY_worker_niceness": "0", "DF_RAY_HOME": str(tmp / "home"),
                         "HF_HUB_OFFLINE": "1", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"})
        # Token auth with a token of our own (Ray turns it on by default): every process of
        # this script sends it, whatever other clusters on this machine use.
        import secrets

        self.env["RAY_AUTH_MODE"] = "token"
        self.env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        cmd = [RAY, "start", "--head", "--block", f"--port={gcs}", f"--dashboard-port={dash}",
               "--dashboard-host=127.0.0.1", f"--ray-client-server-port={cl}",
               f"--node-manager-port={nm}", f"--object-manager-port={om}",
               f"--dashboard-agent-listen-port={al}", f"--dashboard-agent-grpc-port={ag}",
               f"--metrics-export-port={me}", f"--runtime-env-agent-port={rt}",
               "--node-ip-address=127.0.0.1", "--num-cpus=8", "--num-gpus=0",
               "--object-store-memory=200000000", "--disable-usage-stats",
               f"--temp-dir={self.temp_dir}"]
        self.log = open(tmp / "head.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                p = subprocess.run([PY, "-c", f"import ray; ray.init(address='{self.address}');"
                                    " print('ok')"], env=self.env, capture_output=True,
                                   text=True, timeout=90)
            except subprocess.TimeoutExpired:
                continue
            if "ok" in p.stdout:
                return
            time.sleep(2)
        raise RuntimeError("the head did not start:\n" + (tmp / "head.log").read_text()[-3000:])

    def run(self, *cmd: str, env: dict | None = None, **kw) -> subprocess.Popen:
        return subprocess.Popen(list(cmd), env={**self.env, "RAY_ADDRESS": self.address,
                                                **(env or {})}, cwd=str(ROOT), **kw)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                with contextlib.suppress(OSError, ProcessLookupError):
                    if self.temp_dir.encode() in (d / "cmdline").read_bytes():
                        os.kill(int(d.name), signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.log.close()


def serve_stats(cluster: Cluster) -> list[dict]:
    code = ("import json, ray; from ray import serve; ray.init(address='auto'); out = []\n"
            "for app in ('smol', 'gemma'):\n"
            "    out.append(serve.get_deployment_handle('EngineServer', app).stats.remote()"
            ".result(timeout_s=60))\n"
            "print('STATS=' + json.dumps(out))")
    p = cluster.run(PY, "-c", code, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=180)
    for line in out.splitlines():
        if line.startswith("STATS="):
            return json.loads(line[6:])
    raise RuntimeError(err[-3000:])


def run_mode(mode: str, args, tmp: Path) -> dict:
    served = mode == "served"
    cluster = Cluster(tmp)
    try:
        cfg = sweep(tmp, args.engine, served, args.samples, args.max_tokens)
        with Monitor() as mon:
            deploy_s = 0.0
            if served:
                t = time.time()
                p = cluster.run(PY, "-m", "df_ray.cli", "serve", "--config",
                                str(tmp / "pool.yaml"), "--proxy-location", "Disabled",
                                stdout=subprocess.DEVNULL)
                assert p.wait(600) == 0, "df-ray serve failed"
                deploy_s = time.time() - t
            t = time.time()
            procs = []
            for user in ("alice", "bob"):
                out = tmp / f"{mode}-{user}.json"
                log = open(tmp / f"{mode}-{user}.log", "wb")  # noqa: SIM115
                # Job mode (as under `ray job submit`): per-user experiment and results, one
                # shared cache under DF_RAY_HOME; each user's own MLflow store.
                env = {"USER": user, "DF_RAY_JOB": "1",
                       "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow-{user}.db"}
                procs.append((cluster.run(PY, __file__, "--user-proc", "--config", str(cfg),
                                          "--out", str(out), env=env,
                                          stdout=log, stderr=subprocess.STDOUT), out, log))
            for p, _, log in procs:
                rc = p.wait(3600)
                log.close()
                assert rc == 0, (tmp / f"{mode}-{Path(log.name).stem.split('-')[1]}.log"
                                 ).read_text()[-4000:]
            wall = time.time() - t
            stats = serve_stats(cluster) if served else [
                s for _, out, _ in procs for s in json.loads(out.read_text())["engine_stats"]]
        batches = sum(s["batches"] or 0 for s in stats)  # None: a continuous engine
        generated = sum(s.get("generated", s.get("served", 0)) for s in stats)
        asked = sum(s["served"] for s in stats)
        return {"mode": mode, "wall_s": wall, "deploy_s": deploy_s, "loads": len(mon.seen),
                "peak_rss_mb": mon.peak_sum / 2**20, "generated": generated,
                "batches": batches, "per_batch": generated / batches if batches else 0.0,
                "served_requests": asked,
                "asked_per_batch": asked / batches if batches else 0.0}
    finally:
        cluster.stop()


#: Engine seconds per request of ``user_timed`` (``DF_RAY_SHARE_ENGINE_S``), and where it logs.
SHARE_LOG_ENV = "DF_RAY_SHARE_LOG"


def user_timed(request) -> str:
    """A scripted backbone for the cluster mode: ``DF_RAY_SHARE_ENGINE_S`` seconds of engine
    time per request (the scripted engine serves a batch's requests one after another), one
    line ``<time> <user> <model>`` per call in ``DF_RAY_SHARE_LOG``, the user read from the
    ``[user <name>]`` of the request's system prompt; the answer is ``majority``'s."""
    import re as _re

    from df_ray.engines.scripted import majority

    time.sleep(float(os.environ.get("DF_RAY_SHARE_ENGINE_S", "0.5")))
    system = " ".join(m.content for m in request.messages if m.role == "system")
    user = (_re.findall(r"\[user (\w+)\]", system) or ["?"])[0]
    fd = os.open(os.environ[SHARE_LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.time():.4f} {user} {request.model}\n".encode())
    finally:
        os.close(fd)
    return majority(request)


def user_sweep(work: Path, home: Path, user: str, seed: int, n: int) -> Path:
    """``user``'s sweep on the service's backbones: the rows of ``sweep``'s file, seeds of
    its own, ``[user <name>]`` in every agent's system prompt."""
    import yaml

    rows = [{"problem": f"What is {i} + {2 * i + 3}?", "answer": str(3 * i + 3),
             "subject": "Algebra", "level": 1, "unique_id": f"perf/{i}.json"} for i in range(n)]
    src = work / "math.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    system = f"Solve the problem. [user {user}]"
    agents = [{"id": f"a{i}", "backbone": b, "seed": seed + i, "system_prompt": system,
               "max_tokens": 24} for i, b in ((1, "smol"), (2, "gemma"), (3, "smol"))]
    path = work / f"sweep-{user}.yaml"
    path.write_text(yaml.safe_dump({"name": "serve-sharing", "base": {
        "benchmark": "math", "source": str(src),
        "backbones": {b: {"kind": "serve", "model": m, "max_batch_size": 8}
                      for b, m in (("smol", "sim-a"), ("gemma", "sim-b"))},
        "agents": agents,
        "coordinator": {"id": "coord", "backbone": "gemma", "seed": seed, "max_tokens": 24,
                        "system_prompt": system},
        "method_args": {"ablation": "no_calibration"}, "batch_size": 4, "concurrency": 1,
        "tracking": {"uri": f"sqlite:///{home}/mlflow.db", "experiment": "serve-sharing"},
        "results_dir": "results", "cache_root": "generations"}}, sort_keys=False))
    return path


def engine_shares(log: Path, bin_s: float = 10.0) -> dict[str, dict]:
    """Per user: calls, share of all calls (each costs the same engine time), and, while both
    users had calls being served (from the later first call to the earlier last call): its
    share of the calls, per backbone, and the smallest share in any ``bin_s`` bin."""
    calls: dict[str, list[tuple[float, str]]] = {}
    for line in log.read_text().splitlines():
        t, user, model = line.split()
        calls.setdefault(user, []).append((float(t), model))
    lo = max(min(t for t, _ in cs) for cs in calls.values())
    hi = min(max(t for t, _ in cs) for cs in calls.values())
    total = sum(len(cs) for cs in calls.values())
    both = [(t, u, m) for u, cs in calls.items() for t, m in cs if lo <= t <= hi]
    out: dict[str, dict] = {}
    for u, cs in calls.items():
        per_model = {m: sum(1 for _, v, w in both if v == u and w == m)
                     / max(1, sum(1 for _, _, w in both if w == m))
                     for m in sorted({m for _, _, m in both})}
        bins = [[v for t, v, _ in both if lo + k * bin_s <= t < lo + (k + 1) * bin_s]
                for k in range(max(1, int((hi - lo) // bin_s)))]
        out[u] = {"calls": len(cs), "share": len(cs) / total,
                  "share_both": sum(1 for _, v, _ in both if v == u) / max(1, len(both)),
                  "per_model": per_model, "window_s": hi - lo,
                  "min_bin": min((b.count(u) / len(b) for b in bins if b), default=0.0)}
    return out


def run_cluster(args) -> None:
    """Two users' sweeps at once through one service on a simulated multi-node cluster."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq
    from mlflow.tracking import MlflowClient

    from jobs.perf.sim_cluster import sim_cluster

    work = Path(tempfile.mkdtemp(prefix="serve-sharing-cluster-"))
    home, log = work / "home", work / "share.log"
    home.mkdir()
    pool = work / "pool.yaml"
    import yaml

    pool.write_text(yaml.safe_dump({"backbones": {
        b: {"kind": "scripted", "model": m, "script": "jobs.perf.serve_sharing:user_timed",
            "max_batch_size": 8, "replicas": args.nodes}
        for b, m in (("smol", "sim-a"), ("gemma", "sim-b"))},
        "serve": {"num_cpus": 0, "num_gpus": 1}}))
    env = {SHARE_LOG_ENV: str(log), "DF_RAY_SHARE_ENGINE_S": str(args.engine_s)}
    with sim_cluster(work / "cluster", [0] + [2] * args.nodes, head_cpus=4, env=env) as c:
        subprocess.run([PY, "-m", "df_ray.cli", "serve", "--config", str(pool), "--address",
                        c.gcs_address, "--proxy-location", "Disabled"], env=c.env, check=True,
                       cwd=str(ROOT), stdout=subprocess.DEVNULL, timeout=900)
        sweeps = {u: user_sweep(work, home, u, seed, args.samples)
                  for u, seed in (("alice", 10), ("bob", 50))}
        with ThreadPoolExecutor(2) as pool:  # both submitted at once
            futures = {u: pool.submit(c.submit, path, u, {"DF_RAY_HOME": str(home), "USER": u})
                       for u, path in sweeps.items()}
            jobs = {u: f.result() for u, f in futures.items()}
        ended = {u: c.wait_job(j, 1800)[0] for u, j in jobs.items()}
        walls = {u: (c.client().get_job_info(j).end_time
                     - c.client().get_job_info(j).start_time) / 1000 for u, j in jobs.items()}
    shares = engine_shares(log)
    client = MlflowClient(tracking_uri=f"sqlite:///{home}/mlflow.db")
    for u in ("alice", "bob"):
        exp = client.get_experiment_by_name(f"{u}/serve-sharing")
        runs = client.search_runs([exp.experiment_id]) if exp else []
        rows = sum(pq.ParquetFile(f).metadata.num_rows
                   for f in (home / "users" / u / "results").rglob("samples.parquet"))
        sh = shares[u]
        per_model = ", ".join(f"{m} {v:.2f}" for m, v in sh["per_model"].items())
        print(f"{u:>5}: job {ended[u]} in {walls[u]:.1f} s; engines made {sh['calls']} calls "
              f"for it: {sh['share']:.2f} of the engines' time; while both were served "
              f"({sh['window_s']:.1f} s) {sh['share_both']:.2f} ({per_model}; at least "
              f"{sh['min_bin']:.2f} in every 10 s); {rows} result rows, "
              f"{len(runs)} MLflow runs (the sweep's and its configuration's) in experiment "
              f"{u}/serve-sharing")
    shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("embedded", "scripted"), default=None)
    ap.add_argument("--samples", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--modes", default="owned,served")
    ap.add_argument("--nodes", type=int, default=0,
                    help="run two users' own sweeps through one service on a simulated "
                         "cluster of this many GPU nodes instead")
    ap.add_argument("--engine-s", type=float, default=0.5,
                    help="--nodes: engine seconds per request")
    ap.add_argument("--user-proc", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.user_proc:
        return user_main(args)
    if args.nodes:
        header(f"serve_sharing: two users' own sweeps through one service, {args.nodes} GPU "
               f"nodes ({args.samples} samples, 4 calls each)")
        run_cluster(args)
        return 0
    if args.engine is None:
        import importlib.util

        args.engine = "embedded" if importlib.util.find_spec("llama_cpp") else "scripted"
    header(f"serve_sharing: two users, the same sweep at once ({args.engine} engines, "
           f"{args.samples} samples, 4 calls each)")
    rows = []
    for mode in args.modes.split(","):
        tmp = Path(tempfile.mkdtemp(prefix=f"serve-sharing-{mode}-"))
        try:
            import yaml

            (tmp / "pool.yaml").write_text(yaml.safe_dump({
                "backbones": backbones(args.engine), "serve": {"num_cpus": 1}}))
            rows.append(run_mode(mode, args, tmp))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        r = rows[-1]
        print(f"{r['mode']:>6}: wall {r['wall_s']:.1f}s (service deploy {r['deploy_s']:.1f}s, "
              f"paid once), engine loads {r['loads']}, peak engine RSS {r['peak_rss_mb']:.0f} MB, "
              f"requests generated {r['generated']} of {r['served_requests']} asked, "
              f"engine batches {r['batches']}, requests per batch {r['asked_per_batch']:.2f} "
              f"asked, {r['per_batch']:.2f} generated",
              flush=True)
    return 0


if __name__ == "__main__":
    from jobs.perf.sim_cluster import stop_on_sigterm

    stop_on_sigterm()
    sys.exit(main())
