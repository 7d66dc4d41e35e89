"""``df-ray analyze --fresh``: the coordinator calls an analysis needs and the cache lacks,
made once, through the generation cache.

Only DarkForest-with-a-coordinator per agent subset asks for them, and lazily: a subset's
coordinator is called only on the test samples where its guardrail does not trust z*. The
requests are the ones the method plans (``SubsetEvaluator.coordinator_calls``), so a call
made here is the entry a real run of that subset would read, and a second analysis replays
it. The engine is the coordinator's backbone, started in this process as ``df_ray.evaluate``
starts engines (``make_engine``), only when a call is missing; answers go to the cache as they
are answered (one batch of the backbone's ``max_batch_size`` at a time, so an interrupted
analysis keeps what was answered); answers with an error are not cached and count as not
made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["FreshCalls"]


class FreshCalls:
    """Makes the missing calls of one pool configuration's coordinator (``make``)."""

    def __init__(self, cfg: Any, cache: Any, say: Callable[[str], None] = lambda m: None,
                 engines: dict[str, Any] | None = None) -> None:
        self.cfg = cfg
        self.cache = cache
        self.say = say
        self._engines = engines  # live engines by backbone (tests, library use); else started
        self._router: Any = None
        self._owned: list[Any] = []
        self.made = 0  # calls answered and cached
        self.failed = 0  # calls the engine answered with an error (not cached)

    def _client(self) -> Any:
        if self._router is None:
            from df_ray.engines import make_engine
            from df_ray.evaluation.api import EngineRouter

            engines = self._engines
            if engines is None:
                name = self.cfg.coordinator.backbone
                spec = self.cfg.backbones[name]
                self.say(f"--fresh: starting the coordinator's engine {name} "
                         f"({spec.kind}: {spec.model})")
                engines = {name: make_engine(spec)}
                self._owned = list(engines.values())
            self._router = EngineRouter(engines, retries=self.cfg.max_request_retries)
        return self._router

    def make(self, calls: Sequence[Any]) -> int:
        """Make ``calls`` (``Call`` objects) whose requests the cache lacks, once each; returns
        how many were made and cached."""
        todo: dict[str, Any] = {}
        for c in calls:
            k = c.request.key()
            if k not in todo and self.cache.get(k) is None:
                todo[k] = c.request
        if not todo:
            return 0
        requests = list(todo.values())
        self.say(f"--fresh: {len(requests)} coordinator call(s)")
        made = self.made
        client = self._client()
        step = max(1, int(getattr(self.cfg.backbones[self.cfg.coordinator.backbone],
                                  "max_batch_size", None) or 8))
        for i in range(0, len(requests), step):  # each batch cached as it returns
            chunk = requests[i:i + step]
            answers = client.generate(chunk)
            good = [(r, a) for r, a in zip(chunk, answers, strict=True) if a.error is None]
            self.failed += len(chunk) - len(good)
            if good:
                self.cache.put_many(good)
            self.made += len(good)
        return self.made - made

    def close(self) -> None:
        for e in self._owned:
            close = getattr(e, "close", None)
            if callable(close):
                close()
        self._owned = []
        self._router = None
