"""Engine faults injected through the scripted engine, on a real local Ray: a replica that
raises, dies or hangs mid-batch is restarted and its requests retried; a request that keeps
failing becomes a recorded per-sample error, never a crashed job."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tests.helpers import PIPELINE_GOLD, pipeline_config, pipeline_samples, run_pipeline

pytestmark = pytest.mark.slow


def run_with(tmp_path, **b1_update):
    """Run the hand-computed configuration with backbone b1 changed by ``b1_update``."""
    cfg = pipeline_config(tmp_path)
    b1 = cfg.backbones["b1"].model_copy(update=b1_update)
    cfg = cfg.model_copy(update={"backbones": {**cfg.backbones, "b1": b1}})
    return run_pipeline(cfg, pipeline_samples(), track=False)


@pytest.mark.parametrize("fault", ["raise_on_call", "exit_on_call", "hang_on_call"])
def test_replica_fault_is_retried(ray_local, tmp_path, fault):
    args = {fault: 2, "fault_marker": str(tmp_path / "fired"), "hang_s": 120}
    res = run_with(tmp_path, engine_args=args, request_timeout_s=5)
    assert (tmp_path / "fired").exists(), "the fault was never injected"
    m = res.metrics
    assert m["n_samples"] == 5
    assert m["failed_calls"] == 0
    assert m["accuracy"] == pytest.approx(0.8)  # same as the undisturbed run


def test_persistent_failure_is_a_recorded_error(ray_local, tmp_path):
    # b1 cannot take any prompt (context length 3 tokens): every a1 call fails, the job goes on.
    res = run_with(tmp_path, max_model_len=3)
    m = res.metrics
    assert m["n_samples"] == 5
    assert m["failed_calls"] == 5
    assert m["samples_with_errors"] == 5
    rows = pq.read_table(res.samples_path).to_pylist()
    for r in rows:
        calls = json.loads(r["detail"])["calls"]
        errs = [c for c in calls if c["error"]]
        assert len(errs) == 1 and errs[0]["agent"] == "a1"
        assert "context_length" in errs[0]["error"]
    assert {r["sample_id"] for r in rows} == set(PIPELINE_GOLD)
