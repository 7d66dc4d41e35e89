"""Scoring: a finished sample becomes one graded ``ResultRow``.

``ResultRow`` is the schema of a graded sample: its generic columns, which every method's
rows have, are its fields; the pipeline's result columns, the Parquet schema of
``samples.parquet`` (``arrow_schema``) and the per-sample values the run metrics add up
(``SUMMED``) are derived from them. A method's own columns (``Method.result_columns``)
follow in ``method_columns`` (df_ray.methods.result_columns).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from df_ray.core.types import Observation
from df_ray.engines.base import CONTEXT_LENGTH_ERROR
from df_ray.errors import EngineFailure
from df_ray.evaluation.stop_reasons import budgets, call_stop_reason, no_budget
from df_ray.methods.base import Method, MethodArgsError, MethodContext, Outcome, SampleState
from df_ray.methods.common import majority
from df_ray.methods.result_columns import won_and_lost
from df_ray.tasks.base import Grade, GradingUnavailable


def _col(kind: str, *, summed: bool = False, doc: str = "") -> Any:
    return field(metadata={"arrow": kind, "summed": summed, "doc": doc})


@dataclass(slots=True)
class ResultRow:
    """One sample of one configuration, graded."""

    sample_id: str = _col("string")
    correct: bool = _col("bool", doc="the benchmark's headline metric")
    scores: str = _col("string", doc="JSON: every metric the benchmark reports")
    final_answer: str | None = _col("string")
    any_agent_correct: bool = _col("bool", doc="candidate reachability")
    # where accuracy is won and lost (df_ray.methods.result_columns.won_and_lost)
    selected_correct: bool | None = _col("bool", doc="the selection (z*, a vote's winner) right")
    kept: bool = _col("bool", doc="the selection was right and so is the final answer")
    lost: bool = _col("bool", doc="the selection was right, the final answer is wrong")
    found: bool = _col("bool", doc="the selection was wrong, the final answer is right")
    guardrail_saved: bool | None = _col("bool", doc="the guardrail overrode a wrong coordinator")
    guardrail_lost: bool | None = _col("bool", doc="the guardrail overrode a right coordinator")
    failure: str | None = _col("string", doc="why a wrong sample is wrong (FAILURES)")
    cluster: str | None = _col("string", doc="the benchmark's cluster of the sample")
    n_calls: int = _col("int64", summed=True)
    n_fresh_calls: int = _col("int64", summed=True)
    n_errors: int = _col("int64", summed=True)
    n_refused: int = _col("int64", summed=True,
                          doc="calls the engine refused (prompt over its context length)")
    n_truncated: int = _col("int64", summed=True,
                            doc="answered calls cut off at max_tokens (finish_reason length, "
                                "or none recorded and every max_tokens token used)")
    n_no_finish_reason: int = _col("int64", summed=True,
                                   doc="answered calls without a recorded finish_reason")
    n_stop_unknown: int = _col("int64", summed=True,
                               doc="of them, those short of max_tokens (stop reason unknown)")
    n_repaired: int = _col("int64", summed=True,
                           doc="lone surrogates replaced (U+FFFD) in the texts engines returned")
    truncation: str = _col("string", doc="JSON: per agent id, [answered calls, truncated]")
    agent_tokens: int = _col("int64", summed=True)
    coordinator_tokens: int = _col("int64", summed=True)
    other_tokens: int = _col("int64", summed=True)
    total_tokens: int = _col("int64", summed=True)
    t_cross: int = _col("int64", summed=True)
    detail: str = _col("string", doc="JSON: observations, grades, the outcome's extra, calls")
    #: The method's own columns (``Method.result_columns``), every declared one (None: null).
    method_columns: dict[str, Any] = field(default_factory=dict, metadata={"arrow": None})

    def to_dict(self) -> dict[str, Any]:
        """The generic columns, then the method's."""
        return {**{k: getattr(self, k) for k in RESULT_COLUMNS}, **self.method_columns}


#: The generic result columns, in order.
RESULT_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(ResultRow) if f.metadata["arrow"])
#: The integer columns the run metrics sum over samples.
SUMMED: tuple[str, ...] = tuple(f.name for f in fields(ResultRow)
                                if f.metadata["arrow"] and f.metadata["summed"])


