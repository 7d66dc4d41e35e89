"""A hung request fails alone, through real engine actors on a real local Ray: two stuck
requests among 40 are exactly two failed calls and 38 answers, with no replica restarted, on
the HTTP engine (a loopback server that hangs and trickles on purpose) and on the embedded
engine (real llama.cpp, SmolLM2-135M; its stuck requests would decode a context's worth of
tokens: ``ignore_eos`` and ``max_tokens`` past the context, with a timeout set from this
machine's measured speed far between what they would take and what the others need). A
replica that stops answering everything is restarted and its in-flight requests retried once
on the other replica."""

from __future__ import annotations

import pytest

from df_ray.engines import ChatRequest, Message, SamplingParams, make_spec
from df_ray.engines.base import REQUEST_TIMEOUT_ERROR
from df_ray.pipeline.engine_pool import CLIENT_CANCEL_TIMEOUTS, EnginePool
from tests.engines.misbehaving_server import MisbehavingServer

pytestmark = pytest.mark.slow


def ask(prompt: str, backbone: str, model: str, *, stuck: bool = False,
        tokens: int | None = None) -> ChatRequest:
    """An answered request (4 tokens), a stuck one (never stops before its context is full),
    or one of exactly ``tokens`` tokens."""
    if stuck or tokens is not None:
        sampling = SamplingParams(temperature=0.0, max_tokens=tokens or 100_000,
                                  ignore_eos=True)
    else:
        sampling = SamplingParams(temperature=0.0, max_tokens=4)
    return ChatRequest(model=model, messages=(Message("user", prompt),), sampling=sampling,
                       backbone=backbone)


def stats(pool: EnginePool, name: str) -> list[dict]:
    import ray

    return [ray.get(h.stats.remote()) for h in pool.handles[name]]


def check_two_failed_38_answered(pool: EnginePool, reqs: list[ChatRequest], stuck: set[int]):
    out = pool.client(retries=2).generate(reqs)
    failed = {i for i, c in enumerate(out) if c.error}
    assert failed == stuck, [out[i].error for i in failed]
    assert all(out[i].error.startswith(REQUEST_TIMEOUT_ERROR) for i in failed)
    assert sum(1 for c in out if c.error is None and c.text) == 38
    pool.supervisor.check()
    assert pool.supervisor.deaths == []  # the replica was never restarted
    (s,) = stats(pool, "b")
    assert s["served"] == 40 and s["failed"] == 2  # each request made once, on one life
    return out


def test_http_engine_two_hung_requests_fail_alone(ray_local):
    with MisbehavingServer() as server:
        pool = EnginePool({"b": make_spec(kind="openai", model="m", base_url=server.base_url,
                                          request_timeout_s=3, engine_args={"backoff_s": 0.01})})
        try:
            pool.wait_ready(120)
            stuck = {7: "hang", 23: "trickle"}
            reqs = [ask(f"{stuck[i]} {i}" if i in stuck else f"answer {i}", "b", "m")
                    for i in range(40)]
            check_two_failed_38_answered(pool, reqs, set(stuck))
            assert len(server.arrivals["hang 7"]) == len(server.arrivals["trickle 23"]) == 1
        finally:
            pool.shutdown()


#: The embedded engine's context per sequence: a stuck request decodes this many tokens, less
#: its prompt (about 40), before it would stop.
EMBEDDED_CTX = 4096


def embedded_speed(engine, model: str) -> tuple[float, float]:
    """(seconds a wave of 4 answered requests takes, seconds a decode step of 4 sequences
    takes) on the embedded engine, here and now (run in the engine's own process)."""
    import time

    def took(reqs: list[ChatRequest]) -> float:
        t = time.monotonic()
        engine.generate(reqs)
        return time.monotonic() - t

    wave = took([ask(f"Say one word about the letter {c}.", "b", model) for c in "PQRS"])
    steps = [took([ask(f"Count on from {100 * n + i}.", "b", model, tokens=n)
                   for i in range(4)]) for n in (4, 68)]
    return wave, (steps[1] - steps[0]) / 64


