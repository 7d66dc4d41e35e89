"""Request admission at an engine replica: each request goes to the engine as it arrives.

An engine replica (a job-owned engine actor or a Serve replica) hands every request to its
engine the moment it arrives and gets each answer back on its own, as it finishes:

- engines that batch continuously themselves implement ``submit(request) -> Future``: vLLM's
  async engine (its scheduler admits new sequences at every step), the embedded llama.cpp
  engine (its decode loop gives a free sequence slot to the next queued request between
  steps), the simulated continuous-batching engine of ``jobs/perf/simengine.py``;
- engines that only answer a whole batch at a time (``generate(batch)``: the scripted engine,
  the OpenAI-compatible HTTP client) get a :class:`StaticBatcher`: one engine thread merges
  whatever is waiting, up to the spec's batch size, into one ``generate`` call.

:class:`Replica` is what both kinds of replica hold: it also answers a request identical to
one in flight (or answered recently) without generating it again, and keeps the counters
that ``stats()`` reports (requests, tokens, the mean number of requests in the engine).

No Ray here: the replicas wrap this in an actor or a deployment.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from df_ray.engines.base import ChatRequest, Completion, checked_tokens

log = logging.getLogger(__name__)


def submits(engine: Any) -> bool:
    """Whether ``engine`` batches continuously (has its own ``submit``)."""
    return callable(getattr(engine, "submit", None))


def generate_by_submit(engine: Any, requests: Sequence[ChatRequest]) -> list[Completion]:
    """``generate(batch)`` for an engine that has ``submit``: every request submitted at once,
    the answers in order. The first request that raised raises (the others still finish)."""
    futs = [engine.submit(r) for r in requests]
    out: list[Completion] = []
    first: BaseException | None = None
    for f in futs:
        try:
            out.append(f.result())
        except BaseException as e:  # wait for the rest before raising
            first = first or e
    if first is not None:
        raise first
    return out


def admitted(inbox: queue.Queue, room: Callable[[], bool], idle: Callable[[], bool],
             prepare: Callable[[ChatRequest, Future], Any]) -> Iterator[Any]:
    """Continuous admission, as a continuous-batching loop does it before each step: the
    queued ``(request, future)`` pairs taken in while ``room()``, waiting for one only when
    ``idle()`` (nothing to step), a cancelled one skipped; each is what ``prepare(request,
    future)`` makes of it (an exception it raises fails that request alone)."""
    while room():
        try:
            request, fut = inbox.get(block=idle())
        except queue.Empty:
            return
        if not fut.set_running_or_notify_cancel():
            continue
        try:
            item = prepare(request, fut)
        except BaseException as e:
            fut.set_exception(e)
            continue
        yield item


class StaticBatcher:
    """``submit`` for an engine that only has ``generate(batch)`` (see the module docstring).

    A batch that raises is answered again one request at a time, so that only the request
    that fails gets the exception and its batch-mates get their answers. The engine is only
    ever touched by the engine thread (engines need not be thread-safe)."""

    def __init__(self, engine: Any, max_batch_size: int) -> None:
        self.engine = engine
        self.cap = max(1, int(max_batch_size))
        self._queue: queue.Queue = queue.Queue()
        self.batches = 0
        self.thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self.thread.start()

    def submit(self, request: ChatRequest) -> Future:
        f: Future = Future()
        self._queue.put(("generate", request, f))
        return f

    def count_tokens(self, texts: Sequence[str]) -> Future:
        f: Future = Future()
        self._queue.put(("count", list(texts), f))
        return f

    def _loop(self) -> None:
        held = None
        while True:
            job = held or self._queue.get()
            held = None
            if job[0] == "count":
                _settle(job[2], lambda t=job[1]: [int(self.engine.count_tokens(x)) for x in t])
                continue
            jobs = [job]
            while len(jobs) < self.cap:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt[0] != "generate":
                    held = nxt
                    break
                jobs.append(nxt)
            self.batches += 1
            try:
                out = self.engine.generate([r for _, r, _ in jobs])
                if len(out) != len(jobs):
                    raise RuntimeError(f"engine answered {len(out)} of {len(jobs)} requests")
            except BaseException as e:
                if len(jobs) == 1:
                    jobs[0][2].set_exception(e)
                    continue
                # One bad request must not sink its batch-mates: answer each alone.
                for _, r, f in jobs:
                    _settle(f, lambda r=r: _single(self.engine, r))
                continue
            for (_, _, f), c in zip(jobs, out, strict=True):
                f.set_result(c)


def _single(engine: Any, request: ChatRequest) -> Completion:
    out = engine.generate([request])
    if len(out) != 1:
        raise RuntimeError(f"engine answered {len(out)} completions for 1 request")
    return out[0]


def _settle(f: Future, fn: Callable[[], Any]) -> None:
    try:
        f.set_result(fn())
    except BaseException as e:
        f.set_exception(e)


#: Completions a replica remembers to answer repeated requests without generating them.
RECENT_CAPACITY = 16384


class Replica:
    """One replica's request handling (see the module docstring).

    ``submit(requests)`` gives one future per request: a request identical (by
    :meth:`ChatRequest.key`) to one in flight shares its future, one answered recently (an
    answer without error, of the last ``recent`` distinct requests) is answered at once;
    every other request goes to the engine as it arrives. A future that raises means the
    engine failed that request (the caller may retry it); an answer with ``error`` set is
    final (e.g. a prompt longer than the context)."""

    def __init__(self, engine: Any, max_batch_size: int, recent: int = RECENT_CAPACITY) -> None:
        self.engine = engine
        self.model = str(getattr(engine, "model", "?"))
        self.continuous = submits(engine)
        self.batcher = None if self.continuous else StaticBatcher(engine, max_batch_size)
        self._submit = engine.submit if self.continuous else self.batcher.submit
        self._lock = threading.Lock()
        self._counter = ThreadPoolExecutor(max_workers=2, thread_name_prefix="count-tokens")
        self._inflight: dict[str, Future] = {}
        self._recent: OrderedDict[str, Completion] = OrderedDict()
        self._recent_cap = max(0, int(recent))
        self.served = 0  # callers' requests finished (answered or failed), counted as they end
        self._waiting: dict[str, int] = {}  # callers of each request in flight
        self.generated = 0  # requests the engine answered
        self.coalesced = 0  # answered from an identical request in flight or recent
        self.failed = 0  # requests the engine raised on, or answered with an error
        self.tokens = 0  # prompt + completion tokens the engine generated
        self.completion_tokens = 0
        self.peak = 0  # most requests in the engine at once
        self._in_engine = 0
        self.first_at: float | None = None  # wall clock of the first request to the engine
        self.last_at: float | None = None  # ... and of the last answer it gave
        self._t0 = self._t_last = time.monotonic()
        self._area = 0.0  # integral of requests-in-engine over time

    # -- requests
    def submit(self, requests: Sequence[ChatRequest]) -> list[Future]:
        futs: list[Future] = []
        new: list[tuple[str, ChatRequest, Future]] = []
        with self._lock:
            for r in requests:
                k = r.key()
                hit = self._recent.get(k)
                if hit is not None:
                    f: Future = Future()
                    f.set_result(hit)
                    self.coalesced += 1
                    self.served += 1
                elif k in self._inflight:
                    f = self._inflight[k]
                    self.coalesced += 1
                    self._waiting[k] += 1
                else:
                    f = Future()
                    self._inflight[k] = f
                    self._waiting[k] = 1
                    new.append((k, r, f))
                futs.append(f)
            self._account(len(new))
            if new and self.first_at is None:
                self.first_at = time.time()
        for k, r, f in new:
            try:
                inner = self._submit(r)
            except BaseException as e:
                inner = Future()
                inner.set_exception(e)
            inner.add_done_callback(lambda inner, k=k, f=f: self._done(k, f, inner))
        return futs

    def _done(self, key: str, outer: Future, inner: Future) -> None:
        exc = inner.exception()
        result: Completion | None = None
        if exc is None:
            try:  # the engine boundary: an impossible token count is a failed call
                result = checked_tokens(inner.result(), f"engine {self.model!r}")
            except Exception as e:  # not a Completion at all
                exc = RuntimeError(f"engine answered {type(inner.result()).__name__}, not a "
                                   f"completion ({e})")
        with self._lock:
            self._inflight.pop(key, None)
            self.served += self._waiting.pop(key, 0)  # before any caller sees the answer
            self._account(-1)
            self.last_at = time.time()
            if result is not None:
                c: Completion = result
                self.generated += 1
                self.tokens += c.prompt_tokens + c.completion_tokens
                self.completion_tokens += c.completion_tokens
                if c.error is None and self._recent_cap:
                    self._recent[key] = c
                    if len(self._recent) > self._recent_cap:
                        self._recent.popitem(last=False)
                else:
                    self.failed += 1
            else:
                self.failed += 1
        if result is not None:
            outer.set_result(result)
        else:
            outer.set_exception(exc)

    def _account(self, delta: int) -> None:  # under the lock
        now = time.monotonic()
        self._area += self._in_engine * (now - self._t_last)
        self._t_last = now
        self._in_engine += delta
        self.peak = max(self.peak, self._in_engine)

    def count_tokens(self, texts: Sequence[str]) -> Future:
        """Token counts with the engine's tokenizer. A continuous engine and one whose
        tokenizer may run beside generation (``concurrent_tokenize``) count at once; others
        (their tokenizer is not safe beside the engine) on the engine thread."""
        if self.batcher is not None and not getattr(self.engine, "concurrent_tokenize", False):
            return self.batcher.count_tokens(texts)
        # On a thread of its own: the caller (an actor's event loop) is not held up.
        return self._counter.submit(lambda: [int(self.engine.count_tokens(t)) for t in texts])

    # -- state
    @property
    def alive(self) -> bool:
        """False once the engine thread (or the engine's own loop) has died."""
        if self.batcher is not None:
            return self.batcher.thread.is_alive()
        alive = getattr(self.engine, "alive", True)
        return bool(alive() if callable(alive) else alive)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            self._account(0)
            elapsed = self._t_last - self._t0
            batches = self.batcher.batches if self.batcher is not None else None
            return {"served": self.served, "generated": self.generated,
                    "coalesced": self.coalesced, "failed": self.failed, "tokens": self.tokens,
                    "completion_tokens": self.completion_tokens,
                    "in_engine": self._in_engine, "peak_in_engine": self.peak,
                    "mean_in_engine": self._area / elapsed if elapsed > 0 else 0.0,
                    "busy_area_s": self._area, "batches": batches,
                    "first_at": self.first_at, "last_at": self.last_at,
                    "continuous": self.continuous}
