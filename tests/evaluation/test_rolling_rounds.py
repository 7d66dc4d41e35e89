"""``Driver.run_rows``: each sample moves to its next round as soon as its own calls are
answered, with the same rows, records, cached flags and cache contents as round by round.

No Ray here: the engine client is a scripted engine behind ``generate_rolling`` that answers
the calls in flight in an order drawn from a seeded ``Random`` (any call's answer may come
before any other's), or that holds one call until every other is answered. The real
client's side is in tests/pipeline/test_rolling_ray.py."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from df_ray.engines.base import ChatRequest, Completion
from df_ray.engines.scripted import ScriptedEngine
from df_ray.evaluation import Driver, Member
from df_ray.methods.base import MethodArgsError
from df_ray.methods.darkforest import DarkForest
from df_ray.pipeline.cache import GenerationCache
from df_ray.pipeline.cache.write_behind import WriteBehind
from tests.helpers import driver_config, make_sample

SAMPLES = [make_sample(f"q{i}") for i in range(6)]
OnAnswer = Callable[[int, Completion], Sequence[ChatRequest]]


class ShuffledClient:
    """``generate_rolling`` over a scripted engine: one call at a time answered, drawn at
    random (seeded) from those in flight; ``sent`` and ``order`` log what happened."""

    answers_as_they_come = True

    def __init__(self, engine: ScriptedEngine, seed: int = 0,
                 last: Callable[[ChatRequest], bool] = lambda r: False) -> None:
        self.engine, self.rng, self.last = engine, random.Random(seed), last
        self.events: list[tuple[str, ChatRequest]] = []  # ("sent" | "answered", request)

    def generate(self, requests, on_answer=None):
        raise AssertionError("run_rows must use generate_rolling")

    def generate_rolling(self, first: Sequence[ChatRequest], on_answer: OnAnswer
                         ) -> list[Completion]:
        pending = list(enumerate(first))
        n = len(first)  # the next request's index
        self.events += [("sent", r) for r in first]
        out: dict[int, Completion] = {}
        while pending:
            # a held call (``last``) only once nothing else is in flight
            free = [k for k, (_, r) in enumerate(pending) if not self.last(r)] or [0]
            i, r = pending.pop(free[self.rng.randrange(len(free))])
            (out[i],) = self.engine.generate([r])
            self.events.append(("answered", r))
            for more in on_answer(i, out[i]):
                self.events.append(("sent", more))
                pending.append((n, more))
                n += 1
        return [out[i] for i in range(n)]


def vary(request: ChatRequest) -> str:
    """Answers that agree on some samples and not on others (so a lazy coordinator is
    called for some), fixed by the model and the prompt."""
    h = hashlib.sha256(f"{request.model}|{request.messages[-1].content}".encode()).digest()
    return f"Reasoning.\nAnswer: {'BBBC'[h[0] % 4]}\nConfidence: 0.{5 + h[1] % 5}"


def _members(*cfgs) -> list[Member]:
    return [Member.from_config(c) for c in cfgs]


def _configs():
    """DarkForest eager and lazy (sharing every agent call; the lazy one skips the
    coordinator where the guardrail trusts the belief) and Debate (two rounds; its first
    round shares the agents' calls)."""
    return (driver_config(name="df"),
            driver_config(name="lazy", method_args={"lazy": True}),
            driver_config(name="debate", method="debate"))


def _cache(tmp, kind: str):
    """The stage's write-behind cache, or a plain one (the driver's ``_AnswerSink``)."""
    cache = GenerationCache(str(tmp))
    return WriteBehind(cache) if kind == "write_behind" else cache


def _cache_rows(root) -> list[dict]:
    parts = sorted(root.rglob("*.parquet"))
    table = pa.concat_tables([pq.read_table(p) for p in parts]).drop_columns(["created"])
    return sorted(table.to_pylist(), key=lambda r: r["key"])


def _run(tmp, kind, rolling: bool, seed: int = 0, engine_args=None, samples=SAMPLES,
         members=None):
    engine = ScriptedEngine("scripted", vary, **(engine_args or {}))
    cache = _cache(tmp, kind)
    members = members or _members(*_configs())
    if rolling:
        driver = Driver(members, ShuffledClient(engine, seed), cache)
    else:  # the round loop the stage ran before
        driver = Driver(members, engine, cache)
    rows = driver.new_rows(samples)
    busy = [[0.0] * len(members) for _ in rows]
    if rolling:
        driver.run_rows(rows, busy)
    else:
        for r in range(driver.rounds):
            driver.run_round(r, rows, busy)
    if isinstance(cache, WriteBehind):
        cache.flush(batch_end=True)
    graded = [(m, row.to_dict()) for m, row in driver.finish(rows)]
    states = [[st.to_dict() for st in sts] for sts in rows]
    return states, graded, _cache_rows(tmp), engine.n_calls, busy


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", ["write_behind", "plain"])
@pytest.mark.parametrize("engine_args", [{}, {"max_prompt_tokens": 120}],
                         ids=["answers", "long-prompts-fail"])
def test_rolling_rows_are_the_round_by_rounds(tmp_path, seed, kind, engine_args):
    states, graded, cache, n, _ = _run(tmp_path / "a", kind, False,
                                          engine_args=engine_args)
    calls = [c for sts in states for st in sts for c in st["calls"]]
    assert any(c["cached"] for c in calls) and not all(c["cached"] for c in calls)
    if engine_args:  # the failures (re-asked in later rounds, never cached) are in it too
        assert any(c["error"] for c in calls)
    again = _run(tmp_path / "b", kind, True, seed, engine_args=engine_args)
    assert again[0] == states  # every record, in order, with its cached flag and tokens
    assert again[1] == graded
    assert again[2] == cache and again[3] == n  # the same cache rows, the same engine calls
    assert all(b > 0 for row in again[4] for b in row)  # every member's time is counted


def test_a_sample_moves_on_before_another_samples_slow_call_is_answered(tmp_path):
    def held(r: ChatRequest) -> bool:  # q0's first agent call: answered last of all
        return r.model == "m1" and "[q0]" in r.messages[-1].content

    client = ShuffledClient(ScriptedEngine("scripted", vary), last=held)
    driver = Driver(_members(driver_config()), client, GenerationCache(str(tmp_path)))
    rows = driver.new_rows(SAMPLES[:2])
    driver.run_rows(rows)
    (answered,) = [n for n, (k, r) in enumerate(client.events) if k == "answered" and held(r)]
    # q1's coordinator call went out while q0's held agent call was unanswered
    (coord_q1,) = [n for n, (k, r) in enumerate(client.events)
                   if k == "sent" and r.model == "mc" and "[q1]" in r.messages[-1].content]
    assert coord_q1 < answered
    assert [len(st.calls) for sts in rows for st in sts] == [4, 4]


class _PlanFails(DarkForest):
    """DarkForest whose round-1 plan raises for q2 (``FAILS`` picks the exception)."""

    FAILS: type[Exception] = ZeroDivisionError

    def plan(self, round, state, ctx):
        if round == 1 and state.sample.id == "q2":
            raise self.FAILS("plan exploded on q2")
        return super().plan(round, state, ctx)


def _failing_members(exc: type[Exception]) -> list[Member]:
    members = _members(*_configs()[:2])
    for m in members:
        m.method.__class__ = type("Fails", (_PlanFails,), {"FAILS": exc})
    return members


def test_a_plan_that_raises_in_round_one_makes_only_its_sample_an_error_row(tmp_path):
    states, graded, *_ = _run(tmp_path / "a", "write_behind", False,
                              members=_failing_members(ZeroDivisionError))
    again, graded_again, *_ = _run(tmp_path / "b", "write_behind", True, seed=1,
                                   members=_failing_members(ZeroDivisionError))
    assert (again, graded_again) == (states, graded)
    errors = {row["sample_id"] for _, row in graded_again if row["n_errors"]}
    assert errors == {"q2"}
    assert "plan round 1: ZeroDivisionError" in next(
        row["detail"] for _, row in graded_again if row["sample_id"] == "q2")


def test_a_plan_that_stops_the_run_stops_it_and_keeps_the_answers_it_had(tmp_path):
    members = _failing_members(MethodArgsError)
    engine = ScriptedEngine("scripted", vary)
    cache = WriteBehind(GenerationCache(str(tmp_path)))
    driver = Driver(members, ShuffledClient(engine, 3), cache)
    with pytest.raises(MethodArgsError, match="plan exploded on q2"):
        driver.run_rows(driver.new_rows(SAMPLES))
    cache.flush(batch_end=True)
    # q2's three agent answers at least (its round ended before its next plan raised)
    kept = {r["key"] for r in _cache_rows(tmp_path)}
    assert len(kept) >= 3 and len(kept) <= engine.n_calls
