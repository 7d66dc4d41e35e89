"""The committed laptop-scale reproduction replays from its generation cache.

``tests/fixtures/cpu_humaneval/generations`` is the generation cache of the run reported in
``docs/reproduction.md`` (real Qwen2.5-Coder-0.5B-Instruct and SmolLM2-135M-Instruct outputs).
Rerunning configurations of ``jobs/configs/cpu_humaneval.yaml`` over it, with the real
embedded engines and the committed calibration file, must make no fresh call and give the
committed table's accuracy and tokens per sample exactly. Grading runs for real (the
sandbox), so a few configurations are replayed, not all of them.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

from df_ray.config import SweepConfig, load_config

pytestmark = [pytest.mark.slow, pytest.mark.embedded]

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "cpu_humaneval" / "generations"
TABLE = REPO / "docs" / "reproduction" / "cpu_humaneval_table.csv"
SWEEP = REPO / "jobs" / "configs" / "cpu_humaneval.yaml"
#: Replayed configurations (those of them the committed table holds): two single agents,
#: the vote and DarkForest (with its calibration).
REPLAYED = ("single-qwen-a", "single-smol", "majority_vote", "darkforest")


def committed_figures() -> dict[str, dict[str, str]]:
    with TABLE.open() as f:
        return {row["configuration"]: row for row in csv.DictReader(f)}


def test_the_committed_cache_replays_the_report(ray_local, tmp_path):
    from df_ray.pipeline.runner import run_sweep

    figures = committed_figures()
    names = [n for n in REPLAYED if n in figures]
    assert names, f"none of {REPLAYED} is in {TABLE}"
    cache = tmp_path / "generations"
    shutil.copytree(FIXTURE, cache)
    calibration = tmp_path / "calibration"
    shutil.copytree(REPO / "calibration", calibration)
    sweep = load_config(SWEEP)
    runs = []
    for cfg in sweep.expand():
        if cfg.name not in names:
            continue
        d = cfg.model_dump(mode="json")
        d["cache_root"] = str(cache)
        d["calibration"] = {**d["calibration"], "dir": str(calibration), "auto_fit": False}
        d["tracking"] = {**d["tracking"], "uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}
        d["results_dir"] = str(tmp_path / "results")
        runs.append(d)
    replay = SweepConfig.model_validate({"name": sweep.name, "base": runs[0], "runs": runs,
                                         "fuse": False})
    results = run_sweep(replay)
    assert [r.config.name for r in results] == names
    for r in results:
        want = figures[r.config.name]
        m = r.metrics
        assert r.failure is None, r.failure
        assert m["fresh_calls"] == 0, r.config.name
        assert m.get("failed_calls", 0) == 0, r.config.name
        assert int(m["n_samples"]) == int(float(want["n"])), r.config.name
        assert 100 * m["accuracy"] == pytest.approx(float(want["accuracy"]), abs=1e-3), \
            r.config.name  # the table's accuracy is in percent
        assert m["tokens_per_sample"] == pytest.approx(float(want["tokens_per_sample"]),
                                                       abs=1e-2), r.config.name
