"""Backbone weights before any engine starts: gated models without a token and uncached models
offline are refused, one line each; a run records and pins the commits it loaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from df_ray.engines import hub_models as H
from df_ray.engines import make_spec
from df_ray.pipeline import pins

REPO = Path(__file__).resolve().parents[2]
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


def _cached_model(home: Path, model: str, commit: str = COMMIT, weights: bool = True) -> Path:
    """A model in the Hugging Face cache as ``snapshot_download`` leaves it."""
    repo = home / "hub" / f"models--{model.replace('/', '--')}"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    if weights:
        (snap / "model.safetensors").write_bytes(b"\0")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snap


@pytest.fixture
def offline_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    H.model_commit.cache_clear()
    yield tmp_path / "hf"
    H.model_commit.cache_clear()


def test_offline_weights_must_be_cached(offline_home):
    specs = {"qwen": make_spec(kind="vllm", model="Qwen/Qwen2.5-7B-Instruct"),
             "math": make_spec(kind="vllm", model="mistralai/Mathstral-7B-v0.1"),
             "tiny": make_spec(kind="scripted", model="scripted-a")}
    problems = H.weight_problems(specs)
    assert len(problems) == 2  # every problem at once; the scripted engine loads nothing
    assert all("\n" not in p and str(offline_home / "hub") in p for p in problems)
    assert "backbone 'math': mistralai/Mathstral-7B-v0.1" in problems[0]
    assert "hf download Qwen/Qwen2.5-7B-Instruct" in problems[1]
    _cached_model(offline_home, "Qwen/Qwen2.5-7B-Instruct")
    _cached_model(offline_home, "mistralai/Mathstral-7B-v0.1", weights=False)
    problems = H.weight_problems(specs)
    assert len(problems) == 1 and "Mathstral" in problems[0]  # a config without weights


def test_a_run_records_the_commit_its_weights_resolve_to(offline_home, tmp_path):
    _cached_model(offline_home, "Qwen/Qwen2.5-7B-Instruct")
    assert H.model_commit("Qwen/Qwen2.5-7B-Instruct", None) == COMMIT
    assert H.model_commit("Qwen/Qwen2.5-Coder-7B-Instruct", None) == "unresolved"
    pinned = "f" * 40
    assert H.model_commit("anything/at-all", pinned) == pinned
    assert H.model_commit(str(tmp_path), None) == "local"
    prov = {"provenance.model_commit.qwen": COMMIT,
            "provenance.model_commit.other": "unresolved",
            "provenance.data_commit.nguha/legalbench": "a" * 40}
    assert pins.set_flags(prov) == ["--set", f"backbones.qwen.revision={COMMIT}",
                                    "--set", f"data_revision={'a' * 40}"]


def test_pins_read_back_from_samples_parquet(tmp_path):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    prov = {"provenance.model_commit.qwen": COMMIT}
    schema = pa.schema([("id", pa.string())]).with_metadata(
        {pins.METADATA_KEY: json.dumps(prov).encode()})
    f = tmp_path / "samples.parquet"
    pq.write_table(schema.empty_table(), f)
    assert pins.from_results(str(f)) == prov
    out = subprocess.run([sys.executable, "-m", "df_ray.pipeline.pins", str(f)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                         check=True)
    assert out.stdout.strip() == f"--set backbones.qwen.revision={COMMIT}"


def test_a_sweep_with_a_gated_backbone_and_no_token_exits_2_before_any_engine(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE", "RAY_ADDRESS")}
    env.update({"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0",
                "HF_DATASETS_OFFLINE": "0",
                # the hub is asked about the other backbones: a closed port, no network
                "HF_ENDPOINT": "http://127.0.0.1:9", "PYTHONPATH": str(REPO)})
    out = subprocess.run(
        [sys.executable, "-m", "df_ray.cli", "run",
         "--config", str(REPO / "jobs" / "configs" / "cluster_example.yaml"),
         "--set", f"source={REPO / 'tests' / 'fixtures' / 'math500.jsonl'}",
         "--set", f"results_dir={tmp_path / 'results'}",
         "--set", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = [x for x in out.stderr.splitlines() if "Mathstral" in x]
    assert len(lines) == 1 and "mistralai/Mathstral-7B-v0.1 is gated" in lines[0]
    assert "HF_TOKEN" in lines[0]
    assert "Started a local Ray instance" not in out.stderr + out.stdout
    assert not (tmp_path / "results").exists()
