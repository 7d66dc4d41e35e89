"""One process's traffic to the engine replicas, for all its threads at once.

A stage actor runs many batches at once, each in its own thread with its own
`EngineClient._serve` loop. Were each to make its own actor calls, every batch would cost
an actor call per replica and a streamed Ray object per answer or two (each answer of a
batch finishes at its own engine step): most of the stage's and the engines' CPU per
request. Instead one pump thread per client holds, per replica, one answer stream
(``EngineActor.answers``, `df_ray.pipeline.answer_streams`) and sends every thread's
requests for that replica in one ``submit`` per pump turn (`TURN_S`); answers come back a
few engine steps' worth per Ray object and are handed to each thread's inbox.

A thread sees what it saw before, per flight (the requests it sent one replica at once):
``("answers", fid, [(position, value), ...])`` as they come, or ``("error", fid,
exception)`` when the replica's stream, submit or call raised (Ray's ``RayActorError`` for a
replica that is gone, ``RayTaskError`` for one that raised), for every request of the
flight still unanswered. Token counts go through the pump too, one actor call each.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray

log = logging.getLogger(__name__)

#: Seconds the pump waits for answers in one turn, and so at most before it sends what the
#: threads gave it meanwhile (one submit per replica per turn).
TURN_S = 0.01

Key = tuple[str, int]  # (backbone, replica)


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
        self._wake = threading.Event()
        self._ids = itertools.count()
        self._outbox: dict[Key, list[tuple[int, str, Any]]] = {}  # key -> (fid, method, payload)
        self._flights: dict[int, _Flight] = {}
        self._streams: dict[Key, _Stream] = {}
        self._calls: dict[Any, tuple[int, Key]] = {}  # submit or single-call ref -> fid / key
        self._thread: threading.Thread | None = None

    # -- the threads' side
    def send(self, inbox: queue.SimpleQueue, key: Key, method: str, payload: Any) -> int:
        """Queue a flight: ``method`` "generate" with a list of (request dict, key), or a
        replica method called once with ``payload``; returns its id."""
        with self._lock:
            fid = next(self._ids)
            self._flights[fid] = _Flight(inbox, key)
            self._outbox.setdefault(key, []).append((fid, method, payload))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="df-ray-engine-mux",
                                                daemon=True)
                self._thread.start()
        self._wake.set()
        return fid

    def forget(self, fid: int) -> None:
        """The flight is over for its thread: answers still to come for it are dropped."""
        with self._lock:
            f = self._flights.pop(fid, None)
            s = self._streams.get(f.key) if f is not None else None
            if s is not None:
                for t in f.tags:
                    s.tags.pop(t, None)

    # -- the pump
    def _run(self) -> None:
        while True:
            try:
                self._turn()
            except Exception:  # a bug here must not strand every thread: say it, go on
                log.exception("engine mux: a turn failed")

    def _turn(self) -> None:
        self._send_outbox()
        with self._lock:
            waits = [s.gen for s in self._streams.values()] + list(self._calls)
        if not waits:
            self._wake.wait(1.0)
            self._wake.clear()
            return
        ready, rest = ray.wait(waits, num_returns=1, timeout=TURN_S)
        if ready and rest:
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        for w in ready:
            if w in self._calls:
                self._call_done(w)
            else:
                self._stream_item(w)

    def _send_outbox(self) -> None:
        with self._lock:
            outbox, self._outbox = self._outbox, {}
        for key, items in outbox.items():
            handle = self.handles[key[0]][key[1]]
            gens = [(fid, p) for fid, m, p in items if m == "generate"]
            for fid, method, payload in items:
                if method != "generate":
                    self._calls[getattr(handle, method).remote(payload)] = (fid, key)
            if gens:
                self._submit(key, handle, gens)

    def _submit(self, key: Key, handle: Any, gens: list[tuple[int, list[dict]]]) -> None:
        with self._lock:
            s = self._streams.get(key)
            if s is None:
                sid = uuid.uuid4().hex
                s = self._streams[key] = _Stream(handle.answers.remote(sid), sid)
            batch = []
            for fid, payloads in gens:
                f = self._flights.get(fid)
                if f is None:
                    continue
                for pos, (d, key) in enumerate(payloads):
                    tag = next(self._ids)
                    s.tags[tag] = (fid, pos)
                    f.tags.append(tag)
                    batch.append((tag, d, key))
        self._calls[handle.submit.remote(s.sid, batch, self.journal)] = (-1, key)

    def _call_done(self, ref: Any) -> None:
        fid, key = self._calls.pop(ref)
        try:
            value = ray.get(ref)
        except Exception as e:
            if fid < 0:  # a submit: the replica's stream fails with it
                self._fail_stream(key, e)
            else:
                self._post(fid, ("error", fid, e))
            return
        if fid >= 0:
            self._post(fid, ("answers", fid, [(0, value)]))
            with self._lock:
                self._flights.pop(fid, None)

    def _stream_item(self, gen: Any) -> None:
        key = next((k for k, s in self._streams.items() if s.gen is gen), None)
        if key is None:
            return  # failed meanwhile (its submit raised)
        try:
            answers = ray.get(next(gen))
        except StopIteration:  # it ended idle: reopen it if answers are still due
            with self._lock:
                s = self._streams.pop(key)
                if s.tags:
                    self._streams[key] = _Stream(
                        self.handles[key[0]][key[1]].answers.remote(s.sid), s.sid, s.tags)
            return
        except Exception as e:
            self._fail_stream(key, e)
            return
        out: dict[int, list[tuple[int, Any]]] = {}
        with self._lock:
            s = self._streams[key]
            for tag, value in answers:
                where = s.tags.pop(tag, None)
                if where is not None:
                    out.setdefault(where[0], []).append((where[1], value))
        for fid, vals in out.items():
            self._post(fid, ("answers", fid, vals))

    def _fail_stream(self, key: Key, e: Exception) -> None:
        """The replica's stream (or a submit to it) raised: every flight it still owes
        answers gets the error; the next submit opens a new stream."""
        with self._lock:
            s = self._streams.pop(key, None)
            fids = {fid for fid, _ in s.tags.values()} if s is not None else set()
        for fid in fids:
            self._post(fid, ("error", fid, e))

    def _post(self, fid: int, message: tuple) -> None:
        with self._lock:
            f = self._flights.get(fid)
            if f is not None and message[0] == "error":
                del self._flights[fid]
        if f is not None:
            f.inbox.put(message)
