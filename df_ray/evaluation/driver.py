"""The evaluation driver: one loop that runs methods' rounds over a batch of samples.

A *row* is one sample and one state per *member* (a configuration: a method, its context and
how many rounds it runs); a batch is a list of rows. Each round the driver asks every live
member's method for the calls its sample needs, answers from what the row already holds (a
call another member made in an earlier round), then from the generation cache, then sends
the rest to the engine client, once per distinct request (the first member to ask pays, the
others read it as cached), persists the new completions and appends the call records.
After the last round ``finish`` scores every state (``ResultRow``) or, for a calibration
pass, turns it into a calibration record. ``run_rows`` runs every round of a batch with no
barrier between rounds: each row moves to its next round as soon as its own calls are
answered (``df_ray.evaluation.rolling``; what the Ray stage runs), with the same results.

The same driver runs inside a Ray Data stage (``df_ray.pipeline.stages``), in the tests and
in a plain Python process (``df_ray.evaluate``): the engine client is anything with
``generate(requests) -> completions`` (and ``generate_rolling`` for ``run_rows`` to roll),
the cache anything with ``get``/``put_many``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from df_ray.core import CalibrationRecord
from df_ray.engines.base import ChatRequest, Completion, repair_completion
from df_ray.evaluation.context import build_context
from df_ray.evaluation.planned import Answered, PlannedCall, Row
from df_ray.evaluation.scoring import (
    STOPS_THE_RUN,
    ResultRow,
    describe_exception,
    finish_and_score,
)
from df_ray.methods.base import CallRecord, Method, MethodContext, Outcome, SampleState
from df_ray.tasks.base import Sample

log = logging.getLogger(__name__)

class EngineClient(Protocol):
    """What the driver needs of engines: a batch of requests in, one completion each out."""

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]: ...


class CallCache(Protocol):
    """What the driver needs of a generation cache (``df_ray.pipeline.cache``)."""

    def __contains__(self, key: str) -> bool: ...

    def get(self, key: str) -> Completion | None: ...

    def put_many(self, items: Any) -> None: ...


#: ``hook(owner, flush)``: have ``flush`` called when the run is interrupted, for as long as
#: ``owner`` lives (the Ray stage passes ``df_ray.pipeline.signals.on_interrupt``).
InterruptHook = Callable[[Any, Callable[[], None]], None]


class _AnswerSink:
    """Writes a round's answers to the cache as they arrive, a part at most every
    ``FLUSH_S`` seconds (and the rest when the round ends). The cache makes their texts
    valid UTF-8 itself (``GenerationCache.put_many``)."""

    FLUSH_S = 30.0

    def __init__(self, cache: CallCache, requests: Sequence[ChatRequest],
                 on_interrupt: InterruptHook | None = None) -> None:
        self.cache, self.requests = cache, requests
        self.pending: list[tuple[ChatRequest, Completion]] = []
        self.last = time.monotonic()
        self._lock = threading.Lock()
        # an interrupted run (SIGINT, SIGTERM) writes what it holds, from another thread
        if on_interrupt is not None:
            on_interrupt(self, self.flush)

    def add(self, i: int, completion: Completion) -> None:
        with self._lock:
            self.pending.append((self.requests[i], completion))
        if time.monotonic() - self.last >= self.FLUSH_S:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            pending, self.pending = self.pending, []
            if pending:
                self.cache.put_many(pending)
            self.last = time.monotonic()


@dataclass
class Member:
    """One configuration the driver serves: a method, its context and its rounds.
    ``calibration``: a calibration pass (only ``method.calibration_rounds`` rounds)."""

    method: Method
    ctx: MethodContext
    calibration: bool = False

    @property
    def rounds(self) -> int:
        return self.method.calibration_rounds if self.calibration else self.method.rounds

    @classmethod
    def from_plan(cls, plan: Any, count_tokens: Callable[[str, str], int] | None = None, *,
                  for_calibration: bool = False) -> Member:
        """A resolved plan's member (``df_ray.evaluation.plan.RunPlan``): its Method as the
        plan holds it, its context over the plan's configuration, Task (built from the
        plan's target) and calibration."""
        return cls(plan.method,
                   build_context(plan.cfg, plan.calibration, count_tokens,
                                 for_calibration=for_calibration, task=plan.task),
                   for_calibration)

    @classmethod
    def from_config(cls, cfg: Any, calibration: Any = None,
                    count_tokens: Callable[[str, str], int] | None = None, *,
                    for_calibration: bool = False) -> Member:
        """A RunConfig's member; ``calibration`` is the frozen Calibration it uses (if any)."""
        return cls(cfg.build_method(),
                   build_context(cfg, calibration, count_tokens,
                                 for_calibration=for_calibration),
                   for_calibration)


