"""Every batch of the pipeline starts at once when the plan keeps them all in flight: a
block is one stage call, never two batches bundled into a call that runs them one after
the other (samples not a multiple of the batch size made blocks one row short)."""

from __future__ import annotations

import threading
import time

import pytest

from df_ray.config import RunConfig
from df_ray.evaluation.plan import RunPlan
from df_ray.tasks.base import Sample

pytestmark = pytest.mark.slow


class Recording:
    """Stands in for EvaluationStage: records each call's rows and when it started, and
    holds every call until all are in flight (or 60 s pass)."""

    lock = threading.Lock()

    def __init__(self, plans, handles, for_calibration=False) -> None:
        self.started: list[tuple[float, int]] = []
        self.all_in = threading.Event()

    def __call__(self, batch):
        import pyarrow as pa

        n = len(batch["sample_id"])
        with self.lock:
            self.started.append((time.monotonic(), n))
            if len(self.started) == EXPECTED:
                self.all_in.set()
        together = self.all_in.wait(60)
        return pa.table({"sample_id": list(batch["sample_id"]),
                         "rows": [n] * n, "together": [together] * n})


EXPECTED = 7  # 100 samples in batches of 16: blocks of 15 and 14 rows


def test_every_batch_is_one_call_and_all_start_together(ray_local, monkeypatch):
    import df_ray.pipeline.stages as stages
    from df_ray.pipeline.graph import stream_batches

    monkeypatch.setattr(stages, "EvaluationStage", Recording)
    cfg = RunConfig.model_validate({
        "name": "t", "benchmark": "mmlu_pro", "method": "darkforest", "batch_size": 16,
        "backbones": {"b": {"kind": "scripted", "model": "m", "max_batch_size": 1024}},
        "agents": [{"id": f"a{i}", "backbone": "b"} for i in range(3)],
        "coordinator": {"id": "c", "backbone": "b"}})
    samples = [Sample(id=f"s{i}", task="mmlu_pro", question=f"q{i}", gold="A") for i in range(100)]
    out = list(stream_batches({}, [RunPlan.of(cfg)], samples))
    rows = [r for t in out for r in t.to_pylist()]
    assert sorted(r["sample_id"] for r in rows) == sorted(s.id for s in samples)
    assert {r["rows"] for r in rows} <= {14, 15}  # a block, never two in one call
    assert all(r["together"] for r in rows), "a batch started only after others ended"
