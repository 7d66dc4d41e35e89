"""The token-ratio check of `df-ray report`: each baseline's tokens per sample over
DarkForest's, beside the paper's ratio, from a logged MATH sweep whose per-sample token counts
are set by hand.

Per-sample total tokens (prompt + completion, all calls) of the three samples, and the hand
count of each ratio:

    configuration      tokens per sample    mean   / DarkForest      paper ratio
    darkforest         400, 500, 600         500   (the reference)   -
    goa_mean           1400, 1500, 1600     1500   3.00              13.8k / 4.7k = 2.936
    goa_max            800, 800, 800         800   1.60              7.6k / 4.7k = 1.617
    self_consistency   1000, 1250, 1500     1250   2.50              11.8k / 4.7k = 2.511
    moa                1500, 1500, 1500     1500   3.00              8.6k / 4.7k = 1.830
    debate             600, 600, 600         600   1.20              (no paper tokens)
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from df_ray.config import SweepConfig
from df_ray.reporting import build_report
from df_ray.reporting.tables import TOKEN_RATIO_HEADING, paper_token_ratio
from tests.reporting.logged_sweep import log_sweep

EXPERIMENT = "token-ratio-test"
TOKENS = {
    "darkforest": (400, 500, 600),
    "goa_mean": (1400, 1500, 1600),
    "goa_max": (800, 800, 800),
    "self_consistency": (1000, 1250, 1500),
    "moa": (1500, 1500, 1500),
    "debate": (600, 600, 600),
}
HAND = {"goa_mean": (3.00, 13800 / 4700), "goa_max": (1.60, 7600 / 4700),
        "self_consistency": (2.50, 11800 / 4700), "moa": (3.00, 8600 / 4700),
        "debate": (1.20, math.nan)}


def _rows(method: str) -> list[dict]:
    rows = []
    for i, total in enumerate(TOKENS[method]):
        rows.append({
            "sample_id": f"s{i}", "correct": True, "scores": json.dumps({"acc": 1.0}),
            "final_answer": "4", "decision_source": None, "trusted": False,
            "overridden": False, "coordinator_called": False, "coordinator_answer": None,
            "coordinator_correct": None, "top_answer": None, "coordinator_agrees": None,
            "any_agent_correct": True, "n_calls": 1, "n_fresh_calls": 1, "n_errors": 0,
            "agent_tokens": total, "coordinator_tokens": 0, "other_tokens": 0,
            "total_tokens": total, "t_cross": 0,
            "detail": json.dumps({"observations": [], "agent_correct": {}, "final": None,
                                  "extra": {}, "calls": []}),
        })
    return rows


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from mlflow.tracking import MlflowClient

    tmp = tmp_path_factory.mktemp("ratios")
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
    sweep = SweepConfig(name="ratio-sweep", base=base,
                        runs=[{"name": m, "method": m} for m in TOKENS])
    log_sweep(uri, EXPERIMENT, sweep, tmp / "results", lambda cfg: _rows(cfg.method))
    paths = build_report(EXPERIMENT, uri, tmp / "report", n_boot=50)
    return tmp / "report", paths


def test_paper_ratios_are_figure_3s():
    assert round(paper_token_ratio("math", "goa_mean"), 1) == 2.9
    assert round(paper_token_ratio("math", "goa_max"), 1) == 1.6
    assert round(paper_token_ratio("math", "self_consistency"), 1) == 2.5
    assert round(paper_token_ratio("math", "moa"), 1) == 1.8
    assert [round(paper_token_ratio(b, "goa_mean"), 1)
            for b in ("mmlu_pro", "gpqa", "legalbench")] == [4.2, 4.1, 4.6]
    assert math.isnan(paper_token_ratio("math", "debate"))
    assert math.isnan(paper_token_ratio("math", "darkforest"))


def test_ratio_table_matches_the_hand_count(report):
    out, paths = report
    ratios = pd.read_csv(out / f"{EXPERIMENT}_token_ratios.csv").set_index("configuration")
    assert list(ratios.index) == sorted(HAND)  # by name, as collect_runs orders runs
    for name, (ours, paper) in HAND.items():
        row = ratios.loc[name]
        assert row["darkforest_tokens_per_sample"] == pytest.approx(500)
        assert row["tokens_per_sample"] == pytest.approx(sum(TOKENS[name]) / 3)
        assert row["ratio"] == pytest.approx(ours)
        if math.isnan(paper):
            assert pd.isna(row["paper_ratio"]) and pd.isna(row["vs_paper"])
        else:
            assert row["paper_ratio"] == pytest.approx(paper, rel=1e-3)
            assert row["vs_paper"] == pytest.approx(ours / paper, rel=1e-3)
    md = paths[1].read_text()
    assert TOKEN_RATIO_HEADING in md
    assert "| math | goa_mean | goa_mean | 1,500 | 3.00x | 2.9x | 1.02 |" in md
    assert "| math | moa | moa | 1,500 | 3.00x | 1.8x | 1.64 |" in md
    assert "| math | debate | debate | 600 | 1.20x | – | – |" in md
