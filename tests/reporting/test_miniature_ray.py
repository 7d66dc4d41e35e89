"""A real miniature sweep: scripted backbones on local Ray through run_sweep, logged by the
tracker, then reported. Checks the report agrees with what the pipeline logged."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from df_ray.config import SweepConfig
from df_ray.reporting import build_report, collect_runs, load_samples

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_miniature_sweep_report(ray_local, tmp_path):
    from mlflow.tracking import MlflowClient

    from df_ray.pipeline.runner import run_sweep

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    MlflowClient(tracking_uri=uri).create_experiment(
        "mini", artifact_location=str(tmp_path / "artifacts"))
    sweep = SweepConfig(name="mini", base={
        "benchmark": "gpqa",
        "source": str(FIXTURES),
        "backbones": {f"b{i}": {"kind": "scripted", "model": f"m{i}", "script": "majority"}
                      for i in (1, 2, 3)},
        "agents": [{"id": f"a{i}", "backbone": f"b{i}", "seed": i} for i in (1, 2, 3)],
        "coordinator": {"id": "coord", "backbone": "b1"},
        "method_args": {"ablation": "no_calibration"},
        "cache_root": str(tmp_path / "cache"),
        "results_dir": str(tmp_path / "results"),
        "calibration": {"dir": str(tmp_path / "calibration")},
        "tracking": {"uri": uri, "experiment": "mini"},
        "batch_size": 2,
        "concurrency": 1,
    }, runs=[
        {"name": "darkforest"},
        {"name": "darkforest tau_p=0.9", "method_args.guardrail.tau_p": 0.9},
        {"name": "majority", "method": "weighted_vote", "method_args": {"majority": True}},
    ])
    results = run_sweep(sweep, progress=lambda m: None)
    assert len(results) == 3 and not any(r.skipped for r in results)

    runs = collect_runs(uri, "mini")
    assert list(runs["name"]) == ["darkforest", "darkforest tau_p=0.9", "majority"]
    assert set(runs["sweep"]) == {"mini"}
    paths = build_report("mini", uri, tmp_path / "report", n_boot=200)
    table = pd.read_csv(tmp_path / "report" / "mini_table.csv").set_index("configuration")
    for r in results:
        row = table.loc[r.config.name]
        assert row["accuracy"] == pytest.approx(100 * r.metrics["accuracy"])
        assert row["tokens_per_sample"] == pytest.approx(r.metrics["tokens_per_sample"])
        assert row["n"] == r.metrics["n_samples"]
        samples = load_samples(runs.set_index("name").loc[r.config.name].to_dict()
                               | {"run_id": r.run_id})
        assert samples["correct"].mean() == pytest.approx(r.metrics["accuracy"])
    assert bool(table.loc["darkforest", "reference"])
    assert 0.0 <= table.loc["majority", "p_vs_darkforest"] <= 1.0
    pngs = [p for p in paths if p.suffix == ".png"]
    names = {p.name for p in pngs}
    assert "mini_fig3_accuracy_vs_tokens.png" in names
    assert "mini_table9_thresholds.png" in names
    assert all(p.stat().st_size > 0 for p in pngs)