def arrow_schema(method_columns: Mapping[str, str] | None = None):
    """The Parquet schema of result rows: the generic columns, then ``method_columns``
    (a method's ``result_columns``: name -> Arrow type name)."""
    import pyarrow as pa

    generic = [f for f in fields(ResultRow) if f.metadata["arrow"]]
    clash = sorted(set(method_columns or {}) & {f.name for f in generic})
    if clash:
        raise ValueError(f"result_columns {clash} are generic columns; name them otherwise")
    out = [(f.name, pa.type_for_alias(f.metadata["arrow"])) for f in generic]
    for name, kind in (method_columns or {}).items():
        try:
            out.append((name, pa.type_for_alias(kind)))
        except ValueError:
            raise ValueError(f"result column {name!r}: {kind!r} is not an Arrow type name "
                             "(e.g. bool, string, int64, double)") from None
    return pa.schema(out)


#: The role of the pseudo-call a sample error is counted as (see :func:`error_row`).
SAMPLE_ERROR_ROLE = "sample"


def describe_exception(where: str, e: BaseException) -> str:
    """``<where>: <ExceptionType>: <message>`` (the message capped), one line."""
    msg = " ".join(str(e).split())
    if len(msg) > 500:
        msg = msg[:500] + "..."
    return f"{where}: {type(e).__name__}: {msg}" if msg else f"{where}: {type(e).__name__}"


def score(state: SampleState, method: Method, ctx: MethodContext) -> ResultRow:
    """The graded row of a finished sample (:func:`finish_and_score`)."""
    return finish_and_score(state, method, ctx)[1]


#: Errors that are not one sample's fault: a configuration the method refuses and an engine
#: that cannot serve stop the run on every path (docs/faults.md), never one error row.
STOPS_THE_RUN: tuple[type[BaseException], ...] = (MethodArgsError, EngineFailure)

#: ``json.dumps(..., default=str)`` and ``json.dumps(..., sort_keys=True)``, each encoder
#: built once (json.dumps builds one per call when given options): every row encodes both.
_DETAIL_JSON = json.JSONEncoder(default=str)
_SORTED_JSON = json.JSONEncoder(sort_keys=True)


def finish_and_score(state: SampleState, method: Method, ctx: MethodContext
                     ) -> tuple[Outcome | None, ResultRow]:
    """Finish a sample (``method.finish``) and grade it: the method's outcome (None for an
    error row) and the graded row: the final answer, each agent's independent answer and the
    coordinator's; token and call accounting.

    The one guarded finish of every path (the Ray stage, ``df_ray.evaluate``, the tests'
    driver runs): never raises for one sample's fault: a sample whose method (an earlier
    ``plan``, or ``finish``), a parser or the grader raised becomes its error row
    (:func:`error_row`). What stops the run (``STOPS_THE_RUN``) is raised."""
    declared = type(method).result_columns
    if state.error is not None:
        return None, error_row(state, ctx, state.error, declared)
    try:
        outcome = method.finish(state, ctx)
    except STOPS_THE_RUN:
        raise
    except Exception as e:
        return None, error_row(state, ctx, describe_exception("finish", e), declared)
    try:
        return outcome, score_outcome(state, outcome, ctx, declared)
    except STOPS_THE_RUN:
        raise
    except Exception as e:
        return None, error_row(state, ctx, describe_exception("grade", e), declared)


def error_row(state: SampleState, ctx: MethodContext, error: str,
              declared: Mapping[str, str] | None = None) -> ResultRow:
    """The row of a sample that raised: not correct, no answer, its calls and tokens
    accounted as any row's (:func:`_accounting`), and the error counted as one failed call
    (role ``sample``), so that it shows in ``failed_calls`` and ``samples_with_errors`` and
    counts against ``max_error_rate``; the method's ``declared`` columns null."""
    try:
        scores = dict(ctx.task.grade(state.sample, None).scores)
    except Exception:
        scores = {}
    acc = _accounting(state.calls, budgets(ctx))
    acc["detail_calls"].append({"round": None, "role": SAMPLE_ERROR_ROLE, "agent": "",
                                "cached": False, "prompt_tokens": 0, "completion_tokens": 0,
                                "error": f"sample error: {error}"})
    detail = {"observations": [], "agent_correct": {}, "agent_grade_detail": {},
              "final": None, "final_grade_detail": "", "coordinator": None,
              "extra": {"sample_error": error}, "calls": acc.pop("detail_calls")}
    acc["n_calls"] += 1
    acc["n_errors"] += 1
    return ResultRow(
        sample_id=state.sample.id, correct=False, scores=json.dumps(scores), final_answer=None,
        any_agent_correct=False,
        **won_and_lost(correct=False, reachable=False, selected_correct=None, error=True),
        cluster=sample_cluster(ctx, state.sample), **acc, t_cross=0,
        detail=_DETAIL_JSON.encode(detail),
        method_columns=dict.fromkeys(declared or ()))


