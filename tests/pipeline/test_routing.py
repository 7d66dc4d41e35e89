"""How the engine client spreads requests over a backbone's replicas: a batch goes to as few
replicas as keep the load balanced (chunks of at least ``MIN_CHUNK``), so it costs few actor
calls; the balance holds over many batches in flight at once; a replica that is down gets
nothing and its requests go to the others. The placement itself on a client without Ray, the
effects on real local Ray with scripted replicas."""

from __future__ import annotations

import pytest

from df_ray.engines import ChatRequest, Message, SamplingParams, make_spec
from df_ray.pipeline import engine_mux
from df_ray.pipeline.engine_pool import MIN_CHUNK, EngineClient, EnginePool


def req(prompt: str) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", prompt),),
                       sampling=SamplingParams(max_tokens=16), backbone="b")


def offline_client(replicas: int) -> EngineClient:
    spec = make_spec(kind="scripted", model="m", replicas=replicas)
    return EngineClient({"b": [None] * replicas}, {"b": spec})  # placement needs no handle


def test_a_flight_is_split_into_chunks_of_at_least_min_chunk():
    client = offline_client(4)
    for n, chunks in [(1, 1), (MIN_CHUNK, 1), (2 * MIN_CHUNK - 1, 1), (2 * MIN_CHUNK, 2),
                      (3 * MIN_CHUNK + 5, 3), (4 * MIN_CHUNK, 4), (10 * MIN_CHUNK, 4)]:
        where = client._assign("b", n)
        assert len(where) == chunks, n
        assert len({k for k, _ in where}) == chunks  # each chunk on its own replica
        assert sum(size for _, size in where) == n
        assert min(size for _, size in where) >= min(n, MIN_CHUNK)
        for k, size in where:  # answered: the load is back to nothing
            client._load["b"][k] -= size
    assert client.outstanding() == {"b": [0, 0, 0, 0]}


def test_many_flights_in_flight_at_once_stay_balanced():
    """A stage's batches share one client: every flight placed (none answered yet) leaves
    the replicas within one chunk of each other, whatever the sizes."""
    client = offline_client(4)
    sizes = [16, 5, 40, 16, 64, 3, 16, 33, 1, 16, 100, 7] * 10
    biggest = 0
    for n in sizes:
        where = client._assign("b", n)
        biggest = max(biggest, *(size for _, size in where))
        load = client.outstanding()["b"]
        assert max(load) - min(load) <= biggest
    assert sum(client.outstanding()["b"]) == sum(sizes)
    assert min(client.outstanding()["b"]) > 0.9 * sum(sizes) / 4


def test_down_and_avoided_replicas_get_nothing_while_others_are_up():
    client = offline_client(3)
    client._mark_down("b", 1, "gone")
    for _ in range(20):
        assert {k for k, _ in client._assign("b", 3 * MIN_CHUNK)} <= {0, 2}
        assert {k for k, _ in client._assign("b", MIN_CHUNK, {("b", 0)})} == {2}
    assert client.outstanding()["b"][1] == 0 and min(client.outstanding()["b"][::2]) > 0
    client._mark_down("b", 2, "gone")
    assert client._assign("b", 40, {("b", 0)}) == [(0, 40)]  # the only one left
    client._mark_down("b", 0, "gone")
    assert client._assign("b", 1) is None  # none up: the request waits


# -- on real local Ray

def served(pool: EnginePool, replicas: range | list[int]) -> list[int]:
    import ray

    return [ray.get(pool.handles["b"][k].stats.remote())["served"] for k in replicas]


@pytest.mark.slow
def test_a_batch_goes_to_as_few_replicas_as_keep_the_balance(pool_of, monkeypatch):
    pool = pool_of(b={"model": "m", "replicas": 4, "script": "echo"})
    submits: list[int] = []  # requests per EngineActor.submit the pump makes
    real = engine_mux.Mux._submit

    def counted(self, key, handle, gens):
        submits.append(sum(len(p) for _, p in gens))
        return real(self, key, handle, gens)

    monkeypatch.setattr(engine_mux.Mux, "_submit", counted)
    client = pool.client()
    asked = 0

    def run(n: int) -> list[int]:
        """What each replica served of ``n`` requests (each asked once)."""
        nonlocal asked
        before = served(pool, range(4))
        prompts = [f"q{asked + j}" for j in range(n)]
        asked += n
        del submits[:]
        assert [c.text for c in client.generate([req(p) for p in prompts])] == prompts
        return [a - b for a, b in zip(served(pool, range(4)), before, strict=True)]

    one = run(MIN_CHUNK)  # one replica, one submit
    assert sorted(one) == [0, 0, 0, MIN_CHUNK] and submits == [MIN_CHUNK]
    assert run(4 * MIN_CHUNK) == [MIN_CHUNK] * 4 and submits == [MIN_CHUNK] * 4
    two = run(2 * MIN_CHUNK + 8)
    assert sorted(two) == [0, 0, MIN_CHUNK + 4, MIN_CHUNK + 4] and len(submits) == 2
    # batch after batch (each answered before the next): every replica in turn
    spread = [0] * 4
    for _ in range(8):
        spread = [a + b for a, b in zip(spread, run(MIN_CHUNK), strict=True)]
        assert len(submits) == 1
    assert spread == [2 * MIN_CHUNK] * 4


@pytest.mark.slow
def test_a_down_replicas_requests_go_to_the_others(pool_of):
    import ray

    pool = pool_of(b={"model": "m", "replicas": 3, "script": "echo"})
    ray.kill(pool.handles["b"][0], no_restart=True)
    client = pool.client(retries=1)
    prompts = [f"q{j}" for j in range(3 * MIN_CHUNK)]
    out = client.generate([req(p) for p in prompts])
    assert [c.text for c in out] == prompts and not any(c.error for c in out)
    assert sum(served(pool, [1, 2])) == 3 * MIN_CHUNK  # replica 0's chunk went elsewhere
    assert ("b", 0) in client._down
    again = [f"r{j}" for j in range(3 * MIN_CHUNK)]
    before = served(pool, [1, 2])
    assert [c.text for c in client.generate([req(p) for p in again])] == again
    after = served(pool, [1, 2])
    assert [a - b for a, b in zip(after, before, strict=True)] == [3 * MIN_CHUNK // 2] * 2
