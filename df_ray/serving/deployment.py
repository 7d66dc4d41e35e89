"""`EngineServer`: one df_ray engine (embedded, scripted, or any other kind) as a Serve replica.

Every job's stages send it requests through a DeploymentHandle. Each request goes to the
engine as soon as it arrives, as in a job-owned engine actor (`df_ray.engines.batching`): an
engine that batches continuously (vLLM's async engine, the embedded llama.cpp decode loop)
admits it beside the sequences already running; an engine that takes whole batches gets
whatever is waiting, up to ``max_batch_size``, from one engine thread. Concurrent sweeps of
several users thus fill the same engine. A request identical to one being generated, or
generated recently, is not generated again: callers share the answer (two users running the
same sweep at once pay for each call once, even before either has cached it).

The replica also answers ``POST <route>/v1/chat/completions`` and ``GET <route>/v1/models``
(the OpenAI chat API, non-streaming) for clients outside the cluster, to a request that
carries the deployment's bearer token (:mod:`df_ray.serving.auth`; 401 without one, 403 with
another) and whose sampling fields are in range (400 naming the field).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from df_ray.engines.base import ChatRequest, Completion, Message, SamplingParams
from df_ray.engines.batching import Replica

log = logging.getLogger(__name__)

class EngineServer:
    """The Serve deployment class (see the module docstring). ``spec`` is an EngineSpec dict;
    ``target`` the ``"module:Class"`` of its engine kind and ``plugins`` the driver's plugins
    and their folders (:func:`df_ray.plugins.worker_plugins`), both resolved by the driver
    that deploys it: a replica imports the plugins, then builds from the target, and reads
    no registry (an engine kind a plugin registers in the driver alone builds here too)."""

    def __init__(self, spec: dict[str, Any], backbone: str, token_sha256: str | None = None,
                 target: str | None = None, plugins: tuple = ((), ())) -> None:
        from df_ray.engines import make_engine, validate_spec
        from df_ray.pipeline import engine_health, faults
        from df_ray.plugins import load_in_worker

        load_in_worker(*plugins)
        faults.install(f"serve-{backbone}")  # a fatal signal is reported, by name
        self.spec = validate_spec(spec, target)
        self.backbone = backbone
        #: the SHA-256 of the HTTP route's token (None: the route refuses every request)
        self.token_sha256 = token_sha256
        t = time.time()
        self.engine = make_engine(self.spec, target)
        self.load_s = time.time() - t
        # As a job-owned replica: one greedy token before taking traffic, so an engine that
        # cannot generate (a corrupt model file, a build this CPU cannot run) fails the
        # deployment with its cause instead of failing every caller's requests.
        engine_health.smoke_test(self.engine, self.spec)
        self.started_at = time.time()
        self.batcher = Replica(self.engine, self.spec.batch_size_cap)
        from df_ray.pipeline.cache.journal import Journals

        self.journals = Journals()  # each caller's answers, in that caller's cache root
        self.journaling: dict[tuple[str, str], int] = {}  # calls in flight per journal
        log.info("df_ray engine %s (%s: %s) loaded in %.1fs", backbone, self.spec.kind,
                 self.spec.model, self.load_s)

    async def generate(self, requests: list[dict], journal: tuple[str, str] | None = None,
                       mark: bool = False) -> list[dict]:
        """One answer per request, in order; a request the engine raised on comes back as
        ``{"failed": "Type: message"}`` alone (the caller retries it). ``journal``: the
        caller's cache root and user, where its answers are journaled first
        (`df_ray.pipeline.cache.journal`); ``mark``: each answer journaled says so
        (``"journaled": True``; a caller of an earlier df_ray, which sends no ``mark``, could
        not read it).

        A journal is finished once no call for it is in flight here (the next call starts
        another): a caller's run ends with its journals finished, and its end folds them
        (this service outlives the run, and a replica is not reachable by name to be told)."""
        from df_ray.pipeline import engine_health

        if journal is None:
            return await engine_health.replica_answers(self.batcher, requests)
        target = (journal[0], journal[1])
        self.journaling[target] = self.journaling.get(target, 0) + 1
        try:
            return await engine_health.replica_answers(self.batcher, requests, target,
                                                       self.journals, mark)
        finally:
            self.journaling[target] -= 1
            if not self.journaling[target]:
                del self.journaling[target]
                self.journals.close(target)

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return await asyncio.wrap_future(self.batcher.count_tokens(texts))

    def info(self) -> dict[str, Any]:
        """What this backbone is: the job checks its config against it before starting."""
        return {"backbone": self.backbone, "spec": self.spec.model_dump(mode="json"),
                # generate takes a caller's journal, and marks the answers journaled
                "journals": True, "marks_journaled": True}

    def stats(self) -> dict[str, Any]:
        import ray

        b = self.batcher.stats()
        ctx = ray.get_runtime_context()
        return {"backbone": self.backbone, "model": self.spec.model, "kind": self.spec.kind,
                "served": b["served"], "generated": b["generated"],
                "coalesced": b["coalesced"], "batches": b["batches"],
                "in_engine": b["in_engine"], "peak_in_engine": b["peak_in_engine"],
                "pid": os.getpid(), "node_id": ctx.get_node_id(),
                "actor_id": ctx.get_actor_id(), "started_at": self.started_at,
                "load_s": self.load_s, "rss_bytes": _rss_bytes()}

    def check_health(self) -> None:
        """Serve's periodic health check: a replica whose engine thread died is replaced."""
        if not self.batcher.alive:
            raise RuntimeError("the engine thread died")

    async def __call__(self, request: Any) -> Any:
        """The OpenAI chat API for HTTP clients: ``.../v1/chat/completions``, ``.../v1/models``."""
        from starlette.responses import JSONResponse

        from df_ray.serving.auth import FieldError, authorized

        denied = authorized(request.headers.get("authorization"), self.token_sha256)
        if denied is not None:
            why = ("a bearer token is required (Authorization: Bearer <token>)" if denied == 401
                   else "the bearer token is not this deployment's")
            return JSONResponse({"error": {"message": why, "type": "authentication_error"}},
                                status_code=denied,
                                headers={"WWW-Authenticate": "Bearer"} if denied == 401 else None)
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
        except FieldError as e:
            return JSONResponse({"error": {"message": f"bad request: {e}", "param": e.field,
                                           "type": "invalid_request_error"}}, status_code=400)
        except (ValueError, KeyError, TypeError) as e:
            return JSONResponse({"error": {"message": f"bad request: {e}"}}, status_code=400)
        (c,) = await asyncio.gather(asyncio.wrap_future(self.batcher.submit([req])[0]))
        if c.error is not None:
            return JSONResponse({"error": {"message": c.error}}, status_code=400)
        return JSONResponse(completion_to_openai(c, self.spec.model))


def openai_to_request(body: dict[str, Any], model: str) -> ChatRequest:
    """An OpenAI chat-completions body as a df_ray request (for this backbone's ``model``);
    a :class:`~df_ray.serving.auth.FieldError` naming a field out of range."""
    from df_ray.serving.auth import messages, sampling_fields

    msgs = messages(body)
    f = sampling_fields(body)
    sampling = SamplingParams(temperature=f["temperature"], top_p=f["top_p"],
                              max_tokens=f["max_tokens"], stop=f["stop"],
                              ignore_eos=f["ignore_eos"])
    return ChatRequest(model=model, messages=tuple(Message(r, c) for r, c in msgs),
                       sampling=sampling, seed=f["seed"])


def completion_to_openai(c: Completion, model: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "finish_reason": c.finish_reason or "stop",
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
