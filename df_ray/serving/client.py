"""A job's side of the shared engine service: backbones of ``kind: serve``.

`ServingPool` is what a job's runner starts instead of a plain
:class:`~df_ray.pipeline.engine_pool.EnginePool` when some backbones are served: job-owned
engines for the others, and for each served backbone a :class:`ServedBackbone` (the Serve
application and deployment to call), checked before anything runs. Stages build their client
with :func:`make_client`: job-owned backbones go through the usual `EngineClient`, served ones
through :class:`ServeClient`, which calls the deployment's handle directly (no HTTP), with
the same request timeouts and bounded retries (a replica lost with its node is retried once
Serve has replaced it; when retries run out the requests come back as per-request errors, which
are not cached, so a rerun makes them).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from df_ray.engines.base import ChatRequest, Completion, route
from df_ray.engines.spec import EngineSpec
from df_ray.errors import ConfigError
from df_ray.pipeline.error_text import last_line
from df_ray.serving import ENGINE_DEPLOYMENT

log = logging.getLogger(__name__)

#: How long a retry waits for a served backbone to answer again (a replica being replaced).
RECOVERY_WAIT_S = 180.0


@dataclass(frozen=True)
class ServedBackbone:
    """Where a served backbone lives: its application, deployment and protocol."""

    app: str
    deployment: str
    protocol: str  # "engine" (df_ray's EngineServer) or "vllm" (ray.serve.llm LLMServer)
    #: the service journals a caller's answers (a service deployed by an earlier df_ray does
    #: not: its calls carry no journal)
    journals: bool = False
    #: ... and marks each answer it journaled (an earlier one does not: its calls ask none)
    marks: bool = False


def is_served(handles: Any) -> bool:
    return bool(handles) and isinstance(handles[0], ServedBackbone)


def resolve_served(name: str, spec: EngineSpec) -> ServedBackbone:
    """The running application for backbone ``name`` (``spec.app`` or the name itself),
    checked against the config: it must exist and serve ``spec.model``."""
    from ray import serve

    from df_ray.serving.apps import is_df_ray_app, llm_deployment_name

    app = spec.app or name
    try:
        apps = serve.status().applications
    except Exception as e:
        raise ConfigError(f"backbone {name!r} is of kind 'serve', but Ray Serve is not "
                          f"reachable on this cluster ({e})") from None
    if app not in apps:
        raise ConfigError(
            f"backbone {name!r}: no Serve application {app!r} on this Ray cluster (running: "
            f"{sorted(apps) or 'none'}); deploy it with `df-ray serve --config <pool or "
            "config file>` on the cluster, or use a job-owned engine kind")
    kind = is_df_ray_app(apps[app].deployments)
    if kind == "engine":
        handle = serve.get_deployment_handle(ENGINE_DEPLOYMENT, app)
        info = handle.info.remote().result(timeout_s=120)
        served = ServedBackbone(app, ENGINE_DEPLOYMENT, "engine", bool(info.get("journals")),
                                bool(info.get("marks_journaled")))
        model, kind = info["spec"]["model"], info["spec"]["kind"]
        if model != spec.model:
            raise ConfigError(f"backbone {name!r}: application {app!r} serves model {model!r}, "
                              f"the config says {spec.model!r}")
        if spec.engine is not None and kind != spec.engine:
            raise ConfigError(f"backbone {name!r}: application {app!r} runs a {kind!r} engine, "
                              f"the config says engine {spec.engine!r}")
        return served
    if kind == "vllm":
        if spec.engine not in (None, "vllm"):
            raise ConfigError(f"backbone {name!r}: application {app!r} runs vLLM, the config "
                              f"says engine {spec.engine!r}")
        dep = llm_deployment_name(spec.model)
        if dep not in apps[app].deployments:
            raise ConfigError(f"backbone {name!r}: application {app!r} has no deployment for "
                              f"model {spec.model!r} (has {sorted(apps[app].deployments)})")
        return ServedBackbone(app, dep, "vllm")
    raise ConfigError(f"backbone {name!r}: Serve application {app!r} is not a df_ray engine "
                      "service (deploy it with `df-ray serve`)")


class ServingPool:
    """Job-owned engines for some backbones, the shared service for the others."""

    def __init__(self, backbones: Mapping[str, EngineSpec],
                 engines: Mapping[str, str] | None = None) -> None:
        self.specs = dict(backbones)
        owned = {n: s for n, s in self.specs.items() if not s.served}
        self.owned = None
        if owned:
            from df_ray.pipeline.engine_pool import EnginePool

            self.owned = EnginePool(owned, engines)
        self.handles: dict[str, list[Any]] = dict(self.owned.handles) if self.owned else {}
        for name, spec in self.specs.items():
            if spec.served:
                self.handles[name] = [resolve_served(name, spec)]

    def wait_ready(self, timeout_s: float = 900) -> None:
        if self.owned is not None:
            self.owned.wait_ready(timeout_s)

    @property
    def supervisor(self):
        """The job-owned replicas' supervisor (`df_ray.pipeline.engine_health`)."""
        if self.owned is not None:
            return self.owned.supervisor
        from df_ray.pipeline.engine_health import NoSupervision

        return NoSupervision()

    @property
    def failure(self):
        return self.supervisor.failure

    def capacities(self) -> dict[str, int]:
        """Requests each backbone holds at once: the job-owned engines' report, the served
        backbones' spec figure."""
        out = {n: s.capacity * s.replicas for n, s in self.specs.items()}
        if self.owned is not None:
            out.update(self.owned.capacities())
        return out

    def stats(self, timeout_s: float = 5.0) -> list[dict[str, Any]]:
        """The job-owned replicas' counters (the service's are its own)."""
        return self.owned.stats(timeout_s) if self.owned is not None else []

    def client(self, retries: int = 2):
        return make_client(self.handles, self.specs, retries=retries)

    def shutdown(self) -> None:
        """Stops the job's own engines; the shared service stays up for everyone else."""
        if self.owned is not None:
            self.owned.shutdown()
        self.handles.clear()