@dataclass
class Driver:
    """Runs the members' rounds for batches of rows (see the module docstring).

    ``refresh``: called before the cache is asked for a call the row does not hold, so a
    cache shared with other writers can list their new parts (``GenerationCache.refresh``).
    ``on_interrupt``: how a round's answers not yet cached are written when the run is
    interrupted from another thread (an ``InterruptHook``; in process the round's own
    ``finally`` writes them)."""

    members: Sequence[Member]
    engine: EngineClient
    cache: CallCache | None = None
    refresh: Callable[[], None] | None = None
    on_interrupt: InterruptHook | None = None
    planned: list[PlannedCall] = field(default_factory=list)
    keep_plan: bool = False

    @property
    def rounds(self) -> int:
        return max(m.rounds for m in self.members)

    def new_rows(self, samples: Sequence[Sample]) -> list[Row]:
        return [[SampleState(s) for _ in self.members] for s in samples]

    # ------------------------------------------------------------------ one round
    def run_round(self, round: int, rows: Sequence[Row],
                  busy: list[list[float]] | None = None) -> None:
        """One round over ``rows``. ``busy[row][member]``, when given, accumulates the seconds
        spent on each member: planning its calls, and the engine time of the calls it paid
        for (a call shared with a later member is charged to the first, as its tokens are)."""
        planned = self._plan_round(round, rows, busy)
        if not planned:
            return
        keys, answered, todo = self._resolve(rows, planned)
        if todo:
            self._ask_engines(planned, todo, answered, busy)
        self._record(rows, planned, keys, answered)

    def run_rows(self, rows: Sequence[Row], busy: list[list[float]] | None = None) -> None:
        """Every round over ``rows``, each row on to its next round as soon as its own calls
        are answered, not when the batch's slowest call of the round is
        (`df_ray.evaluation.rolling`): the same records, cached flags, tokens and cache
        writes as ``run_round`` round after round. An engine client without
        ``generate_rolling`` (the shared service's, the in-process ``EngineRouter``) runs
        them round after round."""
        if getattr(self.engine, "generate_rolling", None) is None:
            for r in range(self.rounds):
                self.run_round(r, rows, busy)
            return
        from df_ray.evaluation.rolling import RollingBatch

        RollingBatch(self, rows, busy).run()

    def _plan_round(self, round: int, rows: Sequence[Row],
                    busy: list[list[float]] | None) -> list[PlannedCall]:
        """Every live member's calls for every row this round (``_plan_row``)."""
        return [p for i in range(len(rows)) for p in self._plan_row(round, i, rows[i], busy)]

    def _plan_row(self, round: int, i: int, states: Row,
                  busy: list[list[float]] | None) -> list[PlannedCall]:
        """Every live member's calls for row ``i`` this round; a sample whose ``plan``
        raises is done, with its error (its error row, not the batch's)."""
        planned: list[PlannedCall] = []
        for m, (member, st) in enumerate(zip(self.members, states, strict=True)):
            if st.done or round >= member.rounds:
                continue
            t = time.perf_counter()
            try:
                # planned (and keyed) in full before any is kept: a plan that raises
                # half-way leaves no calls behind
                mine = [PlannedCall(round, i, m, call)
                        for call in member.method.plan(round, st, member.ctx)]
                for p in mine:
                    p.call.request.key()
            except STOPS_THE_RUN:  # the configuration's or an engine's: the run stops
                raise
            except Exception as e:  # this sample's fault: its error row, not the batch's
                st.error = describe_exception(f"plan round {round}", e)
                st.done = True
                mine = []
            planned.extend(mine)
            if busy is not None:
                busy[i][m] += time.perf_counter() - t
        return planned

    @staticmethod
    def _record(rows: Sequence[Row], planned: Sequence[PlannedCall], keys: Sequence[str],
                answered: Answered) -> None:
        """Append each planned call's record to its state, in the planned order."""
        for j, p in enumerate(planned):
            comp = answered.results[j]
            assert comp is not None
            rows[p.row][p.member].calls.append(CallRecord(
                round=p.round, role=p.call.role, agent=p.call.agent, key=keys[j],
                text=comp.text, prompt_tokens=comp.prompt_tokens,
                completion_tokens=comp.completion_tokens, cached=answered.cached[j],
                error=comp.error, finish_reason=comp.finish_reason,
                repaired=answered.repaired[j]))

    def _resolve(self, rows: Sequence[Row], planned: Sequence[PlannedCall]
                 ) -> tuple[list[str], Answered, dict[str, list[int]]]:
        """A round's planned calls keyed and answered from what is known (and kept, with
        ``keep_plan``): their keys, their answers so far, the rest by key."""
        if self.keep_plan:
            self.planned.extend(planned)
        keys = [p.call.request.key() for p in planned]
        answered = Answered(len(planned))
        return keys, answered, self._known_answers(rows, planned, keys, answered)

    def _known_answers(self, rows: Sequence[Row], planned: Sequence[PlannedCall],
                       keys: Sequence[str], answered: Answered) -> dict[str, list[int]]:
        """Answer what the rows already hold (calls another member made for the sample in an
        earlier round: they ride in the row; another stage's cache writes may not be listed
        yet), then what the cache holds; the rest by key (key -> the planned calls)."""
        known: dict[int, dict[str, Completion]] = {}
        for i in {p.row for p in planned}:
            known[i] = {c.key: Completion(c.text, c.prompt_tokens, c.completion_tokens,
                                          finish_reason=c.finish_reason)
                        for st in rows[i] for c in st.calls if c.error is None}
        cache = self.cache
        if (cache is not None and self.refresh is not None
                and any(k not in cache and k not in known[p.row]
                        for k, p in zip(keys, planned, strict=True))):
            self.refresh()
        todo: dict[str, list[int]] = {}
        for j, p in enumerate(planned):
            hit = known[p.row].get(keys[j])
            if hit is None and cache is not None:
                hit = cache.get(keys[j])
            if hit is not None:
                answered.results[j], answered.cached[j] = hit, True
            else:
                todo.setdefault(keys[j], []).append(j)
        return todo

    def _ask_engines(self, planned: Sequence[PlannedCall], todo: dict[str, list[int]],
                     answered: Answered, busy: list[list[float]] | None) -> None:
        """One engine call per distinct request of ``todo``, its answers cached (as they
        come when the engine client can say so) and given to every planned call of it."""
        cache = self.cache
        reqs = [planned[js[0]].call.request for js in todo.values()]
        t = time.perf_counter()
        sink = None
        if cache is not None and getattr(self.engine, "answers_as_they_come", False):
            sink = self._sink(reqs)
            try:
                answers = self.engine.generate(reqs, on_answer=sink.add)
            finally:
                sink.flush()
        else:
            answers = self.engine.generate(reqs)
        # the engine boundary: every text valid UTF-8 before the cache, a parser or a later
        # prompt sees it (lone surrogates replaced, and counted on the call)
        comps = [repair_completion(comp) for comp in answers]
        if busy is not None:
            share = (time.perf_counter() - t) / len(reqs)
            for js in todo.values():
                busy[planned[js[0]].row][planned[js[0]].member] += share
        if sink is None and cache is not None:
            cache.put_many(zip(reqs, [c for c, _ in comps], strict=True))
        for js, (comp, n_fixed) in zip(todo.values(), comps, strict=True):
            for n, j in enumerate(js):
                answered.results[j] = comp
                answered.repaired[j] = n_fixed
                answered.cached[j] = n > 0  # a duplicate within the batch costs nothing

    def _sink(self, requests: Sequence[ChatRequest]) -> Any:
        """What caches the answers to ``requests`` (by index) as they come, not when the
        round's slowest call ends: a run killed mid-round, or stopped by an engine failure,
        keeps the answers it had (a cache that holds its writes, a stage's WriteBehind,
        takes them its own way). ``add(i, completion)``, then ``flush()``."""
        own = getattr(self.cache, "sink", None)
        return own(requests) if own is not None else _AnswerSink(self.cache, requests,
                                                                 self.on_interrupt)

    # ------------------------------------------------------------------ the end
    def finish(self, rows: Sequence[Row], busy: list[list[float]] | None = None
               ) -> list[tuple[int, ResultRow]]:
        """(member index, graded row) for every state of every row, row by row;
        ``busy[row][member]``, when given, accumulates the seconds spent grading."""
        return [(m, row) for m, _, row in self.outcomes(rows, busy)]

    def outcomes(self, rows: Sequence[Row], busy: list[list[float]] | None = None
                 ) -> list[tuple[int, Outcome | None, ResultRow]]:
        """(member index, outcome, graded row) for every state of every row, row by row,
        through the one guarded finish (``scoring.finish_and_score``): a sample whose
        ``plan``, ``finish`` or grading raised is its error row (outcome None)."""
        out = []
        for i, states in enumerate(rows):
            for m, (member, st) in enumerate(zip(self.members, states, strict=True)):
                t = time.perf_counter()
                outcome, row = finish_and_score(st, member.method, member.ctx)
                out.append((m, outcome, row))
                if busy is not None:
                    busy[i][m] += time.perf_counter() - t
        return out

    def calibration_records(self, rows: Sequence[Row]) -> list[tuple[int, CalibrationRecord]]:
        """(member index, calibration record) for every state of every row; a held-out
        sample whose method, parser or grader raised gives no record (it is logged)."""
        out = []
        for states in rows:
            for m, (member, st) in enumerate(zip(self.members, states, strict=True)):
                if st.error is not None:
                    log.warning("calibration sample %s left out: %s", st.sample.id, st.error)
                    continue
                try:
                    out.append((m, calibration_record(st, member.method, member.ctx)))
                except STOPS_THE_RUN:
                    raise
                except Exception as e:
                    log.warning("calibration sample %s left out: %s", st.sample.id,
                                describe_exception("calibration record", e))
        return out

    # ------------------------------------------------------------------ in process
    def run(self, samples: Sequence[Sample]) -> list[Row]:
        """Every round over ``samples`` in this process."""
        rows = self.new_rows(samples)
        for r in range(self.rounds):
            self.run_round(r, rows)
        return rows


def calibration_record(state: SampleState, method: Method, ctx: MethodContext
                       ) -> CalibrationRecord:
    """A held-out sample's record: the method's calibration observations and, per answer,
    whether the task grades it correct."""
    obs = tuple(method.calibration_observations(state, ctx))
    correct: dict[str, bool] = {}
    for o in obs:
        if o.valid and o.answer is not None and o.answer not in correct:
            correct[o.answer] = bool(ctx.task.grade(state.sample, o).correct)
    return CalibrationRecord(sample_id=state.sample.id, observations=obs, correct=correct)


def record_to_dict(rec: CalibrationRecord) -> dict[str, Any]:
    return {"sample_id": rec.sample_id,
            "observations": [{"agent": o.agent, "answer": o.answer, "confidence": o.confidence,
                              "valid": o.valid, "quality": o.quality}
                             for o in rec.observations],
            "correct": dict(rec.correct or {})}


def record_from_dict(d: dict[str, Any]) -> CalibrationRecord:
    from df_ray.core.types import Observation

    return CalibrationRecord(sample_id=d["sample_id"],
                             observations=tuple(Observation(**o) for o in d["observations"]),
                             correct=d["correct"])
