"""Reports of logged sweeps: runs read back from MLflow, paper-style tables with bootstrap CIs
and McNemar tests against DarkForest, the paper's numbers beside ours, and the paper's plots;
over a sweep's seeds, clustered intervals, paired differences with Holm-adjusted p, the power
line, where accuracy is won and lost and the belief's calibration (``reporting.inference``).

    from df_ray.reporting import build_report
    build_report("table1_math", "sqlite:///mlflow.db", "reports/table1_math")

or ``df-ray report --experiment table1_math``.
"""

from __future__ import annotations

import importlib
from typing import Any

#: What the package offers, by the module that holds it: imported on first use, so that
#: importing the package imports none of its modules (``python -m df_ray.reporting.paper``
#: then runs a module its package has not imported, and runpy has nothing to warn about).
_FROM = {
    **dict.fromkeys(("PAPER", "PAPER_ABLATIONS", "PAPER_FINQA_SCALING", "paper_numbers"),
                    "df_ray.reporting.paper"),
    **dict.fromkeys(("collect_runs", "load_samples", "sample_detail"), "df_ray.reporting.runs"),
    **dict.fromkeys(("bootstrap_ci", "clustered_mean", "discordant", "holm", "mcnemar",
                     "paired", "paired_bootstrap", "paired_difference", "power_line",
                     "proportion_interval"), "df_ray.statistics"),
}


def __getattr__(name: str) -> Any:
    if name in _FROM:
        return getattr(importlib.import_module(_FROM[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_report(*args, **kwargs):
    """See :func:`df_ray.reporting.report.build_report` (imported lazily: matplotlib)."""
    from df_ray.reporting.report import build_report as _build

    return _build(*args, **kwargs)


def main(argv: list[str] | None = None) -> int:
    from df_ray.reporting.report import main as _main

    return _main(argv)


__all__ = ["PAPER", "PAPER_ABLATIONS", "PAPER_FINQA_SCALING", "bootstrap_ci", "build_report",
           "clustered_mean", "collect_runs", "discordant", "holm", "load_samples", "main",
           "mcnemar", "paired", "paired_bootstrap", "paired_difference", "paper_numbers",
           "power_line", "proportion_interval", "sample_detail"]
