"""A method's own metrics are reported only for the methods that declare them: a run of a
method without DarkForest's override rates shows none, even where an older version logged
0.0 for it."""

from __future__ import annotations

import math

import pandas as pd

from df_ray.reporting.tables import build_table


def run(run_id: str, name: str, method: str, override: float | None) -> dict:
    row = {"run_id": run_id, "name": name, "method": method, "benchmark": "humaneval",
           "params.seed": "0", "metrics.n_samples": 50.0, "metrics.accuracy": 0.5,
           "metrics.accuracy_se": 0.07, "metrics.tokens_per_sample": 100.0}
    if override is not None:
        row |= {"metrics.override_rate": override, "metrics.correct_override_rate": override,
                "metrics.wrong_override_rate": 0.0, "metrics.trusted_rate": 0.1}
    return row


def test_override_rates_belong_to_the_methods_that_have_them():
    runs = pd.DataFrame([run("r1", "darkforest", "darkforest", 0.02),
                         run("r2", "vote (old log)", "weighted_vote", 0.0),
                         run("r3", "single", "single", None)])
    table = build_table(runs, {}).set_index("configuration")
    assert table.loc["darkforest", "override_rate"] == 2.0
    assert table.loc["darkforest", "trusted_rate"] == 10.0
    for name in ("vote (old log)", "single"):
        for col in ("override_rate", "correct_override_rate", "wrong_override_rate",
                    "trusted_rate"):
            assert math.isnan(table.loc[name, col]), (name, col)
