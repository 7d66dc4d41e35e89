"""Long-lived engine actors: one pool per backbone, started once per job and shared by every
stage, round and configuration of that job.

Each replica is a Ray actor that owns one engine (a vLLM engine pinned to one GPU with
``num_gpus``, an embedded model on CPU threads, an HTTP client, or a scripted engine).
`EngineClient` is what stages hold: it spreads a batch over the replicas of a backbone,
keeps every backbone's requests in flight together, and turns engine faults into bounded
retries (a crashed replica is restarted by Ray; a hung one is killed and restarted) and,
when retries run out, into per-request errors rather than a crashed job.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from df_ray.engines.base import ChatRequest, Completion
from df_ray.engines.spec import EngineSpec

log = logging.getLogger(__name__)


@ray.remote(max_restarts=-1, max_concurrency=64)
class EngineActor:
    """Hosts one engine replica.

    Stage actors call ``generate`` concurrently (a threaded actor); a single engine thread
    merges whatever requests are waiting, up to ``max_batch_size``, into one engine batch,
    so a continuous-batching engine (vLLM) sees full batches however the pipeline slices its
    work. The engine is only ever touched by that thread (engines need not be thread-safe).
    """

    def __init__(self, spec: dict[str, Any], backbone: str = "", replica: int = 0,
                 token: str | None = None) -> None:
        from df_ray.engines import make_engine
        from df_ray.pipeline import engine_health, faults, lifeline

        faults.install(engine_health.replica_label(backbone, replica))
        lifeline.hold()
        self.spec = EngineSpec.model_validate(spec)
        report = engine_health.LifeReport(token, backbone, replica)
        report.set("starting")
        try:
            self.engine = make_engine(self.spec)
            engine_health.smoke_test(self.engine, self.spec)
        except BaseException as e:
            first = (str(e).strip().splitlines() or [""])[0][:300]
            report.set("failed", error=f"{type(e).__name__}" + (f": {first}" if first else ""),
                       detail=engine_health.describe_exception(e))
            raise
        report.set("ready")
        self.served = 0
        self.batches = 0
        self.failed = 0
        self.tokens = 0
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._loop, name="engine", daemon=True).start()

    def _loop(self) -> None:
        cap = max(1, self.spec.max_batch_size)
        held = None  # a token-count job met while filling a generation batch
        while True:
            job = held or self._queue.get()
            held = None
            jobs = [job]
            if job[0] == "generate":
                size = len(job[1])
                while size < cap:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt[0] != "generate":
                        held = nxt
                        break
                    jobs.append(nxt)
                    size += len(nxt[1])
            try:
                if job[0] == "count":
                    job[2].set_result([int(self.engine.count_tokens(t)) for t in job[1]])
                    continue
                reqs = [r for _, rs, _ in jobs for r in rs]
                out = self.engine.generate(reqs)
                self.served += len(reqs)
                self.batches += 1
                self.failed += sum(1 for c in out if c.error is not None)
                self.tokens += sum(c.prompt_tokens + c.completion_tokens for c in out)
                i = 0
                for _, rs, fut in jobs:
                    fut.set_result(out[i:i + len(rs)])
                    i += len(rs)
            except BaseException as e:  # the callers see it and retry
                for _, _, fut in jobs:
                    if not fut.done():
                        fut.set_exception(e)

    def _submit(self, kind: str, items: list) -> list:
        fut: Future = Future()
        self._queue.put((kind, items, fut))
        return fut.result()

    def generate(self, requests: list[dict]) -> list[dict]:
        out = self._submit("generate", [ChatRequest.from_dict(r) for r in requests])
        return [asdict(c) for c in out]

    def count_tokens(self, texts: list[str]) -> list[int]:
        # Engines whose tokenizer may run beside generation (``concurrent_tokenize``) answer
        # at once; through the engine queue a count would wait for the whole batch in
        # progress (DarkForest counts T_cross once per sample on the coordinator's backbone,
        # often the busiest). Others (vLLM's HF tokenizer is not safe to share across
        # threads) are served by the engine thread.
        if getattr(self.engine, "concurrent_tokenize", False):
            return [int(self.engine.count_tokens(t)) for t in texts]
        return self._submit("count", list(texts))

    def stats(self) -> dict[str, Any]:
        return {"model": self.spec.model, "served": self.served, "batches": self.batches,
                "failed": self.failed, "tokens": self.tokens}


def _actor_options(spec: EngineSpec) -> dict[str, Any]:
    """Ray resources of one replica: its GPUs (vLLM: one engine per GPU, times the tensor
    parallel size) and the CPU threads an embedded model computes with."""
    cpus = spec.resolved_num_cpus if spec.kind == "embedded" else 0
    return {"num_gpus": spec.resolved_num_gpus, "num_cpus": cpus}


class EnginePool:
    """Starts the replicas of every backbone once; `handles` is what stages receive."""

    def __init__(self, backbones: Mapping[str, EngineSpec]) -> None:
        from df_ray.pipeline.engine_health import EngineSupervisor

        self.specs = dict(backbones)
        self.handles: dict[str, list[Any]] = {}
        self.token = uuid.uuid4().hex[:16]
        for name, spec in self.specs.items():
            opts = _actor_options(spec)
            self.handles[name] = [
                EngineActor.options(**opts, name=None).remote(
                    spec.model_dump(mode="json"), name, i, self.token)
                for i in range(spec.replicas)
            ]
        self.supervisor = EngineSupervisor(self.token, self.specs).start()

    @property
    def failure(self):
        """An `EngineFailure` once a replica cannot serve (the job must stop), else None."""
        return self.supervisor.failure

    def wait_ready(self, timeout_s: float = 900) -> None:
        """Block until every replica has loaded its engine and answered its smoke generation.

        Raises `EngineFailure` at once when a replica's start raises or its process dies
        while starting (see `df_ray.pipeline.engine_health`)."""
        refs = {h.stats.remote(): (name, i)
                for name, hs in self.handles.items() for i, h in enumerate(hs)}
        pending = list(refs)
        deadline = time.time() + timeout_s
        while pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
            for ref in done:
                try:
                    ray.get(ref)
                except (RayActorError, RayTaskError) as e:
                    name, i = refs[ref]
                    raise (self.supervisor.check() or self._start_failure(name, i, e)) from None
            failure = self.supervisor.check()
            if failure is not None:
                raise failure
            if pending and time.time() > deadline:
                late = sorted({refs[r][0] for r in pending})
                raise TimeoutError(f"engines not ready after {timeout_s:.0f} s: {late}")

    def _start_failure(self, name: str, replica: int, e: Exception):
        from df_ray.pipeline.engine_health import EngineFailure

        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        cause = lines[-1][:300] if lines else type(e).__name__
        return EngineFailure(name, self.specs[name].model, replica, "?",
                             f"its start failed: {cause}", "\n".join(lines[-6:-1]))

    def stats(self, timeout_s: float = 5.0) -> list[dict[str, Any]]:
        """Every live replica's counters (served and failed requests, tokens)."""
        refs = [h.stats.remote() for hs in self.handles.values() for h in hs]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        out = []
        for ref in ready:
            try:
                out.append(ray.get(ref))
            except (RayActorError, RayTaskError):
                continue
        return out

    def client(self, retries: int = 2) -> EngineClient:
        return EngineClient(self.handles, self.specs, retries=retries)

    def shutdown(self) -> None:
        self.supervisor.stop()
        self.supervisor.cleanup()
        for hs in self.handles.values():
            for h in hs:
                ray.kill(h)
        self.handles.clear()


