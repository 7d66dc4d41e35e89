"""PROTOTYPES of the proposed df_ray/pipeline patches, monkeypatched in by the perf scripts.

Not used by df_ray itself: the lead owns df_ray/pipeline/ and applies the real patches (the
report gives them as diffs). ``install()`` swaps them in on the driver; Ray pickles the classes
by reference (jobs.perf.patched.*), so the workers run them too. Returns an undo function.

1. CoalescingEngineActor: an async engine actor. Requests from every stage actor queue in the
   actor and are served as one engine batch of up to ``max_batch_size`` (what a continuous-
   batching engine wants), the engine runs in a worker thread, and ``count_tokens`` /
   ``stats`` answer at once instead of waiting behind a whole generate batch.
2. LazyRefreshCache / PatchedRoundStage: the cache directory is listed at most every
   ``REFRESH_INTERVAL_S`` seconds and only when a batch has a miss, instead of on every batch.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import asdict
from typing import Any

import ray

from df_ray.engines.base import ChatRequest
from df_ray.engines.spec import EngineSpec
from df_ray.pipeline.cache import GenerationCache
from df_ray.pipeline.stages import RoundStage

REFRESH_INTERVAL_S = 5.0


@ray.remote(max_restarts=-1, max_concurrency=1000)
class CoalescingEngineActor:
    """Hosts one engine replica; coalesces concurrent generate calls into engine batches."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from df_ray.engines import make_engine

        self.spec = EngineSpec.model_validate(spec)
        self.engine = make_engine(self.spec)
        self.served = 0
        self.engine_calls = 0
        self._pending: collections.deque = collections.deque()
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None

    async def generate(self, requests: list[dict]) -> list[dict]:
        loop = asyncio.get_running_loop()
        if self._wake is None:
            self._wake = asyncio.Event()
            self._worker = loop.create_task(self._serve())
        fut = loop.create_future()
        self._pending.append((requests, fut))
        self._wake.set()
        return await fut

    async def _serve(self) -> None:
        cap = max(1, self.spec.max_batch_size)
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                take, n = [], 0
                while self._pending and (not take or n + len(self._pending[0][0]) <= cap):
                    reqs, fut = self._pending.popleft()
                    take.append((reqs, fut))
                    n += len(reqs)
                batch = [ChatRequest.from_dict(d) for reqs, _ in take for d in reqs]
                try:
                    out = await asyncio.to_thread(self.engine.generate, batch)
                except Exception as e:  # an engine fault fails the callers of this batch
                    for _, fut in take:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                self.served += len(batch)
                self.engine_calls += 1
                i = 0
                for reqs, fut in take:
                    if not fut.done():
                        fut.set_result([asdict(c) for c in out[i:i + len(reqs)]])
                    i += len(reqs)

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return [int(self.engine.count_tokens(t)) for t in texts]

    async def stats(self) -> dict[str, Any]:
        return {"model": self.spec.model, "served": self.served,
                "engine_calls": self.engine_calls}


class LazyRefreshCache(GenerationCache):
    def refresh(self, force: bool = False) -> int:
        now = time.monotonic()
        if not force and now - getattr(self, "_listed_at", -1e9) < REFRESH_INTERVAL_S:
            return 0
        self._listed_at = now
        return super().refresh()


class PatchedRoundStage(RoundStage):
    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.cache.__class__ = LazyRefreshCache
        self.cache._listed_at = time.monotonic()


def install():
    import df_ray.pipeline.engine_pool as ep
    import df_ray.pipeline.stages as st

    saved = (ep.EngineActor, st.RoundStage)
    ep.EngineActor = CoalescingEngineActor
    st.RoundStage = PatchedRoundStage

    def undo() -> None:
        ep.EngineActor, st.RoundStage = saved

    return undo