def embedded_timeout_s(model: str) -> float:
    """A request timeout the test's outcome does not depend on, from this machine's speed now.

    The answered requests (38, 4 at a time) must all come, and the stuck one sent later be
    cancelled, before the client gives up on them, `CLIENT_CANCEL_TIMEOUTS` timeouts after it
    sent them: the timeout must exceed ``lo``, their work over that many. A stuck request must
    still be decoding at its deadline: the timeout must stay under ``hi``, its context's decode
    steps (a step slows as the context fills). Their geometric mean leaves each side the same
    factor, ``sqrt(hi / lo)`` (about 7 on a 2-core machine, loaded or not: both scale with
    the load)."""
    from tests.engines.isolated import IsolatedEngine

    eng = IsolatedEngine(make_spec(kind="embedded", model=model, n_threads=1, n_ctx=256,
                                   engine_args={"n_parallel": 4}))
    try:
        wave_s, step_s = eng.run(embedded_speed, model)
    finally:
        eng.close()
    lo = 38 / 4 * wave_s / CLIENT_CANCEL_TIMEOUTS
    hi = (EMBEDDED_CTX - 64) * step_s
    assert hi >= 16 * lo, f"a wave of 4 answers takes {wave_s:.2f} s, a decode step " \
        f"{step_s * 1000:.1f} ms: no timeout here separates stuck requests from answered ones"
    return (lo * hi) ** 0.5


@pytest.mark.embedded
def test_embedded_engine_two_hung_requests_fail_alone(ray_local):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    model = "smollm2-135m-instruct"
    pool = EnginePool({"b": make_spec(kind="embedded", model=model, n_threads=1,
                                      n_ctx=EMBEDDED_CTX,
                                      request_timeout_s=embedded_timeout_s(model),
                                      engine_args={"n_parallel": 4})})
    try:
        pool.wait_ready(600)
        stuck = {7, 23}
        reqs = [ask(f"Say one word about the number {i}.", "b", model, stuck=i in stuck)
                for i in range(40)]
        out = check_two_failed_38_answered(pool, reqs, stuck)
        # the cancelled requests had been decoding: tokens spent, counted on the failed call
        assert all(out[i].completion_tokens > 0 for i in stuck)
    finally:
        pool.shutdown()


def test_a_replica_that_stops_answering_is_restarted_and_its_requests_retried_elsewhere(
        ray_local, tmp_path):
    # Whichever replica takes call 1 first sleeps on it in its only engine thread (a static
    # engine): it answers nothing more. After request_timeout_s and the grace it is killed,
    # and its requests go to the other replica, once.
    pool = EnginePool({"b": make_spec(kind="scripted", model="m", replicas=2, script="echo",
                                      request_timeout_s=3, max_batch_size=1,
                                      engine_args={"hang_on_call": 1, "hang_s": 600,
                                                   "fault_marker": str(tmp_path / "hung")})})
    try:
        pool.wait_ready(120)
        reqs = [ask(f"q{i}", "b", "m") for i in range(6)]
        out = pool.client(retries=1).generate(reqs)
        assert [c.text for c in out] == [f"q{i}" for i in range(6)]
        assert (tmp_path / "hung").exists()
    finally:
        pool.shutdown()


def test_a_replica_stuck_under_several_threads_of_one_client_is_restarted_once(
        ray_local, tmp_path):
    # A stage actor's batches share one client, each in its own thread. The only replica
    # hangs on its first call and answers nothing more: every thread sees its requests late
    # at about the same moment. One of them kills the replica; the others wait for the
    # restarted one instead of killing it again (which used to cost a second client's retries
    # and fail its requests).
    from concurrent.futures import ThreadPoolExecutor

    pool = EnginePool({"b": make_spec(kind="scripted", model="m", script="echo",
                                      request_timeout_s=3, max_batch_size=1,
                                      engine_args={"hang_on_call": 1, "hang_s": 600,
                                                   "fault_marker": str(tmp_path / "hung")})})
    try:
        pool.wait_ready(120)
        client = pool.client(retries=1)
        batches = [[ask(f"q{t}-{j}", "b", "m") for j in range(2)] for t in range(4)]
        with ThreadPoolExecutor(4) as ex:
            outs = list(ex.map(client.generate, batches))
        assert [[c.text for c in out] for out in outs] == [[r.messages[0].content for r in b]
                                                            for b in batches]
        assert (tmp_path / "hung").exists()
        pool.supervisor.check()
        assert len(pool.supervisor.lives()[("b", 0)]) == 2  # one restart, not one per thread
    finally:
        pool.shutdown()
