"""The fitted guardrail through the Ray pipeline: the calibration pass's second half (the
coordinator on the held-out samples) runs in the stage, the file it freezes holds the same
fit as an in-process fit, and MLflow logs the chosen thresholds, the certified bound and the
trusted rate."""

from __future__ import annotations

import json

import mlflow
import pytest

import df_ray
from df_ray.evaluation.context import load_samples
from tests.evaluation.test_guardrail_calibration import CERTIFY, N_HELD_OUT, _cfg
from tests.helpers import run_pipeline

pytestmark = pytest.mark.slow


def _fit(directory) -> dict:
    (path,) = directory.glob("*.json")
    return json.loads(path.read_text())


def test_the_pipeline_fits_the_guardrail_as_the_driver_does_and_logs_it(ray_local, tmp_path):
    (tmp_path / "ray").mkdir()
    (tmp_path / "local").mkdir()
    cfg = _cfg(tmp_path / "ray", "mc-wrong")
    result = run_pipeline(cfg, load_samples(cfg))
    assert result.failure is None
    piped = _fit(tmp_path / "ray" / "cal")
    df_ray.evaluate(_cfg(tmp_path / "local", "mc-wrong"))
    local = _fit(tmp_path / "local" / "cal")
    for key in ("n_samples", "patterns", "pairs", "agent_stats", "fit_calls", "fit_tokens"):
        assert piped[key] == local[key], key
    assert piped["guardrail_fit"] == local["guardrail_fit"]
    assert piped["guardrail_fit"]["chosen"]["setting"]["mode"] == "always"
    assert piped["fit_calls"] == 3 * N_HELD_OUT + CERTIFY

    m = result.metrics
    assert m["trusted_rate"] == 1.0
    assert (m["guardrail_k"], m["guardrail_tau_p"], m["guardrail_tau_m"]) == (1.0, 0.0, 0.0)
    assert m["guardrail_bound"] == pytest.approx(piped["guardrail_fit"]["bound"])
    run = mlflow.MlflowClient(cfg.tracking.uri).get_run(result.run_id)
    assert run.data.params["guardrail.fit.chosen"] == "always"
    assert run.data.params["calibration.keying"] == "text"
    assert run.data.metrics["guardrail_bound"] == pytest.approx(m["guardrail_bound"])
    assert run.data.metrics["trusted_rate"] == 1.0
