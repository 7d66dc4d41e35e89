"""A replica's answer streams: one long-lived stream per client process, fed by cheap
``submit`` calls, so a busy replica sends one Ray object per engine step or so to each
client (every answer finished meanwhile), not one per request or per batch of a thread.

A client (``df_ray.pipeline.engine_mux.Mux``) opens a session (``EngineActor.answers``, a
streaming actor call) and hands it requests in batches (``EngineActor.submit``: a list of
``(tag, request dict, key)``); each request goes to the engine at once (``Replica.submit``:
continuous batching keeps its own order) and its answer is yielded on the session's stream as
``(tag, answer dict)``, with whatever else finished within `COALESCE_S`, or longer (at most
`COALESCE_MOST_S`) until `YIELD_FILL` answers are there, at once when the session has
nothing else outstanding (the last answers of a flight do not wait). A request the engine
raised on is answered ``{"failed": "Type: message"}`` alone.

A session may name a journal (``(cache root, user)``): its answers are journaled there
(`df_ray.pipeline.cache.journal`), one write per batch of answers finished together, before
they are yielded, each then marked ``"journaled": True`` (its stage need not write it at
once: `df_ray.pipeline.cache.write_behind`).

A stream with nothing outstanding ends after `IDLE_S` (the client opens another when it has
work again); a submit that finds its stream gone keeps its answers for the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from df_ray.engines.base import ChatRequest, Completion
from df_ray.pipeline.cache.journal import Journals, Target
from df_ray.pipeline.error_text import first_line

#: Seconds a stream gathers answers before it yields them (answers finish at engine steps:
#: a GPU step is 15-25 ms): one Ray object carries every answer of several steps. A yield
#: costs the replica about 0.5 CPU-ms whatever it carries (Ray's report of a streamed object:
#: `jobs/perf/engine_costs.py`), so fewer, fuller yields are what an answer costs; 100 ms is
#: little beside an answer's seconds of generation, and the stage keeps enough in flight.
COALESCE_S = 0.1

#: Answers a stream waits for past `COALESCE_S`, at most until `COALESCE_MOST_S` after its
#: first: a replica that answers a client slowly (a backbone's requests over several
#: replicas, each a share of the rate) then yields a few full objects, not one of one or
#: two answers every `COALESCE_S` (`jobs/perf/stream_fill.py`).
YIELD_FILL = 8
COALESCE_MOST_S = 0.3

#: Seconds a stream with nothing outstanding and nothing to send waits before it ends.
IDLE_S = 30.0


def answer_dict(c: Completion) -> dict[str, Any]:
    """An answer as it crosses to the client (``Completion(**d)`` there)."""
    return {"text": c.text, "prompt_tokens": c.prompt_tokens,
            "completion_tokens": c.completion_tokens, "error": c.error,
            "finish_reason": c.finish_reason}


def answer_of(f: Future) -> dict[str, Any]:
    try:
        return answer_dict(f.result())
    except Exception as e:
        return {"failed": first_line(e, typed=True)}


@dataclass
class _Session:
    ready: list[tuple[int, dict]] = field(default_factory=list)
    outstanding: int = 0
    event: asyncio.Event = field(default_factory=asyncio.Event)
    drained: asyncio.Event = field(default_factory=asyncio.Event)  # nothing outstanding
    journal: Target | None = None


class AnswerStreams:
    """The sessions of one replica (used from its actor's event loop)."""

    def __init__(self, replica: Any) -> None:
        self.replica = replica
        self.sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._done: list[tuple[_Session, int, ChatRequest, Future]] = []
        self._woken = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.journals = Journals()

    def _session(self, sid: str) -> _Session:
        s = self.sessions.get(sid)
        if s is None:
            s = self.sessions[sid] = _Session()
        return s

    def submit(self, sid: str, items: list[tuple[int, dict, str]],
               journal: Target | None = None) -> int:
        """Hand ``(tag, request dict, key)`` items to the engine; their answers go to
        ``sid`` (journaled at ``journal`` first)."""
        s = self._session(sid)
        s.journal = tuple(journal) if journal is not None else None
        self._loop = asyncio.get_running_loop()
        reqs = [ChatRequest.from_dict(d, key) for _, d, key in items]
        futs = self.replica.submit(reqs)
        s.outstanding += len(futs)
        if s.outstanding:
            s.drained.clear()
        for (tag, _, _), r, f in zip(items, reqs, futs, strict=True):
            f.add_done_callback(lambda f, tag=tag, r=r: self._finished(s, tag, r, f))
        return len(futs)

    def _finished(self, s: _Session, tag: int, r: ChatRequest, f: Future) -> None:
        """An answer (from the engine's thread): queued, and the loop woken once for every
        answer queued meanwhile, not once per answer."""
        with self._lock:
            self._done.append((s, tag, r, f))
            if self._woken:
                return
            self._woken = True
        self._loop.call_soon_threadsafe(self._take_done)

    def _take_done(self) -> None:
        with self._lock:
            done, self._done, self._woken = self._done, [], False
        answers = [answer_of(f) for _, _, _, f in done]
        journaled = [(s.journal, r, f.result()) for (s, _, r, f), a in zip(done, answers, strict=True)
                     if s.journal is not None and "failed" not in a]
        if journaled:  # on disk before the answers leave, and said so on each
            on_disk = self.journals.write(journaled)
            for (s, _, _, _), a in zip(done, answers, strict=True):
                if s.journal in on_disk and "failed" not in a:
                    a["journaled"] = True
        for (s, tag, _, _), a in zip(done, answers, strict=True):
            s.ready.append((tag, a))
            s.outstanding -= 1
            s.event.set()
            if s.outstanding == 0:
                s.drained.set()

    async def stream(self, sid: str, coalesce_s: float = COALESCE_S, idle_s: float = IDLE_S,
                     fill: int = YIELD_FILL, most_s: float = COALESCE_MOST_S):
        """Yield lists of ``(tag, answer dict)`` as they finish, until idle."""
        s = self._session(sid)
        while True:
            if not s.ready:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(s.event.wait(), idle_s)
                if not s.ready:
                    if s.outstanding == 0:
                        self.sessions.pop(sid, None)
                        return
                    continue
            if s.outstanding:  # more to come: gather what finishes meanwhile
                await _gather(s, coalesce_s, fill, most_s)
            s.event.clear()
            out, s.ready = s.ready, []
            yield out


async def _gather(s: _Session, coalesce_s: float, fill: int, most_s: float) -> None:
    """Wait ``coalesce_s`` for what finishes meanwhile, then on until ``fill`` answers are
    ready or ``most_s`` has passed; at once when nothing is left outstanding."""
    loop = asyncio.get_running_loop()
    until = loop.time() + most_s
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(s.drained.wait(), coalesce_s)
    while s.outstanding and len(s.ready) < fill and (left := until - loop.time()) > 0:
        s.event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(s.event.wait(), left)
