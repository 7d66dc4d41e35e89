"""`ray job submit` end to end: a real Ray head with the dashboard (the Job API), a sweep of
scripted backbones on a 3-row MMLU-Pro fixture, and what the job logged to MLflow.

This is the path a lab uses on its cluster (cluster/README.md): the repository is uploaded as
the job's working dir with the excludes of cluster/runtime_env.yaml, the entrypoint is
``python jobs/sweep.py --config ...`` and `init_ray` joins the cluster through RAY_ADDRESS.

The head is private to this test (``tests.helpers.RayHead``): its own ports, its own --temp-dir, its own auth token, and
it is stopped by signalling the `ray start --block` process (never `ray stop`, which stops
every Ray on the machine). Every path the job writes to is absolute, so the job (whose cwd
is the uploaded copy of the working dir) writes where the test reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, VENV_BIN, RayHead, private_ray_head

pytestmark = pytest.mark.slow

RAY = VENV_BIN / "ray"
JOB_TIMEOUT_S = 300.0  # generous: on a loaded host the job alone took ~150 s

OPTIONS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
FIXTURE = [  # GoA's sampled MMLU-Pro schema: options inlined as (A) ... (J), gold letter
    {"question": "How many legs does a spider have?", "gold_answer": "H", "category": "biology"},
    {"question": "What is 2 + 3?", "gold_answer": "E", "category": "math"},
    {"question": "How many sides does a hexagon have?", "gold_answer": "F", "category": "math"},
]


@pytest.fixture(scope="module")
def ray_head():
    with private_ray_head() as head:
        yield head


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
            "method_args": {"ablation": "no_calibration"},
            "calibration": {"dir": str(tmp / "calibration"), "auto_fit": False},
            "cache_root": str(tmp / "cache"),
            "results_dir": str(tmp / "results"),
            "tracking": {"uri": f"sqlite:///{tmp / 'mlflow.db'}",
                         "experiment": "job-submit-test"},
            "batch_size": 2,
            "concurrency": 1,
        },
        "runs": [{"name": "strict", "method_args.disclosure": "strict"},
                 {"name": "permissive", "method_args.disclosure": "permissive"}],
    }


def runtime_env(tmp: Path) -> dict:
    """The cluster's runtime env (its excludes: the real upload) with this machine's paths."""
    data = yaml.safe_load((REPO / "cluster" / "runtime_env.yaml").read_text())
    return {"excludes": data["excludes"],
            "env_vars": {"DF_RAY_HOME": str(tmp / "df_ray_home"), "DF_RAY_USER": "tester",
                         "HF_HUB_OFFLINE": "1",
                         "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}}


def submit(head: RayHead, tmp: Path, entrypoint: list[str]) -> str:
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


def wait_job(head: RayHead, job_id: str) -> tuple[str, str]:
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
