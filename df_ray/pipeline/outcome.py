"""Honest outcomes: a configuration whose calls failed says so.

A configuration whose share of failed LLM calls exceeds its ``max_error_rate`` is FAILED:
its MLflow run ends FAILED with the reason as a tag, a rerun runs it again, and the command
exits non-zero naming it and its first errors. At or below the rate it finishes, and its
failed calls are counted and shown.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from df_ray.config import RunConfig
from df_ray.evaluation.metrics import failure_reason
from df_ray.methods.base import Method
from df_ray.pipeline.results import CorruptResultsError, read_results


def call_counts(metrics: dict[str, float]) -> tuple[int, int]:
    """(calls made, calls failed) of a configuration: its counted ``llm_calls`` and
    ``failed_calls`` metrics."""
    return int(metrics.get("llm_calls", 0.0)), int(metrics.get("failed_calls", 0.0))


def failed_call_rate(metrics: dict[str, float]) -> float:
    calls, failed = call_counts(metrics)
    return failed / calls if calls else 0.0


def judge(cfg: RunConfig, metrics: dict[str, float], errors: Sequence[str] = ()) -> str | None:
    """Why the configuration FAILED, or None when it did not
    (``df_ray.evaluation.metrics.failure_reason`` at its ``max_error_rate``)."""
    return failure_reason(cfg.max_error_rate, metrics, errors)


def agent_answers(samples: str | pa.Table, limit: int = 5,
                  method: type[Method] | None = None) -> list[dict[str, Any]]:
    """What each agent answered on the first ``limit`` samples: the parsed answer of every
    observation (or why there is none), the final answer and whether it was right, and, when
    ``method`` is given, the lines in which it explains its decision (``Method.explain``).
    ``samples`` is a ``samples.parquet`` path or its rows already in memory (a run's first
    rows, `ResultsFile.head`: the file just written is not read again)."""
    if isinstance(samples, pa.Table):
        table = samples
    else:
        try:
            names = set(pq.read_schema(samples).names)
            own = [c for c in (method.result_columns if method else ()) if c in names]
            cols = ["sample_id", "correct", "final_answer", "detail", *own]
            table = read_results(samples, columns=cols)
        except (OSError, ValueError, CorruptResultsError):
            return []
    out = []
    for row in table.slice(0, limit).to_pylist():
        d = json.loads(row["detail"])
        errors = {c.get("agent"): c["error"] for c in d.get("calls", []) if c.get("error")}
        answers = {}
        for o in d.get("observations", []):
            agent = o.get("agent")
            if agent in errors:
                answers[agent] = f"(call failed: {errors[agent][:60]})"
            elif o.get("valid"):
                right = d.get("agent_correct", {}).get(agent)
                answers[agent] = (_short(o.get("answer") or o.get("extracted") or "")
                                  + (" (right)" if right else " (wrong)"))
            else:
                answers[agent] = "(no answer found in: " + _short(o.get("raw") or "", 40) + ")"
        for agent, err in errors.items():
            answers.setdefault(agent, f"(call failed: {err[:60]})")
        out.append({"sample_id": row["sample_id"], "answers": answers,
                    "final": _short(row["final_answer"] or "-"), "correct": row["correct"],
                    "explanation": method.explain(row, d) if method else []})
    return out


def _short(text: str, n: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 1] + "…"
