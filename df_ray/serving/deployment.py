"""`EngineServer`: one df_ray engine (embedded, scripted, or any other kind) as a Serve replica.

Every job's stages send it chunks of requests through a DeploymentHandle. A single engine
thread merges whatever is waiting, from every caller, into one engine batch of up to
``max_batch_size`` requests (the engine's own batching, as in a job-owned engine actor), so
concurrent sweeps of several users fill the same batches. A request identical to one being
generated, or generated recently, is not generated again: callers share the answer (two users
running the same sweep at once pay for each call once, even before either has cached it).

The replica also answers ``POST <route>/v1/chat/completions`` and ``GET <route>/v1/models``
(the OpenAI chat API, non-streaming) for clients outside the cluster.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any

from df_ray.engines.base import ChatRequest, Completion, Message, SamplingParams

log = logging.getLogger(__name__)

#: Completions a replica remembers to answer repeated requests without generating them.
RECENT_CAPACITY = 16384


class Batcher:
    """Merges requests from any number of threads into engine batches on one engine thread;
    coalesces identical requests (by :meth:`ChatRequest.key`). The engine is only touched by
    that thread, so engines need not be thread-safe."""

    def __init__(self, engine: Any, max_batch_size: int, recent: int = RECENT_CAPACITY) -> None:
        self.engine = engine
        self.cap = max(1, int(max_batch_size))
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._inflight: dict[str, Future] = {}
        self._recent: OrderedDict[str, Completion] = OrderedDict()
        self._recent_cap = recent
        self.served = 0  # requests answered to callers
        self.generated = 0  # requests the engine generated
        self.coalesced = 0  # answered from an identical request in flight or recent
        self.batches: list[int] = []  # engine batch sizes, in order (bounded)
        self.n_batches = 0
        self.thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self.thread.start()

    def submit(self, requests: Sequence[ChatRequest]) -> list[Future]:
        futs = []
        with self._lock:
            for r in requests:
                k = r.key()
                hit = self._recent.get(k)
                if hit is not None:
                    f: Future = Future()
                    f.set_result(hit)
                    self.coalesced += 1
                elif k in self._inflight:
                    f = self._inflight[k]
                    self.coalesced += 1
                else:
                    f = Future()
                    self._inflight[k] = f
                    self._queue.put(("generate", (r, k), f))
                futs.append(f)
            self.served += len(requests)
        return futs

    def count(self, texts: Sequence[str]) -> Future:
        f: Future = Future()
        if getattr(self.engine, "concurrent_tokenize", False):
            try:
                f.set_result([int(self.engine.count_tokens(t)) for t in texts])
            except Exception as e:
                f.set_exception(e)
            return f
        self._queue.put(("count", list(texts), f))
        return f

    def _loop(self) -> None:
        held = None
        while True:
            job = held or self._queue.get()
            held = None
            if job[0] == "count":
                try:
                    job[2].set_result([int(self.engine.count_tokens(t)) for t in job[1]])
                except Exception as e:
                    job[2].set_exception(e)
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
            reqs = [j[1][0] for j in jobs]
            try:
                out = self.engine.generate(reqs)
                if len(out) != len(reqs):
                    raise RuntimeError(f"engine answered {len(out)} of {len(reqs)} requests")
            except BaseException as e:
                with self._lock:
                    for _, (_, k), f in jobs:
                        self._inflight.pop(k, None)
                        if not f.done():
                            f.set_exception(e)
                continue
            with self._lock:
                self.generated += len(reqs)
                self.n_batches += 1
                if len(self.batches) < 100_000:
                    self.batches.append(len(reqs))
                for (_, (_, k), f), c in zip(jobs, out, strict=True):
                    self._inflight.pop(k, None)
                    if c.error is None:
                        self._recent[k] = c
                        if len(self._recent) > self._recent_cap:
                            self._recent.popitem(last=False)
                    f.set_result(c)


class EngineServer:
    """The Serve deployment class (see the module docstring). ``spec`` is an EngineSpec dict."""

    def __init__(self, spec: dict[str, Any], backbone: str) -> None:
        from df_ray.engines import make_engine
        from df_ray.engines.spec import EngineSpec
        from df_ray.pipeline import engine_health, faults

        faults.install(f"serve-{backbone}")  # a fatal signal is reported, by name
        self.spec = EngineSpec.model_validate(spec)
        self.backbone = backbone
        t = time.time()
        self.engine = make_engine(self.spec)
        self.load_s = time.time() - t
        # As a job-owned replica: one greedy token before taking traffic, so an engine that
        # cannot generate (a corrupt model file, a build this CPU cannot run) fails the
        # deployment with its cause instead of failing every caller's requests.
        engine_health.smoke_test(self.engine, self.spec)
        self.started_at = time.time()
        self.batcher = Batcher(self.engine, self.spec.max_batch_size)
        log.info("df_ray engine %s (%s: %s) loaded in %.1fs", backbone, self.spec.kind,
                 self.spec.model, self.load_s)

    async def generate(self, requests: list[dict]) -> list[dict]:
        futs = self.batcher.submit([ChatRequest.from_dict(r) for r in requests])
        out = await asyncio.gather(*(asyncio.wrap_future(f) for f in futs))
        return [asdict(c) for c in out]

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return await asyncio.wrap_future(self.batcher.count(texts))

    def info(self) -> dict[str, Any]:
        """What this backbone is: the job checks its config against it before starting."""
        return {"backbone": self.backbone, "spec": self.spec.model_dump(mode="json")}

    def stats(self) -> dict[str, Any]:
        import ray

        b = self.batcher
        ctx = ray.get_runtime_context()
        return {"backbone": self.backbone, "model": self.spec.model, "kind": self.spec.kind,
                "served": b.served, "generated": b.generated, "coalesced": b.coalesced,
                "batches": b.n_batches, "batch_sizes": list(b.batches[-10_000:]),
                "pid": os.getpid(), "node_id": ctx.get_node_id(),
                "actor_id": ctx.get_actor_id(), "started_at": self.started_at,
                "load_s": self.load_s, "rss_bytes": _rss_bytes()}

    def check_health(self) -> None:
        """Serve's periodic health check: a replica whose engine thread died is replaced."""
        if not self.batcher.thread.is_alive():
            raise RuntimeError("the engine thread died")

    async def __call__(self, request: Any) -> Any:
        """The OpenAI chat API for HTTP clients: ``.../v1/chat/completions``, ``.../v1/models``."""
        from starlette.responses import JSONResponse

        path = request.url.path.rstrip("/")
        if request.method == "GET" and path.endswith("/models"):
            return JSONResponse({"object": "list", "data": [
                {"id": self.spec.model, "object": "model", "owned_by": "df_ray"}]})
        if request.method != "POST" or not path.endswith("/chat/completions"):
            return JSONResponse({"error": {"message": f"no route {request.method} {path}"}},
                                status_code=404)
        try:
            body = await request.json()
            req = openai_to_request(body, self.spec.model)
        except (ValueError, KeyError, TypeError) as e:
            return JSONResponse({"error": {"message": f"bad request: {e}"}}, status_code=400)
        (c,) = await asyncio.gather(asyncio.wrap_future(self.batcher.submit([req])[0]))
        if c.error is not None:
            return JSONResponse({"error": {"message": c.error}}, status_code=400)
        return JSONResponse(completion_to_openai(c, self.spec.model))


def openai_to_request(body: dict[str, Any], model: str) -> ChatRequest:
    """An OpenAI chat-completions body as a df_ray request (for this backbone's ``model``)."""
    msgs = body["messages"]
    if not isinstance(msgs, list) or not msgs:
        raise ValueError("messages must be a non-empty list")
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    sampling = SamplingParams(temperature=float(body.get("temperature", 0.7)),
                              top_p=float(body.get("top_p", 1.0)),
                              max_tokens=int(body.get("max_tokens") or 512),
                              stop=tuple(str(s) for s in stop))
    return ChatRequest(model=model, messages=tuple(Message(str(m["role"]), str(m["content"]))
                                                   for m in msgs),
                       sampling=sampling, seed=int(body.get("seed") or 0))


def completion_to_openai(c: Completion, model: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": c.text}}],
            "usage": {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
                      "total_tokens": c.total_tokens}}


def _rss_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
