"""A batch's rounds with no batch barrier: each row moves to its next round as soon as its
own calls are answered (``Driver.run_rows``).

Round by round (``Driver.run_round``) a round ends when the batch's slowest call is
answered, so a sample whose agents answered early waits for the slowest answer of the batch
(answers are long-tailed) before its next call, DarkForest's coordinator, is made. Here the
engine client's ``generate_rolling`` takes the batch's first calls and, as each answer
comes, the calls it makes possible: when every call of a row's round is answered, the row's
records are appended, its next round is planned, what the row and the cache hold answers
what it can, and the rest is sent at once, beside the calls still in flight.

What stays as round by round, so that the rows come out the same:

- a row moves as a whole (every member, i.e. configuration, of the sample): the calls its
  members share ride in the row, and its records are appended in ``run_round``'s order;
- a request the batch makes twice is paid by the first to plan it and read as cached by the
  others (joined while it is in flight; from the cache once answered);
- answers are cached as they come, through the driver's sink (a stage's ``WriteBehind``, or
  ``_AnswerSink`` with its interrupt hook): a killed run keeps the answers it had;
- a ``plan`` that raises makes that sample an error row; one that stops the run
  (``STOPS_THE_RUN``) raises out of the answer callback, and the engine client forgets the
  calls still in flight before it raises on (the sink's answers are flushed).

Only rows that make the same request (the same sample twice in a batch) can differ from
round by round: which of them pays for it depends on which gets there first.

``busy[row][member]`` (the stage's ``busy_s``, each configuration's share of a fused run's
wall time: ``df_ray.pipeline.runner.own_wall_times``) keeps its meaning: planning time per
member as before, and the batch's engine time (the serve's wall time less the planning done
inside it) shared by the calls it paid for in proportion to how long each waited for its
answer, where round by round shared each round's wall time equally among its calls.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from df_ray.engines.base import ChatRequest, Completion, repair_completion
from df_ray.evaluation.planned import Answered, PlannedCall, Row


@dataclass
class _Open:
    """A row's round waiting on calls: its planned calls, their answers so far, how many
    are still unanswered."""

    round: int
    planned: list[PlannedCall]
    keys: list[str]
    answered: Answered
    left: int


class RollingBatch:
    """One batch's rounds through ``generate_rolling`` (see the module docstring), for
    ``driver`` (a ``Driver``: its planning, known answers, records and cache sink)."""

    def __init__(self, driver: Any, rows: Sequence[Row],
                 busy: list[list[float]] | None) -> None:
        self.driver, self.rows, self.busy = driver, rows, busy
        self.open: dict[int, _Open] = {}  # row -> its round waiting on calls
        # the engine calls, by the client's index: request, key, who waits, who pays
        self.requests: list[ChatRequest] = []
        self.keys: list[str] = []
        self.waiting: list[list[tuple[int, int]]] = []  # (row, planned position)
        self.payer: list[tuple[int, int]] = []  # (row, member)
        self.sent_at: list[float] = []
        self.waited: list[float] = []
        self.flying: dict[str, int] = {}  # key -> its call, while unanswered
        # the batch's answers, for a later duplicate the cache cannot serve yet (an
        # _AnswerSink holds its writes until it flushes)
        self.answers: dict[str, Completion] = {}
        self.inside_s = 0.0  # time spent in the answer callback
        self.sink = driver._sink(self.requests) if driver.cache is not None else None

    def run(self) -> None:
        first: list[ChatRequest] = []
        for i in range(len(self.rows)):
            first.extend(self._advance(i, 0))
        if not first:
            return
        t = time.perf_counter()
        try:
            self.driver.engine.generate_rolling(first, self._answered)
        finally:
            if self.sink is not None:
                self.sink.flush()
        assert not self.open, f"rows left waiting: {sorted(self.open)}"
        self._charge(time.perf_counter() - t - self.inside_s)

    def _advance(self, i: int, round: int) -> list[ChatRequest]:
        """Row ``i`` from ``round`` on: each round planned and answered from what is known
        until one waits on calls (the new ones returned) or the rounds end."""
        d = self.driver
        new: list[ChatRequest] = []
        for r in range(round, d.rounds):
            planned = d._plan_row(r, i, self.rows[i], self.busy)
            if not planned:
                continue
            keys, answered, todo = d._resolve(self.rows, planned)
            left = self._ask(i, planned, todo, answered, new)
            if left:
                self.open[i] = _Open(r, planned, keys, answered, left)
                return new
            d._record(self.rows, planned, keys, answered)
        return new

    def _ask(self, i: int, planned: Sequence[PlannedCall], todo: dict[str, list[int]],
             answered: Answered, new: list[ChatRequest]) -> int:
        """Row ``i``'s unknown calls: an answer of the batch the cache cannot serve yet, a
        call in flight joined, or a new call (into ``new``); how many calls wait."""
        left = 0
        for key, js in todo.items():
            hit = self.answers.get(key)
            if hit is not None:  # as the cache will serve it
                for j in js:
                    answered.results[j], answered.cached[j] = hit, True
                continue
            k = self.flying.get(key)
            pays = k is None
            if k is None:
                k = self.flying[key] = len(self.requests)
                p = planned[js[0]]
                self.requests.append(p.call.request)
                self.keys.append(key)
                self.waiting.append([])
                self.payer.append((i, p.member))
                self.sent_at.append(time.perf_counter())
                self.waited.append(0.0)
                new.append(p.call.request)
            for n, j in enumerate(js):  # the first planned pays, the others read it
                answered.cached[j] = n > 0 or not pays
                self.waiting[k].append((i, j))
            left += len(js)
        return left

    def _answered(self, k: int, completion: Completion) -> list[ChatRequest]:
        """Call ``k``'s final answer: cached, given to the rows waiting on it; each row
        whose round it completes is recorded and moved on (in row order); the calls that
        makes returned."""
        t = time.perf_counter()
        self.waited[k] = t - self.sent_at[k]
        key = self.keys[k]
        del self.flying[key]
        if completion.error is None and self.sink is not None:
            self.sink.add(k, completion)
        # the engine boundary: every text valid UTF-8 (lone surrogates replaced, counted)
        comp, n_fixed = repair_completion(completion)
        if comp.error is None and self.sink is not None:
            self.answers[key] = Completion(comp.text, comp.prompt_tokens,
                                           comp.completion_tokens,
                                           finish_reason=comp.finish_reason)
        done = set()
        for i, j in self.waiting[k]:
            o = self.open[i]
            o.answered.results[j], o.answered.repaired[j] = comp, n_fixed
            o.left -= 1
            if o.left == 0:
                done.add(i)
        new: list[ChatRequest] = []
        try:
            for i in sorted(done):
                o = self.open.pop(i)
                self.driver._record(self.rows, o.planned, o.keys, o.answered)
                new.extend(self._advance(i, o.round + 1))
        finally:
            self.inside_s += time.perf_counter() - t
        return new

    def _charge(self, engine_s: float) -> None:
        """The engine time to the calls' payers, by how long each waited (see above)."""
        if self.busy is None or not self.requests:
            return
        total = sum(self.waited)
        for (i, m), w in zip(self.payer, self.waited, strict=True):
            share = w / total if total > 0 else 1 / len(self.requests)
            self.busy[i][m] += max(engine_s, 0.0) * share

