"""Reports of logged sweeps: runs read back from MLflow, paper-style tables with bootstrap CIs
and McNemar tests against DarkForest, the paper's numbers beside ours, and the paper's plots;
over a sweep's seeds, clustered intervals, paired differences with Holm-adjusted p, the power
line, where accuracy is won and lost and the belief's calibration (``reporting.inference``).

    from df_ray.reporting import build_report
    build_report("table1_math", "sqlite:///mlflow.db", "reports/table1_math")

or ``df-ray report --experiment table1_math``.
"""

from __future__ import annotations

from df_ray.reporting.paper import PAPER, PAPER_ABLATIONS, PAPER_FINQA_SCALING, paper_numbers
from df_ray.reporting.runs import collect_runs, load_samples, sample_detail
from df_ray.statistics import (
    bootstrap_ci,
    clustered_mean,
    discordant,
    holm,
    mcnemar,
    paired,
    paired_bootstrap,
    paired_difference,
    power_line,
    proportion_interval,
)


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
