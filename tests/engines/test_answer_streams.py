"""A replica's answer streams (df_ray.pipeline.answer_streams): each client's answers come
on its own stream, tagged, several per yield, every request answered once; answers that
trickle in are gathered until there are enough for a yield, the last at once; a stream with
nothing outstanding ends, and answers submitted after it ended wait for the next one."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

from df_ray.engines import ChatRequest, Completion, Message, make_engine
from df_ray.engines.batching import Replica
from df_ray.pipeline.answer_streams import AnswerStreams


def items(n: int, base: int) -> list[tuple[int, dict, str]]:
    out = []
    for i in range(n):
        r = ChatRequest(model="sim", messages=(Message("user", f"Question {base + i}?"),),
                        seed=base + i)
        out.append((base + i, r.to_dict(), r.key()))
    return out


def test_each_session_gets_its_own_answers_in_few_yields():
    engine = make_engine({"kind": "simulated", "model": "sim", "engine_args": {
        "capacity": 64, "step_s": 0.002, "mean_tokens": 20, "sigma": 0.0}})
    streams = AnswerStreams(Replica(engine, 64))

    async def client(sid: str, base: int) -> list[list[tuple[int, dict]]]:
        streams.submit(sid, items(40, base))
        got = []
        async for out in streams.stream(sid, coalesce_s=0.01, idle_s=0.2):
            got.append(out)
        return got

    async def both():
        return await asyncio.gather(client("a", 0), client("b", 1000))

    a, b = asyncio.run(both())
    for got, base in ((a, 0), (b, 1000)):
        tags = [t for out in got for t, _ in out]
        assert sorted(tags) == list(range(base, base + 40))
        assert all("text" in d and "failed" not in d for out in got for _, d in out)
        assert len(got) < 40  # several answers per yield (equal lengths: they finish together)
    assert streams.sessions == {}  # both ended idle


def test_answers_submitted_after_a_stream_ended_wait_for_the_next():
    engine = make_engine({"kind": "simulated", "model": "sim", "engine_args": {
        "capacity": 8, "step_s": 0.001, "mean_tokens": 5}})
    streams = AnswerStreams(Replica(engine, 8))

    async def run():
        first = [out async for out in streams.stream("s", idle_s=0.05)]
        streams.submit("s", items(3, 0))
        second = [out async for out in streams.stream("s", idle_s=0.2)]
        return first, second

    first, second = asyncio.run(run())
    assert first == []
    assert sorted(t for out in second for t, _ in out) == [0, 1, 2]


class ByHand:
    """A continuous engine whose answers the test gives, one at a time."""

    model = "by-hand"

    def __init__(self) -> None:
        self.futures: list[Future] = []

    def submit(self, request: ChatRequest) -> Future:
        f: Future = Future()
        self.futures.append(f)
        return f


def test_a_trickle_of_answers_is_gathered_until_a_yield_is_full_the_last_at_once():
    engine = ByHand()
    streams = AnswerStreams(Replica(engine, 64))
    fill = 4

    async def run() -> list[list[int]]:
        streams.submit("s", items(10, 0))

        async def trickle() -> None:
            for f in list(engine.futures):
                await asyncio.sleep(0.02)  # one answer per few of coalesce_s
                f.set_result(Completion("x", 1, 1))

        task = asyncio.create_task(trickle())
        got = [[t for t, _ in out] async for out in streams.stream(
            "s", coalesce_s=0.005, idle_s=0.2, fill=fill, most_s=60.0)]
        await task
        return got

    got = asyncio.run(run())
    assert sorted(t for out in got for t in out) == list(range(10))
    # every yield waited for a full one (never most_s: 60 s), but the last: nothing was left
    assert all(len(out) >= fill for out in got[:-1]) and len(got) <= 10 // fill + 1
