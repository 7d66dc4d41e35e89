"""A method's own result columns and the metrics over them.

Every row of ``samples.parquet`` has the generic columns (``df_ray.evaluation.scoring``:
the sample, its answer and grade, calls, tokens, errors). A method adds its own: it declares
``result_columns`` (column -> Arrow type name: ``"bool"``, ``"string"``, ``"int64"``,
``"double"``...) and fills them per sample in ``finish`` (``Outcome.columns``; a bool column
that is the grade of an observation goes in ``Outcome.graded``, and the scorer grades it).
Its ``metrics`` (metric name -> :class:`RowMean`) are computed over its rows beside the generic
ones and logged to MLflow under those names. This is Inspect's ``@scorer(metrics=...)`` and
lm-evaluation-harness's per-task ``process_results`` plus ``metric_list`` aggregations, for
a method instead of a scorer: per-sample values, then an aggregation over samples declared
beside them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: A per-row value or predicate over a row's columns (generic and the method's).
RowFunction = Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class RowMean:
    """The mean of ``value`` over a configuration's rows.

    ``value`` is a column name or a function of the row; None and False count 0, True 1.
    Without ``among`` every row counts (a sample error row too, whose method columns are
    null). With ``among`` (a column name: the rows where it is not null; or a predicate) only
    those rows count, and the metric is NaN when none does."""

    value: str | RowFunction
    among: str | RowFunction | None = None

    def value_of(self, row: Mapping[str, Any]) -> float:
        v = row.get(self.value) if isinstance(self.value, str) else self.value(row)
        return float(v) if v is not None else 0.0

    def counts(self, row: Mapping[str, Any]) -> bool:
        if self.among is None:
            return True
        if isinstance(self.among, str):
            return row.get(self.among) is not None
        return bool(self.among(row))


@dataclass
class RowMeans:
    """The running sums of a method's metrics (``add`` row by row, then ``result``)."""

    metrics: Mapping[str, RowMean]
    n: int = 0

    def __post_init__(self) -> None:
        self.sums = dict.fromkeys(self.metrics, 0.0)
        self.counted = dict.fromkeys(self.metrics, 0)

    def add(self, row: Mapping[str, Any]) -> None:
        self.n += 1
        for name, m in self.metrics.items():
            if m.counts(row):
                self.counted[name] += 1
                self.sums[name] += m.value_of(row)

    def result(self) -> dict[str, float]:
        out = {}
        for name, m in self.metrics.items():
            if m.among is None:
                out[name] = self.sums[name] / max(self.n, 1)
            else:
                k = self.counted[name]
                out[name] = self.sums[name] / k if k else math.nan
        return out


# ----------------------------------------------------------------------------- won and lost

#: Why a wrong sample is wrong (the ``failure`` column; null for a right one), first match:
#: - ``sample_error``: the method, a parser or the grader raised (an error row);
#: - ``guardrail_lost``: the guardrail overrode a coordinator that was right;
#: - ``coordinator_lost``: the selection was right and what decided after it lost it
#:   (DarkForest's coordinator; MoA's aggregator, Debate's and ReConcile's later rounds,
#:   Self-Refine's refinements, GoA's aggregation for methods without a selection step);
#: - ``unreachable``: no independent answer was right;
#: - ``selection_missed``: one was, and the selection (the belief's top z*, a vote's winner)
#:   picked a wrong one that the decision kept.
FAILURES = ("sample_error", "guardrail_lost", "coordinator_lost", "unreachable",
            "selection_missed")

#: The generic won-and-lost columns of every row (``ResultRow``), in order.
WON_LOST_COLUMNS = ("selected_correct", "kept", "lost", "found", "guardrail_saved",
                    "guardrail_lost", "failure")


def won_and_lost(*, correct: bool, reachable: bool, selected_correct: bool | None,
                 own: Mapping[str, Any] | None = None, error: bool = False) -> dict[str, Any]:
    """Where one sample's accuracy was won or lost, from its grades.

    ``selected_correct``: the grade of the method's selection among the independent answers
    (DarkForest's z*, a vote's winner; by default the plurality vote over the independent
    answers). ``kept``: the selection was right and so is the final answer; ``lost``: it was
    right and the final answer is wrong; ``found``: it was wrong and the final answer is
    right. So accuracy = kept + found and the selection's accuracy = kept + lost, over all
    rows. With a guardrail (a method whose own columns ``own`` have ``overridden`` and
    ``coordinator_correct``: DarkForest) ``guardrail_saved``: it overrode a wrong coordinator
    to a right answer; ``guardrail_lost``: it overrode a right one to a wrong answer (null
    for methods without one). ``failure``: one of :data:`FAILURES`, null when right."""
    own = own or {}
    sel = None if selected_correct is None else bool(selected_correct)
    correct = bool(correct)
    out: dict[str, Any] = {"selected_correct": sel, "kept": bool(sel and correct),
                           "lost": bool(sel and not correct), "found": bool(not sel and correct),
                           "guardrail_saved": None, "guardrail_lost": None, "failure": None}
    if "overridden" in own and "coordinator_correct" in own and not error:
        over = bool(own.get("overridden"))
        out["guardrail_saved"] = over and correct and own.get("coordinator_correct") is False
        out["guardrail_lost"] = over and not correct and own.get("coordinator_correct") is True
    if error:
        out["failure"] = "sample_error"
    elif not correct:
        if out["guardrail_lost"]:
            out["failure"] = "guardrail_lost"
        elif sel:
            out["failure"] = "coordinator_lost"
        elif not reachable:
            out["failure"] = "unreachable"
        else:
            out["failure"] = "selection_missed"
    return out
