"""A hung request fails alone: the engine cancels it at ``request_timeout_s`` and answers it
with one ``request_timeout`` failed call, its batch-mates answered and its replica untouched.
Against a real loopback HTTP server that hangs or trickles on purpose
(`tests.engines.misbehaving_server`); token counts from a server are validated; Retry-After is
honoured within its bound. The Ray and embedded (real llama.cpp) versions are in
tests/pipeline/test_hung_requests.py."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("httpx", reason="httpx is not installed (pip install 'df_ray[system]')")

from df_ray.engines import ChatRequest, Message, SamplingParams, make_engine, make_spec
from df_ray.engines.base import (
    INVALID_TOKENS_ERROR,
    REQUEST_TIMEOUT_ERROR,
    Completion,
    checked_tokens,
    repair_completion,
)
from df_ray.engines.batching import Replica
from df_ray.engines.openai_http import retry_after_s
from tests.engines.misbehaving_server import MisbehavingServer


def req(prompt: str) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", prompt),),
                       sampling=SamplingParams(max_tokens=16))


def engine(server: MisbehavingServer, timeout_s: float = 2.0, **args):
    return make_engine(make_spec(kind="openai", model="m", base_url=server.base_url,
                                 request_timeout_s=timeout_s,
                                 engine_args={"backoff_s": 0.01, **args}))


def stuck_among(n: int, stuck: dict[int, str]) -> list[ChatRequest]:
    return [req(f"{stuck[i]} {i}" if i in stuck else f"answer {i}") for i in range(n)]


def test_two_hung_requests_among_40_are_two_failed_calls_and_38_answers():
    # one never answers, one trickles a byte every half second (each read beats any read
    # timeout); both are cancelled at the 2 s deadline, alone
    with MisbehavingServer() as server:
        eng = engine(server, timeout_s=2.0)
        replica = Replica(eng, max_batch_size=8)
        assert replica.continuous  # each request is sent as it arrives
        reqs = stuck_among(40, {5: "hang", 30: "trickle"})
        t = time.monotonic()
        out = [f.result(timeout=60) for f in replica.submit(reqs)]
        took = time.monotonic() - t
        failed = {i: c.error for i, c in enumerate(out) if c.error}
        assert sorted(failed) == [5, 30]
        assert all(e.startswith(f"{REQUEST_TIMEOUT_ERROR}: no answer within request_timeout_s 2 s")
                   for e in failed.values())
        assert [c.text for i, c in enumerate(out) if i not in failed] == [
            f"answer {i}" for i in range(40) if i not in failed]
        # each was sent once (a timeout is final, not retried) and cancelled at its deadline
        assert len(server.arrivals["hang 5"]) == len(server.arrivals["trickle 30"]) == 1
        assert took < 30
        assert replica.stats()["failed"] == 2
        eng.close()


def test_impossible_token_counts_from_a_server_are_failed_calls():
    with MisbehavingServer() as server:
        eng = engine(server)
        out = eng.generate([req("negative one"), req("huge-tokens two"), req("fine three")])
        assert out[0].error == (f"{INVALID_TOKENS_ERROR}: the server at {server.base_url} "
                                "reported prompt_tokens -50 is negative")
        assert out[1].error.endswith("completion_tokens 1000000000000 is over 100,000,000 tokens")
        assert out[0].prompt_tokens == out[1].completion_tokens == 0
        assert out[2].error is None and out[2].text == "fine three"
        eng.close()


@pytest.mark.parametrize("value", [-1, 1.5, float("nan"), float("inf"), True, "7", None])
def test_checked_tokens_refuses_what_no_engine_can_have_counted(value):
    bad = checked_tokens(Completion("text", value, 3))
    assert bad.error.startswith(INVALID_TOKENS_ERROR) and bad.text == ""
    assert "prompt_tokens" in bad.error
    # the driver's engine boundary applies it too (served engines, the library path)
    assert repair_completion(Completion("t", 2, value))[0].error.startswith(INVALID_TOKENS_ERROR)
    ok = checked_tokens(Completion("text", 4.0, 3))
    assert ok.error is None and ok.prompt_tokens == 4 and type(ok.prompt_tokens) is int


def test_retry_after_is_waited_and_bounded():
    with MisbehavingServer() as server:
        eng = engine(server, timeout_s=30.0)
        (c,) = eng.generate([req("retry-after 1 a")])
        assert c.error is None
        first, second = server.arrivals["retry-after 1 a"]
        assert second - first >= 1.0  # what the server asked for, not the 0.01 s backoff
        eng.close()
        bounded = engine(server, timeout_s=30.0, max_retry_after_s=0.2)
        t = time.monotonic()
        (c,) = bounded.generate([req("retry-after 3600 b")])
        assert c.error is None and time.monotonic() - t < 10  # not an hour
        bounded.close()


def test_retry_after_forms():
    assert retry_after_s("2.5") == 2.5
    assert retry_after_s("-3") == 0.0
    assert retry_after_s("soon") is None and retry_after_s(None) is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    assert 50 < retry_after_s(time.strftime("%a, %d %b %Y %H:%M:%S GMT",
                                            time.gmtime(time.time() + 60))) <= 60
