"""What a finished sweep left, read back without an LLM call: every agent's independent
answer on the test and calibration splits, from the generation cache, parsed and graded.

The requests are built by the methods' own code (``df_ray.methods``: the independent call of
slot ``"independent"``, Self-Consistency's samples, DarkForest's coordinator call) from the
configuration's own context, so each is looked up under exactly the key the real run wrote
(the run seed is the configuration's; calibration calls use the calibration pass's seed 0,
as ``build_context`` does). A call the cache lacks is counted in :class:`Missing`, never
made.

Grades: an answer's grade is the task's own (``Task.grade``; HumanEval runs the sandbox),
once per (sample, answer as written), as ``df_ray.evaluation.scoring`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from df_ray.core import CalibrationRecord, Observation, parse
from df_ray.evaluation.context import build_context, load_calibration_samples, load_samples
from df_ray.evaluation.driver import calibration_record
from df_ray.evaluation.scoring import grade_key
from df_ray.methods.base import Call, CallRecord, MethodContext, SampleState
from df_ray.methods.common import independent_calls
from df_ray.tasks.base import Sample


@dataclass
class Missing:
    """Calls an analysis needed that the cache does not hold, by what they are."""

    calls: dict[str, list[str]] = field(default_factory=dict)

    def add(self, what: str, where: str) -> None:
        self.calls.setdefault(what, []).append(where)

    def count(self, what: str | None = None) -> int:
        if what is not None:
            return len(self.calls.get(what, []))
        return sum(len(v) for v in self.calls.values())

    def line(self, what: str) -> str:
        """One line naming the missing calls of ``what`` (the first few of them)."""
        where = self.calls.get(what, [])
        shown = ", ".join(where[:3]) + (f" and {len(where) - 3} more" if len(where) > 3 else "")
        return f"{len(where)} {what} call(s) not in the generation cache ({shown})"


class Grader:
    """``Task.grade`` once per (sample, answer as written)."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self._memo: dict[tuple[str, Any], bool] = {}
        self.graded = 0

    def correct(self, sample: Sample, obs: Observation | None) -> bool:
        key = (sample.id, None if obs is None or not obs.valid else grade_key(obs))
        hit = self._memo.get(key)
        if hit is None:
            self.graded += 1
            grade = self.task.grade(sample, None if key[1] is None else obs)
            hit = self._memo[key] = bool(grade.correct)
        return hit


def lookup(cache: Any, calls: Sequence[Call], round: int, missing: Missing, what: str,
           sample: Sample) -> list[CallRecord] | None:
    """The cached completions of ``calls`` as the driver's call records; None (and each
    absent call counted under ``what``) when one is not cached."""
    out = []
    ok = True
    for call in calls:
        key = call.request.key()
        comp = cache.get(key)
        if comp is None:
            missing.add(what, f"{call.agent} on {sample.id}")
            ok = False
            continue
        out.append(CallRecord(round=round, role=call.role, agent=call.agent, key=key,
                              text=comp.text, prompt_tokens=comp.prompt_tokens,
                              completion_tokens=comp.completion_tokens, cached=True,
                              error=comp.error, finish_reason=comp.finish_reason))
    return out if ok else None


def parse_records(records: Iterable[CallRecord], ctx: MethodContext, sample: Sample
                  ) -> list[Observation]:
    """Call records as observations, as every method parses them (a failed call is
    invalid)."""
    spec = ctx.task.parse_spec(sample)
    return [Observation.invalid(r.agent, raw="") if r.error else parse(r.text, spec,
                                                                       agent=r.agent)
            for r in records]


@dataclass
class SplitAnswers:
    """One split's independent answers: per sample, each agent's observation (raw text
    dropped) and tokens; ``states`` hold the round-0 call records the methods plan on."""

    samples: list[Sample]
    obs: list[dict[str, Observation]]
    tokens: list[dict[str, int]]
    states: list[SampleState]
    complete: list[bool]


def _slim(o: Observation) -> Observation:
    # the belief, votes and grades never read the raw text; the cache keeps it
    return dataclasses.replace(o, raw="") if o.raw else o


def independent_answers(cfg: Any, cache: Any, samples: Sequence[Sample], missing: Missing,
                        *, calibration_pass: bool = False, what: str = "agent") -> SplitAnswers:
    """Every agent's independent answer to every sample, from the cache."""
    ctx = build_context(cfg, None, for_calibration=calibration_pass)
    out = SplitAnswers(list(samples), [], [], [], [])
    for s in samples:
        st = SampleState(s)
        recs = lookup(cache, independent_calls(ctx, ctx.agents, st), 0, missing, what, s)
        out.complete.append(recs is not None)
        recs = recs or []
        st.calls.extend(recs)
        obs = parse_records(recs, ctx, s)
        out.obs.append({o.agent: _slim(o) for o in obs})
        out.tokens.append({r.agent: 0 if r.error else r.prompt_tokens + r.completion_tokens
                           for r in recs})
        out.states.append(st)
    return out


@dataclass
class CachedPool:
    """A pool configuration's agents, answers and calibration records, from the cache."""

    cfg: Any
    agents: list[str]
    task: Any
    test: SplitAnswers
    held_out: SplitAnswers
    records: list[CalibrationRecord]
    grader: Grader
    missing: Missing
    cache: Any = None
    held_out_origin: str = ""

    def ctx(self, agents: Sequence[str] | None = None, calibration: Any = None,
            *, calibration_pass: bool = False) -> MethodContext:
        """The context of the pool's configuration restricted to ``agents`` (config order)."""
        ctx = build_context(self.cfg, calibration, for_calibration=calibration_pass)
        if agents is None:
            return ctx
        keep = set(agents)
        return dataclasses.replace(ctx, agents=[a for a in ctx.agents if a.id in keep])


def load_pool(cfg: Any, cache: Any, *, test: Sequence[Sample] | None = None,
              held_out: Sequence[Sample] | None = None) -> CachedPool:
    """The pool configuration's cached answers on its test split and calibration split,
    and the calibration records a fit on them counts (``df_ray.evaluation.driver``'s
    ``calibration_record``, one per held-out sample whose calls are all cached)."""
    missing = Missing()
    task = cfg.build_task()
    origin = ""
    if test is None:
        test = load_samples(cfg)
    if held_out is None:
        h = load_calibration_samples(cfg)
        held_out, origin = h.samples, h.origin
    test_answers = independent_answers(cfg, cache, test, missing)
    cal_answers = independent_answers(cfg, cache, held_out, missing, calibration_pass=True,
                                      what="calibration")
    grader = Grader(task)
    method = cfg.build_method()
    cal_ctx = build_context(cfg, None, for_calibration=True)
    records = []
    for st, ok in zip(cal_answers.states, cal_answers.complete, strict=True):
        if ok:
            records.append(calibration_record(st, method, cal_ctx))
    # what a record needs is kept; the held-out states' texts are not needed again
    for st in cal_answers.states:
        st.calls.clear()
    return CachedPool(cfg=cfg, agents=list(cfg.agent_ids()), task=task, test=test_answers,
                      held_out=cal_answers, records=records, grader=grader, missing=missing,
                      cache=cache, held_out_origin=origin)
