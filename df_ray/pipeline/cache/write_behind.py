"""A stage's generation-cache writes, held and written together.

A stage actor runs many batches at once, each of two or more rounds; writing each round's
answers as its own cache part cost a Parquet file per batch and round (a seventh of the
stage's CPU per request on a simulated cluster). `WriteBehind` holds the answers of every
batch of the process (served to lookups meanwhile, as the cache would serve them) and
writes them as one part when a batch ends (``flush``: what every batch that ends meanwhile
holds goes in the same part, and a batch's call returns only once its answers are written),
at least every `FLUSH_S` seconds, and when the run is interrupted.

Answers their replica journaled before sending them (``journaled(key)``:
`df_ray.pipeline.cache.journal`) are written already: a batch's end whose held answers are
all journaled writes no part, and they go in the next part (`FLUSH_S` at most, an
interrupt, or a batch's end holding one that is not journaled), not one part per batch. A
Parquet part per batch was a quarter of a stage actor's CPU on a simulated cluster; a stage
lost meanwhile loses nothing, its answers are in the journals its run folds at its end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from df_ray.engines.base import ChatRequest, Completion, valid_text

#: Seconds answers may be held before they are written, whatever the batches do (the most a
#: killed stage loses, as a round's answers were held before).
FLUSH_S = 30.0


class WriteBehind:
    """The cache the driver sees (``__contains__``, ``get``, ``put_many``, ``sink``) over a
    `GenerationCache`; see the module docstring. ``on_interrupt(owner, flush)``: how to have
    ``flush`` called when the run is interrupted (``df_ray.pipeline.signals.on_interrupt``)."""

    def __init__(self, cache: Any,
                 on_interrupt: Callable[[Any, Callable[[], None]], None] | None = None,
                 journaled: set[str] | None = None) -> None:
        self.cache = cache
        self.journaled = journaled  # keys on disk in a journal (the engine client's set)
        self.pending: dict[str, tuple[ChatRequest, Completion]] = {}
        # held keys not journaled when they came (a batch's end must write those), noted
        # as each comes when there is a journal, so a batch's end costs nothing per held
        # answer
        self.unjournaled: set[str] = set()
        self.last = time.monotonic()
        self._lock = threading.Lock()
        self._writing = threading.Lock()
        if on_interrupt is not None:
            on_interrupt(self, self.flush)

    def __contains__(self, key: str) -> bool:
        return key in self.pending or key in self.cache

    def get(self, key: str) -> Completion | None:
        with self._lock:
            held = self.pending.get(key)
        if held is None:
            return self.cache.get(key)
        c = held[1]  # as the cache will serve it once written
        return Completion(valid_text(c.text), c.prompt_tokens, c.completion_tokens,
                          finish_reason=c.finish_reason)

    def put_many(self, items: Iterable[tuple[ChatRequest, Completion]]) -> None:
        with self._lock:
            for req, comp in items:
                if comp.error is None:
                    key = req.key()
                    if key not in self.pending:
                        self.pending[key] = (req, comp)
                        if self.journaled is not None and key not in self.journaled:
                            self.unjournaled.add(key)
        if time.monotonic() - self.last >= FLUSH_S:
            self.flush()

    def sink(self, requests: Sequence[ChatRequest]) -> _Sink:
        """What the driver hands each answer to as it comes (``add(i, completion)``)."""
        return _Sink(self, requests)

    def flush(self, batch_end: bool = False) -> None:
        """Write what is held as one part; returns once everything held when it was called
        is written (by this call or by one that was writing meanwhile), in a part or, at a
        ``batch_end``, in the journals (see the module docstring)."""
        with self._writing:
            with self._lock:
                items = dict(self.pending)
                if self.journaled is not None:  # a mark that came after its answer
                    self.unjournaled = {k for k in self.unjournaled if k not in self.journaled}
                unjournaled = bool(self.unjournaled)
            if (batch_end and self.journaled is not None
                    and time.monotonic() - self.last < FLUSH_S and not unjournaled):
                return
            if items:
                self.cache.put_many(items.values())
            with self._lock:
                for k in items:
                    self.pending.pop(k, None)
                    self.unjournaled.discard(k)
                if self.journaled is not None:  # only what is still held (never grows old)
                    self.journaled.intersection_update(self.pending)
            self.last = time.monotonic()


class _Sink:
    def __init__(self, owner: WriteBehind, requests: Sequence[ChatRequest]) -> None:
        self.owner, self.requests = owner, requests

    def add(self, i: int, completion: Completion) -> None:
        self.owner.put_many([(self.requests[i], completion)])

    def flush(self) -> None:
        """Held for the batch's end (``WriteBehind.flush``)."""
