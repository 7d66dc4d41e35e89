"""A job lost with its Ray head (its driver runs there): its sweep's MLflow run stays RUNNING,
tagged with the head and the cluster's session it ran on. The resubmit on a new head (another
session) says in one line where the lost run ran and what it resumes from; a second job of
the sweep on the same cluster does not. (The loss itself, on a simulated cluster:
``jobs/perf/head_loss.py``, figures in docs/cluster.md.)"""

from __future__ import annotations

import yaml

from df_ray.config import SweepConfig
from df_ray.pipeline.runner import lost_head_line
from df_ray.tracking import HEAD_TAG, SESSION_TAG, Tracker
from tests.helpers import base_config, write_mmlu_goa, write_sweep

OLD = {HEAD_TAG: "10.0.0.1:6379", SESSION_TAG: "session_2026-01-01_00-00-00_000000_1"}
NEW = {HEAD_TAG: "10.0.0.2:6379", SESSION_TAG: "session_2026-01-01_01-00-00_000000_1"}


def _sweep(tmp_path) -> SweepConfig:
    base = base_config(tmp_path, write_mmlu_goa(tmp_path / "mmlu.json", 2))
    path = write_sweep(tmp_path / "sweep.yaml", base, [{"name": "df"}])
    return SweepConfig.model_validate(yaml.safe_load(path.read_text()))


def test_a_resubmit_on_a_new_head_says_where_the_lost_run_ran(tmp_path):
    sweep = _sweep(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    lost = Tracker(uri, "head-loss").sweep(sweep, head=OLD)
    lost.__enter__()  # the driver dies with its head: the block never ends
    again = Tracker(uri, "head-loss")
    with again.sweep(sweep, head=OLD):  # another job of the sweep on the same cluster
        assert again.lost_head is None
    with again.sweep(sweep, head=NEW):  # the same run ended FINISHED just now
        assert again.lost_head is None
    lost = Tracker(uri, "head-loss").sweep(sweep, head=NEW)
    lost.__enter__()  # the new head is lost too, mid-sweep
    resumed = Tracker(uri, "head-loss")
    with resumed.sweep(sweep, head=OLD):
        assert resumed.lost_head == NEW
        line = lost_head_line(resumed.lost_head, sweep.expand())
    root = sweep.expand()[0].cache_root
    assert line == (
        "the sweep's previous run never ended: it ran on the Ray head at 10.0.0.2:6379 "
        "(session session_2026-01-01_01-00-00_000000_1), lost with its head or killed; "
        f"resuming: finished configurations are skipped and every call in the cache at {root} "
        "is replayed, not made again")
