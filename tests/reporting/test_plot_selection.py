"""A one-parameter plot (disclosure, calibration ablation) compares only the runs that differ
from the reference in that parameter: a sweep's belief-only or no-guardrail variants of
DarkForest are not bars of a disclosure plot."""

from __future__ import annotations

import pandas as pd

from df_ray.reporting.plots import bars_by

A = "params.method_args."


def _sweep(names_args: dict[str, dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    base = {f"{A}disclosure": "strict", f"{A}ablation": "full", f"{A}belief_only": False,
            f"{A}guardrail.enabled": True, "params.coordinator.backbone": "qwen", "n_agents": 3}
    table, runs = [], []
    for i, (name, args) in enumerate(names_args.items()):
        table.append({"run_id": f"r{i}", "configuration": name, "method": "darkforest",
                      "benchmark": "humaneval", "accuracy": 40.0 + i, "ci_lo": 30.0 + i,
                      "ci_hi": 50.0 + i, "tokens_per_sample": 1000.0, "reference": i == 0})
        runs.append({"run_id": f"r{i}", **base, **{f"{A}{k}": v for k, v in args.items()}})
    return pd.DataFrame(table), pd.DataFrame(runs)


def test_variants_in_other_arguments_are_not_a_disclosure_comparison(tmp_path):
    table, runs = _sweep({"darkforest": {}, "belief only": {"belief_only": True},
                          "no guardrail": {"guardrail.enabled": False},
                          "no calibration": {"ablation": "no_calibration"},
                          "moderate belief only": {"disclosure": "moderate",
                                                   "belief_only": True}})
    # Disclosure varies only in a run that differs from the reference in belief_only too.
    assert bars_by(table, runs, "method_args.disclosure", tmp_path / "d.png", "d") is None
    assert not (tmp_path / "d.png").exists()
    # The calibration ablation does: the reference against no_calibration.
    assert bars_by(table, runs, "method_args.ablation", tmp_path / "c.png", "c") == tmp_path / "c.png"


def test_the_disclosure_plot_keeps_the_controlled_pair(tmp_path, monkeypatch):
    table, runs = _sweep({"darkforest": {}, "belief only": {"belief_only": True},
                          "moderate": {"disclosure": "moderate"},
                          "moderate belief only": {"disclosure": "moderate",
                                                   "belief_only": True}})
    plotted = []
    import matplotlib.axes

    real_bar = matplotlib.axes.Axes.bar

    def bar(self, x, height, *args, **kwargs):
        plotted.append(list(height))
        return real_bar(self, x, height, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", bar)
    assert bars_by(table, runs, "method_args.disclosure", tmp_path / "d.png", "d") is not None
    assert plotted == [[40.0, 42.0]]  # darkforest and moderate, not the belief-only pair