def _accounting(calls: Sequence[Any], max_tokens=no_budget) -> dict[str, Any]:
    """The call and token columns every row has, error row or not (their one definition):
    calls, fresh, failed, refused, truncated and repaired calls, truncation by agent, the
    tokens an engine spent by role (:func:`spent_tokens`: a failed call spends none) and the
    calls as the row's detail lists them (``detail_calls``). A call without a recorded
    finish_reason is truncated when it used all of its agent's ``max_tokens`` (agent id ->
    budget; df_ray.evaluation.stop_reasons), else its stop reason is unknown."""
    answered = [c for c in calls if not c.error]
    reasons = [call_stop_reason(c, max_tokens) for c in answered]
    tokens = {"agent": 0, "coordinator": 0, "other": 0}
    for c in calls:
        tokens[c.role if c.role in tokens else "other"] += spent_tokens([c])
    return {
        "n_calls": len(calls),
        "n_fresh_calls": sum(1 for c in calls if not c.cached and c.error is None),
        "n_errors": sum(1 for c in calls if c.error),
        "n_refused": sum(1 for c in calls if is_refusal(c.error)),
        "n_truncated": reasons.count("length"),
        "n_no_finish_reason": sum(1 for c in answered if c.finish_reason is None),
        "n_stop_unknown": reasons.count("unknown"),
        "n_repaired": sum(c.repaired for c in calls),
        "truncation": _SORTED_JSON.encode(truncation_by_agent(calls, max_tokens)),
        "agent_tokens": tokens["agent"],
        "coordinator_tokens": tokens["coordinator"],
        "other_tokens": tokens["other"],
        "total_tokens": sum(tokens.values()),
        "detail_calls": [{"round": c.round, "role": c.role, "agent": c.agent,
                          "cached": c.cached, "prompt_tokens": c.prompt_tokens,
                          "completion_tokens": c.completion_tokens, "error": c.error,
                          "finish_reason": c.finish_reason,
                          **({"repaired": c.repaired} if c.repaired else {})}
                         for c in calls],
    }


class _Grades:
    """A sample's grades, one per distinct answer (``grade_key``); an answer no grader could
    judge (``GradingUnavailable``) is graded wrong and kept in ``ungraded`` with why."""

    def __init__(self, task: Any, sample: Any) -> None:
        self.task, self.sample = task, sample
        self.grades: dict[Any, Any] = {}
        self.ungraded: dict[Any, str] = {}

    def grade(self, o: Observation | None) -> Grade:
        if o is None or not o.valid:
            return self.task.grade(self.sample, None)
        key = grade_key(o)
        if key not in self.grades:
            try:
                self.grades[key] = self.task.grade(self.sample, o)
            except GradingUnavailable as e:  # no verdict on this answer only
                self.ungraded[key] = describe_exception("grade", e)
                self.grades[key] = Grade(False, dict(self.task.grade(self.sample, None).scores),
                                         self.ungraded[key])
        return self.grades[key]

    def verdict(self, o: Observation | None) -> bool | None:
        """An observation's grade as a method column: None when absent or ungraded."""
        if o is None:
            return None
        ok = bool(self.grade(o).correct)
        return None if o.valid and grade_key(o) in self.ungraded else ok


def _own_columns(outcome: Outcome, verdict: Any,
                 declared: Mapping[str, str] | None) -> dict[str, Any]:
    """The method's columns of a row: ``outcome.columns`` and the grades of
    ``outcome.graded``, every declared one present (null when left out) and no other."""
    own = {**outcome.columns, **{k: verdict(o) for k, o in outcome.graded.items()}}
    if declared is None:
        return own
    undeclared = sorted(set(own) - set(declared))
    if undeclared:
        raise ValueError(f"Outcome columns {undeclared} are not in the method's "
                         "result_columns")
    return {k: own.get(k) for k in declared}


