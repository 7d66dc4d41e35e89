"""Token counts for a disclosure: in the stage's own process where the engine kind offers a
local counter (no actor call), on a replica otherwise, with every thread's texts for a
replica in one call."""

from __future__ import annotations

import queue
import threading

from df_ray.config import RunConfig
from df_ray.engines.simulated import SimulatedEngine
from df_ray.engines.spec import engine_targets
from df_ray.pipeline.engine_mux import Mux
from df_ray.pipeline.stages import token_counter


def _cfg(kind: str) -> RunConfig:
    return RunConfig.model_validate({
        "name": "t", "benchmark": "mmlu_pro", "method": "darkforest",
        "backbones": {"b": {"kind": kind, "model": "m"}},
        "agents": [{"id": "a1", "backbone": "b"}],
        "coordinator": {"id": "c", "backbone": "b"}})


class Counting:
    """A client that records each remote count it is asked for."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, list[str]]] = []

    def count_tokens(self, backbone: str, texts: list[str]) -> list[int]:
        self.asked.append((backbone, list(texts)))
        return [100 + len(t) for t in texts]


def test_a_simulated_backbone_counts_in_process_as_its_engine_does():
    cfg, client = _cfg("simulated"), Counting()
    count = token_counter(cfg, client, engine_targets(cfg.backbones.values()))
    text = "three short words\nand two"
    assert count("c", text) == SimulatedEngine.count_tokens(None, text) == 5
    assert client.asked == []


def test_a_backbone_without_a_local_counter_counts_on_its_replica():
    cfg, client = _cfg("scripted"), Counting()
    count = token_counter(cfg, client, engine_targets(cfg.backbones.values()))
    assert count("c", "abc") == 103
    assert count("c", "abc") == 103  # memoised
    assert client.asked == [("b", ["abc"])]


class Handle:
    """A replica handle whose count_tokens is called through `.remote` (the mux awaits what
    it returns: a finished future stands in for the Ray object)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        outer = self

        class _Method:
            def remote(self, texts):
                import asyncio

                outer.calls.append(list(texts))
                f = asyncio.get_running_loop().create_future()
                f.set_result([len(t) for t in texts])
                return f

        self.count_tokens = _Method()


def test_the_pump_sends_every_flights_texts_to_a_replica_in_one_call():
    h = Handle()
    mux = Mux({"b": [h]})
    inboxes = [queue.SimpleQueue() for _ in range(3)]
    texts = [["a", "bb"], ["ccc"], ["dddd", "e", "ff"]]
    hold = threading.Event()
    with mux._lock:
        loop = mux._running_loop()
    loop.call_soon_threadsafe(hold.wait)  # the pump waits until all three are queued
    fids = [mux.send(q, ("b", 0), "count_tokens", t) for q, t in zip(inboxes, texts, strict=True)]
    hold.set()
    got = [q.get(timeout=10) for q in inboxes]
    assert h.calls == [["a", "bb", "ccc", "dddd", "e", "ff"]]
    assert got == [("answers", fid, [(0, [len(x) for x in t])])
                   for fid, t in zip(fids, texts, strict=True)]
