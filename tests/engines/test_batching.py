"""A replica's request handling (`df_ray.engines.batching`), without Ray: callers merged into
a static engine's batches, identical requests coalesced, one request's failure kept to itself,
and a continuous engine's requests answered as they finish."""

from __future__ import annotations

import threading
import time

import pytest

from df_ray.engines.base import ChatRequest, Message, SamplingParams
from df_ray.engines.batching import Replica
from df_ray.engines.scripted import ScriptedEngine
from df_ray.engines.simulated import SimulatedEngine, draw_length, offline_time
from df_ray.engines.spec import make_spec


def req(text: str, seed: int = 0, model: str = "m", max_tokens: int = 512) -> ChatRequest:
    return ChatRequest(model=model, messages=(Message("user", text),), seed=seed,
                       sampling=SamplingParams(max_tokens=max_tokens))


class SlowEngine(ScriptedEngine):
    """Its first batch takes a second (and says when it started): callers queue meanwhile."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.busy = threading.Event()

    def generate(self, requests):
        if not self.busy.is_set():
            self.busy.set()
            time.sleep(1.0)
        return super().generate(requests)


def test_static_engine_merges_callers_and_coalesces_identical_requests():
    engine = SlowEngine("m", "echo")
    b = Replica(engine, max_batch_size=8)
    first = b.submit([req("warm-up")])  # occupies the engine while the others queue
    assert engine.busy.wait(30)
    results: dict[int, list] = {}

    def caller(i: int) -> None:
        futs = b.submit([req(f"q{i}"), req("shared")])
        results[i] = [f.result(timeout=30) for f in futs]

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert first[0].result(timeout=30).text == "warm-up"
    for i in range(4):
        assert [c.text for c in results[i]] == [f"q{i}", "shared"]
    # 1 + 4 distinct + 1 shared generated; the other 3 "shared" answered without generating
    assert b.generated == 6 and engine.n_calls == 6
    assert b.coalesced == 3 and b.served == 9
    assert engine.batches[0] == 1 and max(engine.batches) >= 2  # callers merged into batches
    assert sum(engine.batches) == 6
    # a repeat of a recent request is answered from memory
    (again,) = b.submit([req("q0")])
    assert again.result(timeout=5).text == "q0" and engine.n_calls == 6


def test_engine_errors_reach_every_sharer_and_are_not_remembered():
    class Broken(ScriptedEngine):
        fail = True

        def generate(self, requests):
            if self.fail:
                self.fail = False
                raise RuntimeError("engine crashed")
            return super().generate(requests)

    b = Replica(Broken("m", "echo"), max_batch_size=4)
    f, g = b.submit([req("x"), req("x")])
    with pytest.raises(RuntimeError, match="crashed"):
        f.result(timeout=10)
    with pytest.raises(RuntimeError, match="crashed"):
        g.result(timeout=10)
    (f,) = b.submit([req("x")])  # retried: generated, not a remembered failure
    assert f.result(timeout=10).text == "x"
    assert b.count_tokens(["a b c"]).result(timeout=10) == [3]


def test_a_request_that_raises_does_not_fail_its_batch_mates():
    def respond(r: ChatRequest) -> str:
        if r.messages[-1].content == "q3":
            raise RuntimeError("responder exploded on q3")
        return r.messages[-1].content

    engine = SlowEngine("m", respond)
    b = Replica(engine, max_batch_size=8)
    b.submit([req("warm-up")])
    assert engine.busy.wait(30)
    futs = b.submit([req(f"q{i}") for i in range(1, 6)])  # one batch behind the warm-up
    texts = []
    for f in futs:
        try:
            texts.append(f.result(timeout=30).text)
        except RuntimeError as e:
            texts.append(str(e))
    assert texts == ["q1", "q2", "responder exploded on q3", "q4", "q5"]
    assert 5 in engine.batches  # they were one batch, answered again one by one


def sim(**engine_args) -> SimulatedEngine:
    return SimulatedEngine(make_spec(kind="simulated", model="m", engine_args=engine_args))


def test_simulated_engine_admits_new_requests_while_a_long_one_runs():
    """A continuous engine: a request submitted while a long one decodes is admitted into a
    free slot at the next step and finishes first (shown by the order of completion)."""
    engine = sim(capacity=4, step_s=0.002, mean_tokens=40, sigma=0.0)
    replica = Replica(engine, max_batch_size=4)
    order: list[str] = []
    (long,) = replica.submit([req("long", max_tokens=10_000)])
    long.add_done_callback(lambda f: order.append("long"))
    while engine.steps == 0:  # it is decoding
        time.sleep(0.001)
    shorts = replica.submit([req(f"s{i}", max_tokens=25) for i in range(3)])
    for i, f in enumerate(shorts):
        f.add_done_callback(lambda f, i=i: order.append(f"s{i}"))
    assert [f.result(timeout=30).completion_tokens for f in shorts] == [25, 25, 25]
    assert long.result(timeout=30).completion_tokens == 40
    assert order[-1] == "long" and sorted(order[:3]) == ["s0", "s1", "s2"]
    assert engine.lengths == [40, 25, 25, 25]
    stats = replica.stats()
    assert stats["peak_in_engine"] == 4 and stats["continuous"]


def test_simulated_lengths_are_long_tailed_per_request_and_bounded():
    lengths = [draw_length(req(f"q{i}"), 70.0, 1.0) for i in range(2000)]
    assert lengths == [draw_length(req(f"q{i}"), 70.0, 1.0) for i in range(2000)]
    mean = sum(lengths) / len(lengths)
    assert 60 < mean < 80
    assert max(lengths) > 4 * mean  # a long tail
    assert draw_length(req("x", max_tokens=5), 70.0, 1.0) <= 5


def test_offline_time_is_continuous_batching_over_the_lengths():
    # capacity 2: [10, 1, 1, 1] -> steps: 1 (10 & 1), 1 (9 & 1), 1 (8 & 1), then 7 more
    assert offline_time([10, 1, 1, 1], capacity=2, step_s=1.0) == 10
    # a static batch of 2 would take 10 + 1 = 11 steps; one sequence at a time 13
    assert offline_time([5, 5, 5, 5], capacity=4, step_s=0.5) == 2.5


def test_simulated_engine_rejects_unknown_arguments():
    with pytest.raises(ValueError, match="unknown engine_args"):
        sim(capcity=4)


class GatedEngine(ScriptedEngine):
    """Answers only once ``gate`` is set (says when a batch has started)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.busy, self.gate = threading.Event(), threading.Event()

    def generate(self, requests):
        self.busy.set()
        assert self.gate.wait(30)
        return super().generate(requests)


def test_served_counts_the_calls_that_finished_not_those_submitted():
    engine = GatedEngine("m", "echo")
    b = Replica(engine, max_batch_size=8)
    futs = b.submit([req("a"), req("b"), req("a")])  # "a" twice: one generation, two callers
    assert engine.busy.wait(30)
    assert b.stats()["served"] == 0  # in flight: nothing served yet
    engine.gate.set()
    assert [f.result(timeout=30).text for f in futs] == ["a", "b", "a"]
    assert b.stats()["served"] == 3 and b.coalesced == 1
    b.submit([req("a")])[0].result(timeout=30)  # a recent answer: served at once
    assert b.stats()["served"] == 4