def score_outcome(state: SampleState, outcome: Outcome, ctx: MethodContext,
                  declared: Mapping[str, str] | None = None) -> ResultRow:
    """Grade a finished sample: the final answer, each agent's independent answer and the
    coordinator's; token and call accounting; the method's columns (``outcome.columns``,
    and the grade of each of ``outcome.graded``), every ``declared`` one present (null when
    the outcome leaves it out) and no other."""
    sample = state.sample
    g = _Grades(ctx.task, sample)
    grade_obs, ungraded = g.grade, g.ungraded
    final_grade = grade_obs(outcome.final)
    for o in outcome.agent_observations:
        grade_obs(o)
    if outcome.final is not None and grade_key(outcome.final) in ungraded:
        raise GradingUnavailable(ungraded[grade_key(outcome.final)])
    # An answer no grader could judge has no entry in agent_correct (neither right nor
    # wrong); its detail says why, and the other answers keep their grades.
    agent_correct = {o.agent: bool(grade_obs(o).correct)
                     for o in outcome.agent_observations
                     if o.valid and grade_key(o) not in ungraded}
    agent_grade_detail = {o.agent: grade_obs(o).detail
                          for o in outcome.agent_observations if o.valid}
    coord = outcome.coordinator
    own = _own_columns(outcome, g.verdict, declared)
    acc = _accounting(state.calls, budgets(ctx))
    detail = {
        "observations": [_obs_dict(o) for o in outcome.agent_observations],
        "agent_correct": agent_correct,
        "agent_grade_detail": agent_grade_detail,
        "final": _obs_dict(outcome.final) if outcome.final else None,
        "final_grade_detail": final_grade.detail,
        "coordinator": _obs_dict(coord) if coord is not None else None,
        "extra": outcome.extra,
        **({"ungraded": sorted(set(ungraded.values()))} if ungraded else {}),
        "calls": acc.pop("detail_calls"),
    }
    # the selection among the independent answers: the method's, else their plurality vote
    selected = outcome.selected
    if selected is None:
        selected = majority(outcome.agent_observations, ctx)
    won = won_and_lost(correct=bool(final_grade.correct),
                       reachable=any(agent_correct.values()),
                       selected_correct=selected is not None and bool(
                           grade_obs(selected).correct), own=own)
    return ResultRow(
        sample_id=sample.id,
        correct=bool(final_grade.correct),
        scores=json.dumps(final_grade.scores),
        final_answer=outcome.final.answer if outcome.final else None,
        any_agent_correct=any(agent_correct.values()),
        **won,
        cluster=sample_cluster(ctx, sample),
        **acc,
        t_cross=int(outcome.t_cross),
        detail=_DETAIL_JSON.encode(detail),
        method_columns=own,
    )


def grade_key(o: Observation) -> tuple[str | None, str | None]:
    """What a grade may depend on: the canonical key and the answer as written.

    Graders read ``extracted`` (the code that runs, the FinQA program, the LaTeX), not only
    the canonical key, and canonicalisation is made for clustering, not for grading: two
    programs with one key (docstrings and ``__main__`` blocks dropped) can behave
    differently. Answers share a grade only when both texts are identical."""
    return (o.answer, o.extracted)


def spent_tokens(calls: Any) -> int:
    """Prompt + completion tokens of the calls an engine answered. A failed or refused call
    (e.g. a prompt over the context length, which the engine never ran) spends none."""
    return sum(c.prompt_tokens + c.completion_tokens for c in calls if not c.error)


def truncation_by_agent(calls: Any, max_tokens=no_budget) -> dict[str, list[int]]:
    """Per agent id (the coordinator's too): [calls an engine answered, of them cut off at
    max_tokens (one without a recorded reason: when it used all of ``max_tokens(agent)``)]."""
    out: dict[str, list[int]] = {}
    for c in calls:
        if c.error:
            continue
        n = out.setdefault(c.agent, [0, 0])
        n[0] += 1
        n[1] += int(call_stop_reason(c, max_tokens) == "length")
    return out


def sample_cluster(ctx: MethodContext, sample: Any) -> str | None:
    """The benchmark's cluster of a sample (its task's ``cluster(sample)``: a LegalBench
    task, a FinQA report), None for a benchmark that declares none; the report clusters
    standard errors by it (and by question across run seeds)."""
    hook = getattr(ctx.task, "cluster", None)
    if hook is None:
        return None
    c = hook(sample)
    return None if c is None else str(c)


def is_refusal(error: str | None) -> bool:
    """Whether a call's error is the engine refusing its prompt (over the context length)."""
    return bool(error) and str(error).startswith(CONTEXT_LENGTH_ERROR)


def _obs_dict(o: Observation) -> dict[str, Any]:
    # extracted text, canonical key (answer) and the extraction rule that fired; for an
    # invalid output, why (reason).
    return {"agent": o.agent, "answer": o.answer, "confidence": o.confidence, "valid": o.valid,
            "quality": o.quality, "extracted": (o.extracted or "")[:2000],
            "rule": o.rule, "reason": o.reason, "raw": o.raw[:4000]}
