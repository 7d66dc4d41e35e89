"""The report's table-level numbers, written back to each configuration's MLflow run.

A configuration's own run logs what it can know alone (its accuracy and intervals, its
won-and-lost shares). The numbers of a comparison depend on the whole table: the reference
configuration, the pairs both ran across the seeds present, the Holm adjustment over every
comparison of the benchmark. ``df-ray report --log`` computes them once and logs them on
every run of each configuration (each seed's run carries its configuration's pooled
figures), as ``report.*`` metrics and a ``df_ray.report.reference`` tag, so that an MLflow
query sees the same numbers as the report. A later report logs them again: the latest
value of a metric is the latest report's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import pandas as pd

__all__ = ["ACCURACY_METRICS", "COMPARISON_METRICS", "REFERENCE_TAG", "log_table_numbers",
           "table_numbers"]

#: accuracy_table column -> metric name (seeds pooled, clustered by question or cluster)
ACCURACY_METRICS = {"accuracy": "report.accuracy", "ci_lo": "report.accuracy_ci_low",
                    "ci_hi": "report.accuracy_ci_high", "se_question": "report.se_question",
                    "se_cluster": "report.se_cluster", "seeds": "report.seeds",
                    "n": "report.n"}
#: comparisons column -> metric name (against the benchmark's reference configuration)
COMPARISON_METRICS = {"diff": "report.diff", "ci_lo": "report.diff_ci_low",
                      "ci_hi": "report.diff_ci_high", "pairs": "report.pairs",
                      "p_mcnemar": "report.p_mcnemar",
                      "p_mcnemar_holm": "report.p_mcnemar_holm",
                      "p_clustered": "report.p_clustered",
                      "p_clustered_holm": "report.p_clustered_holm",
                      "tost_lo": "report.tost_low", "tost_hi": "report.tost_high",
                      "p_tost": "report.p_tost"}
REFERENCE_TAG = "df_ray.report.reference"


def table_numbers(table: pd.DataFrame, found: Mapping[str, Any]
                  ) -> dict[str, tuple[dict[str, float], dict[str, str]]]:
    """Per run id of ``table`` (build_table's): the metrics and tags to log, from
    ``found`` (inference's accuracy, comparisons and power)."""
    acc: pd.DataFrame = found["accuracy"]
    comps: pd.DataFrame = found["comparisons"]
    power = found["power"]
    by_acc = {(r["benchmark"], r["configuration"]): r for _, r in acc.iterrows()}
    by_comp = {} if comps.empty else {
        (r["benchmark"], r["configuration"]): r for _, r in comps.iterrows()}
    n_comps = {} if comps.empty else comps.groupby("benchmark").size().to_dict()
    out: dict[str, tuple[dict[str, float], dict[str, str]]] = {}
    for _, row in table.iterrows():
        key = (row["benchmark"], row["group"])
        metrics: dict[str, float] = {}
        tags: dict[str, str] = {}
        a = by_acc.get(key)
        if a is not None:
            metrics.update({m: float(a[c]) for c, m in ACCURACY_METRICS.items()})
        c = by_comp.get(key)
        if c is not None:
            metrics.update({m: float(c[k]) for k, m in COMPARISON_METRICS.items()})
            metrics["report.comparisons"] = float(n_comps[row["benchmark"]])
            tags[REFERENCE_TAG] = str(c["reference"])
        elif row.get("reference"):
            tags[REFERENCE_TAG] = "self"
        pl = power.get(row["benchmark"])
        if pl is not None:
            metrics["report.min_detectable_diff"] = 100 * float(pl.mde)
            metrics["report.min_detectable_diff_holm"] = 100 * float(pl.mde_holm)
        if metrics or tags:
            out[str(row["run_id"])] = (metrics, tags)
    return out


def log_table_numbers(tracking_uri: str, table: pd.DataFrame, found: Mapping[str, Any]) -> int:
    """Log :func:`table_numbers` on the runs; returns how many runs were written. NaN is
    logged as NaN (e.g. ``report.se_cluster`` where a benchmark declares no clusters)."""
    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    now = int(time.time() * 1000)
    numbers = table_numbers(table, found)
    for run_id, (metrics, tags) in numbers.items():
        client.log_batch(
            run_id,
            metrics=[Metric(k, v if math.isfinite(v) else math.nan, now, 0)
                     for k, v in sorted(metrics.items())],
            tags=[RunTag(k, v) for k, v in sorted(tags.items())])
    return len(numbers)
