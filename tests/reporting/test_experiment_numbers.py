"""`df-ray report --experiment` takes the paper's numbers from the experiment table."""

from __future__ import annotations

import math

import pandas as pd

from df_ray.reporting.paper import EXPERIMENTS, planned_run
from df_ray.reporting.tables import build_table


def _runs(names: list[str], benchmark: str, method: str = "darkforest") -> pd.DataFrame:
    return pd.DataFrame([{
        "run_id": f"r{i}", "name": n, "benchmark": benchmark, "method": method,
        "n_agents": 3, "metrics.accuracy": 0.5, "metrics.accuracy_se": 0.1,
        "metrics.n_samples": 10, "metrics.tokens_per_sample": 100.0,
    } for i, n in enumerate(names)])


def test_report_uses_the_tables_paper_numbers():
    names = ["math coordinator+guardrail", "math coordinator only", "math belief only"]
    table = build_table(_runs(names, "math"), {}, experiment="table2_decision")
    paper = dict(zip(table["configuration"], table["paper_accuracy"], strict=True))
    assert paper["math coordinator+guardrail"] == 76.80
    assert paper["math coordinator only"] == 75.40  # 76.80 - the guardrail's 1.40
    assert math.isnan(paper["math belief only"])  # the paper gives no number we have


def test_scaling_rows_carry_the_scaling_numbers():
    table = build_table(_runs(["4 backbones"], "finqa"), {},
                        experiment="table10_finqa_scaling")
    assert table.iloc[0]["paper_accuracy"] == 19.00
    assert planned_run("table10_finqa_scaling", "5 backbones").paper["prog_acc"] == 13.67


def test_every_planned_run_names_a_known_benchmark_and_origin():
    for exp in EXPERIMENTS.values():
        for r in exp.runs:
            assert r.origin in ("paper", "ours") and r.benchmark in (
                "math", "humaneval", "mmlu_pro", "gpqa", "finqa", "legalbench")
