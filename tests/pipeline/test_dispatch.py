"""The engine client against real local Ray engine actors (scripted engines): each request
goes to the least loaded replica (a batch in chunks: `tests/pipeline/test_routing.py`), an
engine error fails only its request, a token count goes through the fault path, and a
request carries its backbone to the engine."""

from __future__ import annotations

import threading

import pytest

from df_ray.engines import ChatRequest, Message, SamplingParams
from df_ray.pipeline.engine_health import EngineFailure
from df_ray.pipeline.engine_pool import MIN_CHUNK, EnginePool

pytestmark = pytest.mark.slow


def req(prompt: str, backbone: str | None = "b", model: str = "m") -> ChatRequest:
    return ChatRequest(model=model, messages=(Message("user", prompt),),
                       sampling=SamplingParams(max_tokens=16), backbone=backbone)


def served(pool: EnginePool) -> list[int]:
    import ray

    return [ray.get(h.stats.remote())["served"] for h in pool.handles["b"]]


def test_least_outstanding_dispatch_avoids_the_slow_replica(pool_of, tmp_path):
    # Whichever replica serves the first request sleeps 20 s on it (the fault marker makes it
    # one replica only); the other answers at once. Ten single requests sent one after the
    # other meanwhile all go to the free replica: the slow one has a request outstanding.
    pool = pool_of(b={"model": "m", "replicas": 2, "script": "echo",
                      "engine_args": {"hang_on_call": 1, "hang_s": 20,
                                      "fault_marker": str(tmp_path / "hung")}})
    client = pool.client(retries=0)
    slow: dict = {}
    t = threading.Thread(target=lambda: slow.update(c=client.generate([req("slow")])[0]))
    t.start()
    while not (tmp_path / "hung").exists():  # its replica is sleeping on it
        t.join(0.01)
    slow_replica = client.outstanding()["b"].index(1)
    for i in range(10):
        (c,) = client.generate([req(f"q{i}")])
        assert c.error is None and c.text == f"q{i}"
    counts = served(pool)  # a replica counts a request once it has finished
    assert counts[1 - slow_replica] == 10
    assert counts[slow_replica] <= 1  # only the first (0 while it still sleeps on it)
    t.join(60)
    assert slow["c"].text == "slow"
    assert served(pool)[slow_replica] == 1


def test_an_engine_error_fails_only_its_request(pool_of):
    pool = pool_of(b={"model": "m", "script": "tests.pipeline.test_dispatch:explode_on_q3",
                      "max_batch_size": 8})
    client = pool.client(retries=1)
    out = client.generate([req(f"q{i}") for i in range(1, 6)])
    assert [c.text for c in out] == ["q1", "q2", "", "q4", "q5"]
    assert [c.error for c in out if c.error] == [
        "engine error: RuntimeError: responder exploded on q3"]


def explode_on_q3(request: ChatRequest) -> str:
    text = request.messages[-1].content
    if text == "q3":
        raise RuntimeError("responder exploded on q3")
    return text


@pytest.mark.parametrize("fault, cause", [
    ("raise", "a token count failed: df_ray.engines.scripted.InjectedFault: injected failure "
               "counting tokens"),
    ("exit", "a token count failed: "),
])
def test_a_token_count_that_keeps_failing_is_one_engine_failure_line(pool_of, fault, cause):
    pool = pool_of(b={"model": "m", "engine_args": {"count_fault": fault}, "max_restarts": 10})
    with pytest.raises(EngineFailure) as info:
        pool.client(retries=1).count_tokens("b", ["one two three"])
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("engine 'b' (model m), replica 0 on node ?: " + cause)
    assert msg.endswith("(2 attempts)")


def test_two_backbones_of_one_model_get_their_own_requests(pool_of):
    """Two backbones serve the same model and revision (say a long-context and a short
    copy): each request reaches the backbone its call is bound to, not the first of them."""
    pool = pool_of(short={"model": "m", "script": "constant:short"},
                   long={"model": "m", "script": "constant:long"})
    client = pool.client()
    out = client.generate([req("x", "long"), req("x", "short"), req("y", "long")])
    assert [c.text for c in out] == ["long", "short", "long"]
    with pytest.raises(KeyError, match="all serve model 'm'"):
        client.generate([req("x", backbone=None)])


def test_identical_concurrent_requests_are_generated_once(pool_of):
    pool = pool_of(b={"model": "m", "script": "echo", "engine_args": {"latency_s": 0.2}})
    client = pool.client()
    out = client.generate([req("same")] * 5 + [req("other")])
    assert [c.text for c in out] == ["same"] * 5 + ["other"]
    import ray

    stats = ray.get(pool.handles["b"][0].stats.remote())
    assert stats["served"] == 6 and stats["generated"] == 2 and stats["coalesced"] == 4


def test_answers_are_handed_on_as_they_come_not_when_the_round_ends(pool_of, tmp_path):
    # Two chunks of requests on two replicas; whichever replica takes its chunk first sleeps
    # 20 s on its first request (a static engine: its whole batch waits). The other chunk's
    # answers reach on_answer while the sleeping chunk is still outstanding (the driver caches
    # them then, so a kill does not lose them).
    pool = pool_of(b={"model": "m", "replicas": 2, "script": "echo",
                      "engine_args": {"hang_on_call": 1, "hang_s": 20,
                                      "fault_marker": str(tmp_path / "hung")}})
    client = pool.client(retries=0)
    n = 2 * MIN_CHUNK
    seen: list[tuple[int, str, int]] = []
    out = client.generate([req(f"q{i}") for i in range(n)], on_answer=lambda i, c: seen.append(
        (i, c.text, sum(client.outstanding()["b"]))))
    assert [c.text for c in out] == [f"q{i}" for i in range(n)]
    assert sorted(i for i, *_ in seen) == list(range(n))
    first = seen[:MIN_CHUNK]
    assert {i // MIN_CHUNK for i, *_ in first} in ({0}, {1})  # one chunk, whole
    assert all(text == f"q{i}" for i, text, _ in first)
    assert min(o for *_, o in first) >= MIN_CHUNK  # the other chunk was still running
    assert seen[-1][2] == 0
