"""One process's traffic to the engine replicas, for all its threads at once.

A stage actor runs many batches at once, each in its own thread with its own
`EngineClient._serve` loop. Were each to make its own actor calls, every batch would cost
an actor call per replica and a streamed Ray object per answer or two (each answer of a
batch finishes at its own engine step): most of the stage's and the engines' CPU per
request. Instead one pump per client holds, per replica, one answer stream
(``EngineActor.answers``, `df_ray.pipeline.answer_streams`) and sends every thread's
requests for that replica in one ``submit``; answers come back a few engine steps' worth per
Ray object and are handed to each thread's inbox.

The pump is an asyncio event loop in a thread of its own, woken only by work: a thread's
``send`` schedules one pass, `SEND_GATHER_S` later, over what every thread queued meanwhile
(one submit per replica per pass), and each stream's next item, each submit and each single
call are awaited as Ray objects. It never polls: an idle pump costs nothing, a busy one
only what it moves (the earlier pump woke every 10 ms to ``ray.wait`` on every stream).

A thread sees what it saw before, per flight (the requests it sent one replica at once):
``("answers", fid, [(position, value), ...])`` as they come, or ``("error", fid,
exception)`` when the replica's stream, submit or call raised (Ray's ``RayActorError`` for a
replica that is gone, ``RayTaskError`` for one that raised), for every request of the
flight still unanswered. Token counts go through the pump too: every thread's texts for a
replica in one pass, one actor call.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

Key = tuple[str, int]  # (backbone, replica)

#: Seconds a pass waits after the first flight queued for it, so the flights other threads
#: queue meanwhile go in the same submits: an actor call costs each side about 0.7 CPU-ms
#: whatever it carries (`jobs/perf/engine_costs.py`), and 5 ms is nothing beside an answer's
#: seconds.
SEND_GATHER_S = 0.005


@dataclass
class _Flight:
    inbox: queue.SimpleQueue
    key: Key
    tags: list[int] = field(default_factory=list)


@dataclass
class _Stream:
    gen: Any  # the ObjectRefGenerator of EngineActor.answers
    sid: str
    tags: dict[int, tuple[int, int]] = field(default_factory=dict)  # tag -> (fid, position)


class Mux:
    """The pump (see the module docstring); ``handles`` as the client's."""

    def __init__(self, handles: Mapping[str, Sequence[Any]],
                 journal: tuple[str, str] | None = None) -> None:
        self.handles = handles
        #: where the replicas journal this process's answers (`df_ray.pipeline.cache.journal`)
        self.journal = journal
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._outbox: dict[Key, list[tuple[int, str, Any]]] = {}  # key -> (fid, method, payload)
        self._flights: dict[int, _Flight] = {}
        self._streams: dict[Key, _Stream] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._kicked = False  # a pass over the outbox is scheduled
        self._tasks: set[asyncio.Task] = set()  # the loop keeps only weak references

    # -- the threads' side
    def send(self, inbox: queue.SimpleQueue, key: Key, method: str, payload: Any) -> int:
        """Queue a flight: ``method`` "generate" with a list of (request dict, key), or a
        replica method called once with ``payload``; returns its id."""
        with self._lock:
            fid = next(self._ids)
            self._flights[fid] = _Flight(inbox, key)
            self._outbox.setdefault(key, []).append((fid, method, payload))
            loop = self._running_loop()
            kick, self._kicked = not self._kicked, True
        if kick:  # one pass for every flight queued before it runs
            loop.call_soon_threadsafe(loop.call_later, SEND_GATHER_S, self._send_outbox)
        return fid

    def forget(self, fid: int) -> None:
        """The flight is over for its thread: answers still to come for it are dropped."""
        with self._lock:
            f = self._flights.pop(fid, None)
            s = self._streams.get(f.key) if f is not None else None
            if s is not None:
                for t in f.tags:
                    s.tags.pop(t, None)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The pump's loop, started with its thread on first use (under ``_lock``)."""
        if self._thread is None or not self._thread.is_alive():
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever,
                                            name="df-ray-engine-mux", daemon=True)
            self._thread.start()
        assert self._loop is not None
        return self._loop

    # -- the pump (every method below runs in the loop's thread)
    def _spawn(self, coro: Coroutine) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _send_outbox(self) -> None:
        with self._lock:
            outbox, self._outbox, self._kicked = self._outbox, {}, False
        for key, items in outbox.items():
            try:
                handle = self.handles[key[0]][key[1]]
                gens = [(fid, p) for fid, m, p in items if m == "generate"]
                counts = [(fid, p) for fid, m, p in items if m == "count_tokens"]
                for fid, method, payload in items:
                    if method not in ("generate", "count_tokens"):
                        self._spawn(self._call(getattr(handle, method).remote(payload), fid))
                if counts:  # every thread's texts in one call
                    texts = [t for _, p in counts for t in p]
                    self._spawn(self._counted(handle.count_tokens.remote(texts), counts))
                if gens:
                    self._submit(key, handle, gens)
            except Exception as e:  # a bug or a handle that cannot be called: each flight
                log.exception("engine mux: sending to %s/%d failed", *key)  # says so
                for fid, _, _ in items:
                    self._post(fid, ("error", fid, e))

    def _submit(self, key: Key, handle: Any, gens: list[tuple[int, list[dict]]]) -> None:
        with self._lock:
            s = self._streams.get(key)
            if s is None:
                sid = uuid.uuid4().hex
                s = self._streams[key] = _Stream(handle.answers.remote(sid), sid)
                self._spawn(self._drain(key, s))
            batch = []
            for fid, payloads in gens:
                f = self._flights.get(fid)
                if f is None:
                    continue
                for pos, (d, rkey) in enumerate(payloads):
                    tag = next(self._ids)
                    s.tags[tag] = (fid, pos)
                    f.tags.append(tag)
                    batch.append((tag, d, rkey))
        self._spawn(self._submitted(handle.submit.remote(s.sid, batch, self.journal), key, s))

    async def _submitted(self, ref: Any, key: Key, s: _Stream) -> None:
        try:
            await ref
        except Exception as e:  # the replica's stream fails with it
            self._fail_stream(key, s, e)

    async def _call(self, ref: Any, fid: int) -> None:
        try:
            value = await ref
        except Exception as e:
            self._post(fid, ("error", fid, e))
            return
        self._post(fid, ("answers", fid, [(0, value)]))
        with self._lock:
            self._flights.pop(fid, None)

    async def _counted(self, ref: Any, counts: list[tuple[int, list[str]]]) -> None:
        """One ``count_tokens`` call for several flights' texts: each flight its own."""
        try:
            values = list(await ref)
        except Exception as e:
            for fid, _ in counts:
                self._post(fid, ("error", fid, e))
            return
        at = 0
        for fid, texts in counts:
            self._post(fid, ("answers", fid, [(0, values[at:at + len(texts)])]))
            at += len(texts)
            with self._lock:
                self._flights.pop(fid, None)

    async def _drain(self, key: Key, s: _Stream) -> None:
        """Hand each item of the replica's stream to its flights; when the stream ends idle,
        reopen it (same session) if answers are still due."""
        while True:
            try:
                async for ref in s.gen:
                    self._deliver(s, await ref)
            except Exception as e:
                self._fail_stream(key, s, e)
                return
            with self._lock:
                if self._streams.get(key) is not s:
                    return  # failed meanwhile (a submit raised)
                if not s.tags:
                    del self._streams[key]
                    return
                s.gen = self.handles[key[0]][key[1]].answers.remote(s.sid)

    def _deliver(self, s: _Stream, answers: list[tuple[int, Any]]) -> None:
        out: dict[int, list[tuple[int, Any]]] = {}
        with self._lock:
            for tag, value in answers:
                where = s.tags.pop(tag, None)
                if where is not None:
                    out.setdefault(where[0], []).append((where[1], value))
        for fid, vals in out.items():
            self._post(fid, ("answers", fid, vals))

    def _fail_stream(self, key: Key, s: _Stream, e: Exception) -> None:
        """The replica's stream (or a submit to it) raised: every flight it still owes
        answers gets the error; the next submit opens a new stream."""
        with self._lock:
            if self._streams.get(key) is s:
                del self._streams[key]
            fids = {fid for fid, _ in s.tags.values()}
            s.tags.clear()
        for fid in fids:
            self._post(fid, ("error", fid, e))

    def _post(self, fid: int, message: tuple) -> None:
        with self._lock:
            f = self._flights.get(fid)
            if f is not None and message[0] == "error":
                del self._flights[fid]
        if f is not None:
            f.inbox.put(message)
