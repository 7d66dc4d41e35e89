"""The report of a 3-seed sweep, logged to a real MLflow store in the tracker's format: mean
and standard error over seeds beside each seed's row, McNemar paired within a seed.

Hand computation (10 samples s0..s9; a configuration is right on the first n of them):

    seed   darkforest   single
    0      8 (80%)      5 (50%)
    1      6 (60%)      5 (50%)
    2      7 (70%)      8 (80%)

darkforest: mean 70.00, sample s.d. 10 -> s.e. 10 / sqrt(3) = 5.77.
single: mean 60.00, s.d. sqrt((100 + 100 + 400) / 2) = 17.32 -> s.e. 10.00.
McNemar of single against the darkforest run of its own seed: seed 0: 3 discordant pairs,
all darkforest's -> p = 2 / 2^3 = 0.25; seed 1: 1 -> p = 1; seed 2: 1 (single's) -> p = 1.
(Against seed 0's darkforest, seed 1's single would get p = 0.25.)
"""

from __future__ import annotations

import json

import pytest

from df_ray.config import SweepConfig
from df_ray.reporting import build_report
from df_ray.reporting.runs import collect_runs
from df_ray.reporting.tables import build_table, seed_summary
from tests.reporting.logged_sweep import log_sweep

N = 10
RIGHT = {("darkforest", 0): 8, ("darkforest", 1): 6, ("darkforest", 2): 7,
         ("single", 0): 5, ("single", 1): 5, ("single", 2): 8}
EXPERIMENT = "seeds-test"


def _rows(method: str, seed: int) -> list[dict]:
    rows = []
    for i in range(N):
        ok = i < RIGHT[(method, seed)]
        rows.append({"sample_id": f"s{i}", "correct": ok, "scores": json.dumps({"acc": ok}),
                     "final_answer": "A" if ok else "B", "trusted": False, "overridden": False,
                     "coordinator_called": method == "darkforest", "any_agent_correct": ok,
                     "n_calls": 4, "n_fresh_calls": 4, "n_errors": 0, "n_refused": 0,
                     "n_truncated": 1, "truncation": json.dumps({"a1": [4, 1]}),
                     "agent_tokens": 300, "coordinator_tokens": 100, "other_tokens": 0,
                     "total_tokens": 400, "t_cross": 0, "detail": "{}"})
    return rows


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    from mlflow.tracking import MlflowClient

    tmp = tmp_path_factory.mktemp("seeds")
    uri = f"sqlite:///{tmp}/mlflow.db"
    MlflowClient(tracking_uri=uri).create_experiment(EXPERIMENT,
                                                     artifact_location=str(tmp / "artifacts"))
    base = {"benchmark": "gpqa",
            "backbones": {f"b{i}": {"kind": "scripted", "model": f"m{i}"} for i in (1, 2, 3)},
            "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2, 3)],
            "coordinator": {"id": "coord", "backbone": "b1"},
            "tracking": {"uri": uri, "experiment": EXPERIMENT}}
    sweep = SweepConfig(name="seeds-sweep", base=base, seeds=[0, 1, 2],
                        runs=[{"name": "darkforest"},
                              {"name": "single", "method": "single",
                               "method_args": {"agent": "a1"}}])
    log_sweep(uri, EXPERIMENT, sweep, tmp, lambda cfg: _rows(cfg.method, cfg.seed))
    return tmp, uri


def test_mean_and_standard_error_over_seeds(logged):
    tmp, uri = logged
    paths = build_report(EXPERIMENT, uri, tmp / "report", n_boot=200)
    text = paths[1].read_text()
    assert "### gpqa: over run seeds" in text
    assert "| darkforest | darkforest | 3 | 70.00 ± 5.77 | 0: 80.00 / 1: 60.00 / 2: 70.00 |" in text
    assert "| single | single | 3 | 60.00 ± 10.00 | 0: 50.00 / 1: 50.00 / 2: 80.00 |" in text
    assert any(p.name.endswith("_seeds.csv") for p in paths)
    summary = seed_summary(build_table(collect_runs(uri, EXPERIMENT), {}))
    row = summary.set_index("configuration").loc["single"]
    assert row["accuracy_se_over_seeds"] == pytest.approx(10.0)
    assert row["truncation_rate"] == pytest.approx(25.0)


def test_mcnemar_pairs_samples_within_a_seed(logged):
    _, uri = logged
    from df_ray.reporting.runs import load_samples

    runs = collect_runs(uri, EXPERIMENT)
    samples = {r["run_id"]: load_samples(r) for _, r in runs.iterrows()}
    table = build_table(runs, samples, n_boot=200).set_index("configuration")
    assert table.loc["single seed=0", "p_vs_darkforest"] == pytest.approx(0.25)
    assert table.loc["single seed=1", "p_vs_darkforest"] == pytest.approx(1.0)
    assert table.loc["single seed=2", "p_vs_darkforest"] == pytest.approx(1.0)
    assert bool(table.loc["darkforest seed=1", "reference"])