class EngineClient:
    """Sends requests to the pools; picklable, so stages get their own copy."""

    def __init__(self, handles: Mapping[str, list[Any]], specs: Mapping[str, EngineSpec],
                 retries: int = 2) -> None:
        self.handles = {k: list(v) for k, v in handles.items()}
        self.specs = dict(specs)
        self.retries = retries
        self._rr = dict.fromkeys(self.handles, 0)
        self._rr_lock = threading.Lock()  # a stage actor's batches share one client
        self._model_to_backbone = {}
        for name, spec in self.specs.items():
            self._model_to_backbone.setdefault((spec.model, spec.revision), name)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_rr_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._rr_lock = threading.Lock()

    def backbone_of(self, request: ChatRequest) -> str:
        try:
            return self._model_to_backbone[(request.model, request.revision)]
        except KeyError:
            raise KeyError(f"no backbone serves model {request.model!r}") from None

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        """Answer every request; all backbones and replicas work at once."""
        results: list[Completion | None] = [None] * len(requests)
        pending: list[int] = list(range(len(requests)))
        attempt = 0
        last_error: dict[int, str] = {}
        while pending:
            inflight = self._submit(requests, pending)
            failed: list[int] = []
            for actor, idxs, ref in inflight:
                spec = self.specs[self.backbone_of(requests[idxs[0]])]
                try:
                    out = ray.get(ref, timeout=spec.request_timeout_s)
                    for i, d in zip(idxs, out, strict=True):
                        results[i] = Completion(**d)
                except GetTimeoutError:
                    log.warning("engine replica hung past %.0fs; restarting it", spec.request_timeout_s)
                    ray.kill(actor, no_restart=False)
                    failed += idxs
                    last_error.update(dict.fromkeys(idxs, "engine timed out"))
                except (RayActorError, RayTaskError) as e:
                    log.warning("engine replica failed (%s); retrying", type(e).__name__)
                    failed += idxs
                    msg = str(e).strip().splitlines()[-1][:300] if str(e).strip() else type(e).__name__
                    last_error.update(dict.fromkeys(idxs, f"engine error: {msg}"))
            attempt += 1
            if failed and attempt > self.retries:
                for i in failed:
                    results[i] = Completion("", 0, 0, error=last_error.get(i, "engine failed"))
                break
            pending = failed
            if pending:
                self._await_replicas({id(a): a for a, idxs, _ in inflight
                                      if set(idxs) & set(failed)}.values())
        return [r if r is not None else Completion("", 0, 0, error="engine failed") for r in results]

    @staticmethod
    def _await_replicas(actors, timeout_s: float = 120.0) -> None:
        """Wait (bounded) until restarted replicas answer again before retrying on them."""
        deadline = time.time() + timeout_s
        for actor in actors:
            while time.time() < deadline:
                try:
                    ray.get(actor.stats.remote(), timeout=max(1.0, deadline - time.time()))
                    break
                except (RayActorError, GetTimeoutError):
                    time.sleep(0.5)

    def _submit(self, requests: Sequence[ChatRequest], idxs: Sequence[int]):
        by_backbone: dict[str, list[int]] = {}
        for i in idxs:
            by_backbone.setdefault(self.backbone_of(requests[i]), []).append(i)
        inflight = []
        for name, members in by_backbone.items():
            replicas = self.handles[name]
            size = max(1, self.specs[name].max_batch_size)
            chunks = [members[j:j + size] for j in range(0, len(members), size)]
            for chunk in chunks:
                with self._rr_lock:
                    actor = replicas[self._rr[name] % len(replicas)]
                    self._rr[name] += 1
                ref = actor.generate.remote([requests[i].to_dict() for i in chunk])
                inflight.append((actor, chunk, ref))
        return inflight

    def count_tokens(self, backbone: str, texts: Sequence[str]) -> list[int]:
        actor = self.handles[backbone][0]
        return ray.get(actor.count_tokens.remote(list(texts)))
