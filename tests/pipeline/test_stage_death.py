"""A stage actor killed by SIGKILL (what the out-of-memory killer sends: no Python fault
report) is counted in the configuration's ``worker_deaths`` and listed, on a real local Ray;
its batches are retried by Ray Data and the results equal the undisturbed run's."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from df_ray.pipeline import faults
from tests.helpers import pipeline_config, pipeline_samples, run_pipeline

pytestmark = pytest.mark.slow


def test_a_sigkilled_stage_actor_is_counted_in_worker_deaths(ray_local, tmp_path):
    cfg = pipeline_config(tmp_path)
    slow = {n: b.model_copy(update={"engine_args": {"latency_s": 1.0}})
            for n, b in cfg.backbones.items()}
    cfg = cfg.model_copy(update={"backbones": slow})
    before = set(faults.job_fault_dir().glob("stage-*.log"))
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(
        res=run_pipeline(cfg, pipeline_samples(), track=False)))
    t.start()
    deadline = time.monotonic() + 300
    new: list = []
    while not new and time.monotonic() < deadline:
        new = sorted(set(faults.job_fault_dir().glob("stage-*.log")) - before)
        time.sleep(0.1)
    assert new, "no stage actor started"
    time.sleep(2.0)  # it is working on its first batch
    os.kill(int(new[0].stem.rsplit("-", 1)[1]), signal.SIGKILL)
    t.join(600)
    res = out["res"]
    assert res.metrics["worker_deaths"] == 1
    (death,) = res.worker_deaths
    assert "died without a Python fault report (killed with SIGKILL" in death
    assert res.metrics["n_samples"] == 5 and res.metrics["failed_calls"] == 0
    assert res.metrics["accuracy"] == pytest.approx(0.8)  # as the undisturbed run