def make_pool(backbones: Mapping[str, EngineSpec], engines: Mapping[str, str] | None = None):
    """The engine pool of a job with served backbones (`df_ray.pipeline.engine_pool.make_pool`
    calls it through ``ServeSpec.pool_provider``); ``engines``: the job-owned engine kinds'
    targets."""
    return ServingPool(backbones, engines)


def make_client(handles: Mapping[str, list[Any]], specs: Mapping[str, EngineSpec],
                retries: int = 2):
    """The client a stage holds (`df_ray.pipeline.engine_pool.make_client` calls it through
    ``ServeSpec.pool_provider``): `EngineClient` for job-owned engines only, else a client
    that sends served backbones' requests through their DeploymentHandles."""
    from df_ray.pipeline.engine_pool import EngineClient

    if not any(is_served(h) for h in handles.values()):
        return EngineClient(handles, specs, retries=retries)
    return MixedClient(handles, specs, retries=retries)


class ServeClient:
    """Requests to served backbones through Serve DeploymentHandles. Picklable."""

    def __init__(self, served: Mapping[str, ServedBackbone], specs: Mapping[str, EngineSpec],
                 retries: int = 2) -> None:
        self.served = dict(served)
        self.specs = {n: specs[n] for n in self.served}
        self.retries = retries
        self._handles: dict[str, Any] = {}
        self.journal: tuple[str, str] | None = None
        #: keys of answers the service journaled at ``journal`` before sending them (as
        #: `EngineClient.journaled`: the stage's `WriteBehind` reads it)
        self.journaled: set[str] = set()

    def journal_to(self, target: tuple[str, str] | None) -> None:
        """Have the service journal this client's answers at ``target`` (``(cache root,
        user)``) as its replicas finish them (engine protocol only: ``ray.serve.llm`` has
        no journal)."""
        self.journal = target

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_handles"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._handles = {}

    def handle(self, backbone: str):
        h = self._handles.get(backbone)
        if h is None:
            from ray import serve

            sb = self.served[backbone]
            h = serve.get_deployment_handle(sb.deployment, sb.app)
            self._handles[backbone] = h
        return h

    def generate(self, backbones: Sequence[str], requests: Sequence[ChatRequest]
                 ) -> list[Completion]:
        """Answer ``requests[i]`` on ``backbones[i]``; every chunk is in flight at once."""
        results: list[Completion | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        last_error: dict[int, str] = {}
        attempt = 0
        while pending:
            inflight = self._submit(backbones, requests, pending)
            failed: list[int] = []
            for name, idxs, resp in inflight:
                spec = self.specs[name]
                try:
                    out = self._collect(name, resp, spec.request_timeout_s,
                                        [requests[i] for i in idxs])
                    for i, c in zip(idxs, out, strict=True):
                        if isinstance(c, str):  # the engine failed this request alone
                            failed.append(i)
                            last_error[i] = f"served engine {name!r}: {c}"
                        else:
                            results[i] = c
                except Exception as e:
                    if isinstance(e, TimeoutError):
                        _cancel(resp)
                        msg = f"served engine {name!r} timed out after {spec.request_timeout_s:.0f}s"
                    else:
                        msg = f"served engine {name!r}: {last_line(e)}"
                    log.warning("%s; retrying", msg)
                    failed += idxs
                    last_error.update(dict.fromkeys(idxs, msg))
            attempt += 1
            if failed and attempt > self.retries:
                for i in failed:
                    results[i] = Completion("", 0, 0, error=last_error.get(i, "engine failed"))
                break
            pending = failed
            if pending:
                self._await_backbones({backbones[i] for i in pending})
        return [r if r is not None else Completion("", 0, 0, error="engine failed")
                for r in results]

    def _submit(self, backbones: Sequence[str], requests: Sequence[ChatRequest],
                idxs: Sequence[int]) -> list[tuple[str, list[int], Any]]:
        by: dict[str, list[int]] = {}
        for i in idxs:
            by.setdefault(backbones[i], []).append(i)
        inflight = []
        for name, members in by.items():
            sb = self.served[name]
            h = self.handle(name)
            if sb.protocol == "engine":
                size = self.specs[name].batch_size_cap
                for j in range(0, len(members), size):
                    chunk = members[j:j + size]
                    dicts = [requests[i].to_dict() for i in chunk]
                    if sb.marks and self.journal is not None:
                        resp = h.generate.remote(dicts, self.journal, True)
                    elif sb.journals:
                        resp = h.generate.remote(dicts, self.journal)
                    else:
                        resp = h.generate.remote(dicts)
                    inflight.append((name, chunk, resp))
            else:  # vLLM through ray.serve.llm: one chat request each, batched by vLLM
                hs = h.options(stream=True)
                for i in members:
                    inflight.append((name, [i], hs.chat.remote(to_chat_completion(requests[i]))))
        return inflight

    def _collect(self, name: str, resp: Any, timeout_s: float,
                 requests: Sequence[ChatRequest]) -> list[Completion | str]:
        """The answers of one call to ``requests``; a request the engine failed alone is its
        error text. An answer marked journaled has its key added to `journaled`."""
        if self.served[name].protocol != "engine":
            return [from_chat_completion(_first(resp, timeout_s))]
        out: list[Completion | str] = []
        for d, r in zip(resp.result(timeout_s=timeout_s), requests, strict=True):
            if "failed" in d:
                out.append(d["failed"])
                continue
            if d.pop("journaled", False):
                self.journaled.add(r.key())
            out.append(Completion(**d))
        return out

    def _await_backbones(self, names: set[str], timeout_s: float = RECOVERY_WAIT_S) -> None:
        """Wait (bounded) until each backbone answers again: Serve replaces a lost replica,
        and requests sent meanwhile would only queue or fail."""
        deadline = time.time() + timeout_s
        for name in names:
            sb = self.served[name]
            while time.time() < deadline:
                try:
                    h = self.handle(name)
                    if sb.protocol == "engine":
                        h.stats.remote().result(timeout_s=max(1.0, min(15.0, deadline - time.time())))
                    else:
                        h.check_health.remote().result(
                            timeout_s=max(1.0, min(15.0, deadline - time.time())))
                    break
                except Exception:
                    time.sleep(1.0)

    def count_tokens(self, backbone: str, texts: Sequence[str]) -> list[int]:
        sb = self.served[backbone]
        h = self.handle(backbone)
        timeout = self.specs[backbone].request_timeout_s
        for attempt in range(self.retries + 1):
            try:
                if sb.protocol == "engine":
                    return list(h.count_tokens.remote(list(texts)).result(timeout_s=timeout))
                return [_count_vllm(h, self.specs[backbone].model, t, timeout) for t in texts]
            except Exception:
                if attempt == self.retries:
                    raise
                self._await_backbones({backbone})
        raise AssertionError("unreachable")  # pragma: no cover


class MixedClient:
    """The EngineClient interface over job-owned and served backbones together. It has no
    ``generate_rolling`` (its served and owned requests go by different paths): a stage over
    it runs a batch's rounds one after the other (``Driver.run_rows``)."""

    def __init__(self, handles: Mapping[str, list[Any]], specs: Mapping[str, EngineSpec],
                 retries: int = 2) -> None:
        from df_ray.pipeline.engine_pool import EngineClient

        self.specs = dict(specs)
        owned = {n: list(h) for n, h in handles.items() if not is_served(h)}
        served = {n: h[0] for n, h in handles.items() if is_served(h)}
        self.owned = (EngineClient(owned, {n: self.specs[n] for n in owned}, retries=retries)
                      if owned else None)
        self.served = ServeClient(served, self.specs, retries=retries)
        #: keys of answers journaled before they came, from either side (one set: the
        #: stage's `WriteBehind` reads it)
        self.journaled: set[str] = self.served.journaled
        if self.owned is not None:
            self.owned.journaled = self.journaled

    def backbone_of(self, request: ChatRequest) -> str:
        return route(request, self.specs)

    def journal_to(self, target: tuple[str, str] | None) -> None:
        for c in (self.owned, self.served):
            if c is not None:
                c.journal_to(target)

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        names = [self.backbone_of(r) for r in requests]
        mine = [i for i, n in enumerate(names) if n not in self.served.served]
        theirs = [i for i, n in enumerate(names) if n in self.served.served]
        out: list[Completion | None] = [None] * len(requests)
        worker = None
        if mine:
            def run_owned() -> None:
                comps = self.owned.generate([requests[i] for i in mine])
                for i, c in zip(mine, comps, strict=True):
                    out[i] = c

            worker = threading.Thread(target=run_owned, daemon=True)
            worker.start()
        if theirs:
            comps = self.served.generate([names[i] for i in theirs], [requests[i] for i in theirs])
            for i, c in zip(theirs, comps, strict=True):
                out[i] = c
        if worker is not None:
            worker.join()
        return [c if c is not None else Completion("", 0, 0, error="engine failed") for c in out]

    def count_tokens(self, backbone: str, texts: Sequence[str]) -> list[int]:
        if backbone in self.served.served:
            return self.served.count_tokens(backbone, texts)
        return self.owned.count_tokens(backbone, texts)


# --------------------------------------------------------------------------- vLLM (ray.serve.llm)


def to_chat_completion(request: ChatRequest):
    """A df_ray request as ray.serve.llm's ChatCompletionRequest (non-streaming)."""
    from ray.serve.llm.openai_api_models import ChatCompletionRequest

    return ChatCompletionRequest(**chat_completion_fields(request))


def chat_completion_fields(request: ChatRequest) -> dict[str, Any]:
    s = request.sampling
    out: dict[str, Any] = {
        "model": request.model,
        "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        "temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens,
        "seed": request.seed, "stream": False,
    }
    if s.stop:
        out["stop"] = list(s.stop)
    if s.ignore_eos:  # vLLM's OpenAI protocol extension
        out["ignore_eos"] = True
    return out


def from_chat_completion(resp: Any) -> Completion:
    """ray.serve.llm's answer (a ChatCompletionResponse, an ErrorResponse, or their dicts)."""
    d = resp.model_dump() if hasattr(resp, "model_dump") else resp
    if isinstance(d, list):  # a batch of streamed chunks: not expected with stream=False
        d = d[0] if d else {}
    if isinstance(d, str):
        raise RuntimeError(f"unexpected streamed answer: {d[:200]}")
    if "error" in d or d.get("object") == "error":
        err = d.get("error", d)
        msg = err.get("message") if isinstance(err, dict) else str(err)
        return Completion("", 0, 0, error=f"vllm: {msg}")
    choice = d["choices"][0]
    usage = d.get("usage") or {}
    return Completion(text=(choice.get("message") or {}).get("content") or "",
                      prompt_tokens=int(usage.get("prompt_tokens") or 0),
                      completion_tokens=int(usage.get("completion_tokens") or 0),
                      finish_reason=choice.get("finish_reason"))


def _first(gen: Any, timeout_s: float) -> Any:
    """The first item of a DeploymentResponseGenerator, within ``timeout_s``."""
    box: dict[str, Any] = {}

    def pull() -> None:
        try:
            box["v"] = next(iter(gen))
        except BaseException as e:
            box["e"] = e

    t = threading.Thread(target=pull, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise TimeoutError(f"no answer in {timeout_s:.0f}s")
    if "e" in box:
        raise box["e"]
    return box["v"]


def _count_vllm(handle: Any, model: str, text: str, timeout_s: float) -> int:
    from ray.llm._internal.serve.core.configs.openai_api_models import (
        TokenizeCompletionRequest,
    )

    resp = _first(handle.options(stream=True).tokenize.remote(
        TokenizeCompletionRequest(model=model, prompt=text, add_special_tokens=False)), timeout_s)
    d = resp.model_dump() if hasattr(resp, "model_dump") else resp
    return int(d.get("count") or len(d.get("tokens") or []))


def _cancel(resp: Any) -> None:
    with contextlib.suppress(Exception):
        resp.cancel()


# --------------------------------------------------------------------------- configs


#: Fields of a job-owned backbone a served one keeps (the client's side of the call).
_CLIENT_FIELDS = ("model", "revision", "max_batch_size", "request_timeout_s")


def served_backbone(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A job-owned backbone's spec (a config mapping) as the ``kind: serve`` backbone that
    calls the application ``df-ray serve`` deployed for it (named after the backbone)."""
    if spec.get("kind") == "serve":
        return dict(spec)
    out = {k: spec[k] for k in _CLIENT_FIELDS if k in spec}
    out.update({"kind": "serve", "app": name, "engine": spec.get("kind")})
    return out


def use_service(data: dict[str, Any]) -> dict[str, Any]:
    """A sweep mapping (``base``/``runs``) whose backbones all go through the service."""
    out = dict(data)

    def swap(d: dict[str, Any]) -> dict[str, Any]:
        d = dict(d)
        if isinstance(d.get("backbones"), dict):
            d["backbones"] = {n: served_backbone(n, s) if isinstance(s, dict) else s
                              for n, s in d["backbones"].items()}
        return d

    out["base"] = swap(out.get("base") or {})
    out["runs"] = [swap(r) for r in out.get("runs") or [{}]]
    return out
