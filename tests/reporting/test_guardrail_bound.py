"""The report prints a fitted guardrail's certified bound beside the observed wrong-override
rate, and nothing more for a configuration with fixed thresholds."""

from __future__ import annotations

import pandas as pd

from df_ray.reporting.tables import build_table, to_markdown


def run(run_id: str, name: str, bound: float | None) -> dict:
    row = {"run_id": run_id, "name": name, "method": "darkforest", "benchmark": "humaneval",
           "params.seed": "0", "metrics.n_samples": 50.0, "metrics.accuracy": 0.5,
           "metrics.accuracy_se": 0.07, "metrics.tokens_per_sample": 100.0,
           "metrics.override_rate": 0.06, "metrics.correct_override_rate": 0.04,
           "metrics.wrong_override_rate": 0.02, "metrics.trusted_rate": 0.3,
           "metrics.guardrail_bound": float("nan") if bound is None else bound}
    return row


def test_the_certified_bound_sits_beside_the_observed_wrong_override_rate():
    table = build_table(pd.DataFrame([run("r1", "darkforest", None),
                                      run("r2", "darkforest fitted guardrail", 0.0497)]), {})
    md = to_markdown(table)
    fixed = next(line for line in md.splitlines() if line.startswith("| darkforest |"))
    fitted = next(line for line in md.splitlines() if "fitted guardrail" in line)
    assert "6.0 (4.0 / 2.0) |" in fixed and "certified" not in fixed
    assert "6.0 (4.0 / 2.0, certified <= 5.0) |" in fitted
