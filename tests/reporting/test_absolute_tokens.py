"""The absolute-token check: a logged MATH sweep whose tokens per sample are twice the
paper's (DarkForest 9,400 against 4,700; Self-Consistency 23,600 against 11,800) has the same
ratio as the paper's (2.5x), so the ratio check passes it, and the absolute check flags both;
a GoA-mean run at the paper's 13,800 is not flagged."""

from __future__ import annotations

import json

import pytest

from df_ray.config import SweepConfig
from df_ray.reporting.paper import absolute_tokens, absolute_tokens_markdown
from df_ray.reporting.runs import collect_runs, load_samples
from df_ray.reporting.tables import build_table, token_ratios
from tests.reporting.logged_sweep import log_sweep

EXPERIMENT = "absolute-token-test"
TOKENS = {"darkforest": 9400, "self_consistency": 23600, "goa_mean": 13800}


def _rows(method: str) -> list[dict]:
    return [{
        "sample_id": f"s{i}", "correct": True, "scores": json.dumps({"acc": 1.0}),
        "final_answer": "4", "decision_source": None, "trusted": False,
        "overridden": False, "coordinator_called": False, "coordinator_answer": None,
        "coordinator_correct": None, "top_answer": None, "coordinator_agrees": None,
        "any_agent_correct": True, "n_calls": 1, "n_fresh_calls": 1, "n_errors": 0,
        "agent_tokens": TOKENS[method], "coordinator_tokens": 0, "other_tokens": 0,
        "total_tokens": TOKENS[method], "t_cross": 0,
        "detail": json.dumps({"observations": [], "agent_correct": {}, "final": None,
                              "extra": {}, "calls": []}),
    } for i in range(3)]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    from mlflow.tracking import MlflowClient

    tmp = tmp_path_factory.mktemp("absolute")
    uri = f"sqlite:///{tmp}/mlflow.db"
    MlflowClient(tracking_uri=uri).create_experiment(EXPERIMENT,
                                                     artifact_location=str(tmp / "artifacts"))
    base = {
        "benchmark": "math",
        "backbones": {f"b{i}": {"kind": "scripted", "model": f"m{i}"} for i in (1, 2, 3, 4)},
        "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2, 3)],
        "coordinator": {"id": "coord", "backbone": "b4"},
        "cache_root": str(tmp / "cache"), "results_dir": str(tmp / "results"),
        "tracking": {"uri": uri, "experiment": EXPERIMENT},
    }
    sweep = SweepConfig(name="absolute-sweep", base=base,
                        runs=[{"name": m, "method": m} for m in TOKENS])
    log_sweep(uri, EXPERIMENT, sweep, tmp / "results", lambda cfg: _rows(cfg.method))
    runs = collect_runs(uri, EXPERIMENT)
    samples = {r["run_id"]: load_samples(r, uri) for _, r in runs.iterrows()}
    return build_table(runs, samples, n_boot=20), runs, uri


def test_the_flag_fires_at_twice_the_paper_s_tokens(table):
    t, runs, _ = table
    ratios = token_ratios(t).set_index("configuration")
    assert ratios.loc["self_consistency", "vs_paper"] == pytest.approx(1.0)  # ratio: fine
    check = absolute_tokens(t, runs).set_index("configuration")
    assert check.loc["darkforest", "vs_paper"] == pytest.approx(2.0)
    assert check.loc["self_consistency", "vs_paper"] == pytest.approx(2.0)
    assert bool(check.loc["darkforest", "flagged"]) and bool(check.loc["self_consistency",
                                                                         "flagged"])
    assert not bool(check.loc["goa_mean", "flagged"])
    md = absolute_tokens_markdown(check.reset_index())
    assert "| math | darkforest | 9,400 | 4,700 | 2.00 | – | **off by more than 30%** |" in md


def test_the_report_prints_the_check(table, tmp_path):
    from df_ray.reporting import build_report

    _, _, uri = table
    paths = build_report(EXPERIMENT, uri, tmp_path, n_boot=20)
    assert "**off by more than 30%**" in paths[1].read_text()
