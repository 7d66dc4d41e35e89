"""Honest outcomes: a configuration whose calls failed says so. Above ``max_error_rate`` it is
FAILED (non-zero exit naming it and its first errors, a FAILED MLflow run with the reason,
run again by a rerun); at or below it, it finishes and its failed calls are counted and shown.
Real local Ray, real MLflow store, the real CLI entry point, scripted engines."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from df_ray.cli import main
from df_ray.config import ConfigError, SweepConfig
from df_ray.tracking import FAILURE_TAG
from tests.helpers import base_config, write_mmlu_goa, write_sweep

N = 4  # samples; 4 calls each (3 agents + the coordinator)


def sweep_file(tmp_path, max_error_rate=None, all_fail=False):
    src = write_mmlu_goa(tmp_path / "mmlu.json", N)
    base = base_config(tmp_path, src, batch_size=2, concurrency=1)
    # A context of one token: every prompt is too long, so every call to it fails.
    for name, b in base["backbones"].items():
        if all_fail or name == "b1":
            b["max_model_len"] = 1
    if max_error_rate is not None:
        base["max_error_rate"] = max_error_rate
    return write_sweep(tmp_path / "sweep.yaml", base, [{"name": "df"}])


def runs(tmp_path) -> list:
    client = MlflowClient(f"sqlite:///{tmp_path.resolve()}/mlflow.db")
    exp = client.get_experiment_by_name("reliability")
    return [r for r in client.search_runs([exp.experiment_id])
            if r.data.tags.get("df_ray.kind") == "configuration"]


@pytest.mark.slow
def test_every_call_failing_is_a_failed_run_that_a_rerun_repeats(ray_local, tmp_path, capsys):
    path = sweep_file(tmp_path, all_fail=True)
    assert main(["run", "--config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAILED: configuration 'df'" in out
    assert f"{4 * N} of {4 * N} LLM calls failed (100%" in out
    assert "a1: context_length_exceeded" in out  # the first errors, with their agent
    assert f"{4 * N} of {4 * N} LLM calls FAILED" in out  # the closing line
    (run,) = runs(tmp_path)
    assert run.info.status == "FAILED"
    assert "above max_error_rate 10%" in run.data.tags[FAILURE_TAG]
    assert run.data.metrics["failed_call_rate"] == 1.0

    assert main(["run", "--config", str(path)]) == 1  # not skipped as finished
    out = capsys.readouterr().out
    assert "skipped" not in out and "FAILED: configuration 'df'" in out
    assert [r.info.status for r in runs(tmp_path)] == ["FAILED", "FAILED"]


@pytest.mark.slow
def test_failures_below_max_error_rate_finish_and_are_shown(ray_local, tmp_path, capsys):
    # a1's calls fail: N of 4N = 25%, below a max_error_rate of 0.5.
    path = sweep_file(tmp_path, max_error_rate=0.5)
    assert main(["run", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    header, _, row = out.splitlines()[:3]
    cols = [c.strip() for c in header.split("  ") if c.strip()]
    vals = [v.strip() for v in row.split("  ") if v.strip()]
    got = dict(zip(cols, vals, strict=False))
    assert got["calls ok"] == str(3 * N) and got["calls failed"] == str(N)
    assert got["samples w/ errors"] == str(N)
    assert f"{N} of {4 * N} LLM calls FAILED (in df); every configuration stayed within " \
           "max_error_rate" in out
    assert "a1: (call failed: context_length_exceeded" in out  # what the agents answered
    (run,) = runs(tmp_path)
    assert run.info.status == "FINISHED" and FAILURE_TAG not in run.data.tags
    assert run.data.metrics["failed_calls"] == N
    # The progress figures went to the sweep's run as they arrived.
    client = MlflowClient(f"sqlite:///{tmp_path.resolve()}/mlflow.db")
    sweep_run = client.get_run(run.data.tags["mlflow.parentRunId"])
    assert sweep_run.data.metrics["progress.samples_graded"] == N
    assert sweep_run.data.metrics["progress.samples_total"] == N
    history = client.get_metric_history(sweep_run.info.run_id, "progress.calls_served")
    assert history and history[-1].value >= 3 * N  # the engines served a2, a3, coordinator


def test_max_error_rate_is_validated():
    base = {"benchmark": "gpqa", "backbones": {"b": {"kind": "scripted", "model": "m"}},
            "agents": [{"id": "a", "backbone": "b"}], "method": "single"}
    for bad in (-0.1, 1.5, "lots"):
        with pytest.raises(ConfigError, match="max_error_rate"):
            SweepConfig.model_validate({"base": {**base, "max_error_rate": bad}}).expand()
    (cfg,) = SweepConfig.model_validate({"base": base}).expand()
    assert cfg.max_error_rate == 0.1
