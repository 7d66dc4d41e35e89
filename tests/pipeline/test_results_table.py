"""The command's results table: the generic columns for every method, and a method's own
columns (``Method.summary_metrics``) only where a configuration of that method is shown."""

from __future__ import annotations

from df_ray.cli import format_results
from df_ray.pipeline.runner import RunResult
from tests.helpers import driver_config

METRICS = {"n_samples": 4.0, "accuracy": 0.5, "accuracy_se": 0.25, "llm_calls": 4.0,
           "failed_calls": 0.0, "tokens_per_sample": 10.0, "wall_time_s": 1.0}


def _header(table: str) -> list[str]:
    return table.splitlines()[0].split("  ")


def test_a_vote_or_single_agent_table_has_no_darkforest_columns():
    table = format_results([RunResult(driver_config(method="single", name="one"), METRICS, ""),
                            RunResult(driver_config(method="weighted_vote", name="vote"),
                                      METRICS, "")])
    head = table.splitlines()[0]
    assert "trusted" not in head and "override" not in head
    assert "calls ok" in head and "wall s" in head


def test_darkforest_shows_its_own_columns_and_others_a_dash():
    df = {**METRICS, "trusted_rate": 0.75, "override_rate": 0.25}
    table = format_results([RunResult(driver_config(name="df"), df, ""),
                            RunResult(driver_config(method="single", name="one"), METRICS, "")])
    head, _, row_df, row_one = table.splitlines()
    cols = [c for c in head.split("  ") if c]
    assert cols[-3:] == ["trusted", "override", "wall s"]
    assert row_df.split()[-3:] == ["75%", "25%", "1.0"]
    assert row_one.split()[-3:] == ["-", "-", "1.0"]
