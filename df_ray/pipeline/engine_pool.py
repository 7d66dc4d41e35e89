"""Long-lived engine actors: one pool per backbone, started once per job and shared by every
stage, round and configuration of that job.

Each replica is a Ray actor that owns one engine (a vLLM engine pinned to one GPU with
``num_gpus``, an embedded model on CPU threads, an HTTP client, or a scripted engine).
`EngineClient` is what stages hold: it spreads a batch over the replicas of a backbone,
keeps every backbone's requests in flight together, and turns engine faults into bounded
retries (a crashed replica is restarted by Ray; one that stops answering everything is killed
and restarted) and, when retries run out, into per-request errors rather than a crashed job.
A request that hangs alone is cancelled by its engine at ``request_timeout_s`` and is one
failed call; its replica and batch-mates are untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

from df_ray.engines.base import ChatRequest, Completion, route, timed_out
from df_ray.engines.spec import EngineSpec
from df_ray.pipeline.error_text import first_line, last_line

log = logging.getLogger(__name__)


#: Calls one replica takes at once (each an awaiting coroutine; the engine decides what runs).
ACTOR_CONCURRENCY = 8192

#: Seconds past ``request_timeout_s`` the client gives an engine to cancel a request itself
#: before it asks whether the replica still answers (at least this, or a quarter of the timeout).
CANCEL_GRACE_S = 5.0

#: Seconds a replica gets to answer the client's liveness question (its ``stats``).
PROBE_S = 10.0

#: A request unanswered this many ``request_timeout_s`` on a replica that keeps answering
#: others is failed by the client alone (for an engine that cannot cancel a request itself).
CLIENT_CANCEL_TIMEOUTS = 3

#: Times a request may meet its replica restarting (Ray's ``ActorUnavailableError``: the call
#: never reached a live replica) without it counting as one of its retries.
UNAVAILABLE_RETRIES = 5


#: How a request's last error starts when it met its replica restarting.
UNAVAILABLE = "engine unavailable (replica restarting)"


def cancel_grace_s(timeout_s: float) -> float:
    return max(CANCEL_GRACE_S, 0.25 * timeout_s)


@ray.remote(max_restarts=-1, max_concurrency=ACTOR_CONCURRENCY)
class EngineActor:
    """Hosts one engine replica (an async actor).

    Every request is handed to the engine as soon as it arrives and answered as soon as it
    finishes (`df_ray.engines.batching.Replica`): a continuous-batching engine (vLLM's
    async engine, the embedded llama.cpp decode loop) schedules it beside whatever is
    running; an engine that only takes whole batches gets them from one engine thread, up to
    ``max_batch_size``. A request the engine raised on comes back as ``{"failed": "Type:
    message"}`` for that request alone (the client retries it); the others are unaffected.
    """

    def __init__(self, spec: dict[str, Any], backbone: str = "", replica: int = 0,
                 token: str | None = None, plugins: tuple = ((), ())) -> None:
        from df_ray.engines import make_engine
        from df_ray.engines.batching import Replica
        from df_ray.pipeline import engine_health, faults, lifeline
        from df_ray.plugins import load_in_worker

        load_in_worker(*plugins)  # the driver's plugins (an engine kind's, a responder's)
        faults.install(engine_health.replica_label(backbone, replica))
        lifeline.hold()
        self.spec = EngineSpec.model_validate(spec)
        report = engine_health.LifeReport(token, backbone, replica)
        report.set("starting")
        try:
            self.engine = make_engine(self.spec)
            engine_health.smoke_test(self.engine, self.spec)
        except BaseException as e:
            report.set("failed", error=first_line(e, typed=True),
                       detail=engine_health.describe_exception(e))
            self.__ray_shutdown__()  # a restart must find the GPU memory free
            raise
        report.set("ready")
        self.replica = Replica(self.engine, self.spec.batch_size_cap)
        self.capacity = engine_capacity(self.engine, self.spec)

    def __ray_shutdown__(self) -> None:
        """Close the engine (vLLM: its engine-core processes and GPU memory) when the actor
        ends gracefully or its start failed; a killed actor's are ended by
        ``df_ray.engines.reaper``."""
        close = getattr(self.__dict__.pop("engine", None), "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()

    async def generate(self, requests: list[dict]) -> list[dict]:
        from df_ray.pipeline import engine_health

        return await engine_health.replica_answers(self.replica, requests)

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return await asyncio.wrap_future(self.replica.count_tokens(list(texts)))

    async def stats(self) -> dict[str, Any]:
        s = self.replica.stats()
        return {"model": self.spec.model, "served": s["served"],
                "batches": s["batches"] if s["batches"] is not None else s["generated"],
                "failed": s["failed"], "tokens": s["tokens"], "generated": s["generated"],
                "coalesced": s["coalesced"], "in_engine": s["in_engine"],
                "completion_tokens": s["completion_tokens"],
                "first_at": s["first_at"], "last_at": s["last_at"],
                "peak_in_engine": s["peak_in_engine"], "busy_area_s": s["busy_area_s"],
                "capacity": self.capacity, "continuous": s["continuous"]}


def engine_capacity(engine: Any, spec: EngineSpec) -> int:
    """Requests the engine works on at once: what a continuous-batching engine schedules
    (vLLM's ``max_num_seqs``, llama.cpp's ``n_parallel``), else its batch size."""
    cap = getattr(engine, "capacity", None)
    if cap is None:
        cap = getattr(engine, "n_parallel", None)
    return int(cap) if cap else spec.capacity


def _actor_options(spec: EngineSpec) -> dict[str, Any]:
    """Ray resources of one replica, as its kind's spec gives them (vLLM: one engine per
    GPU, times the tensor parallel size; embedded: the CPU threads it computes with)."""
    return dict(spec.ray_resources())


def _amount(x: float) -> str:
    return f"{x:g}"


def resource_problems(specs: Mapping[str, EngineSpec],
                      nodes: Sequence[Mapping[str, float]]) -> list[str]:
    """Why the backbones' replicas could never all start on a cluster of these nodes (each
    node's resources, as ``ray.nodes()`` gives them): a replica no node can hold, or more
    GPUs or CPUs asked for together than the cluster has. Empty when they fit."""
    problems: list[str] = []
    total_gpu = sum(float(n.get("GPU", 0)) for n in nodes)
    total_cpu = sum(float(n.get("CPU", 0)) for n in nodes)
    largest = (f"largest node {_amount(max((float(n.get('CPU', 0)) for n in nodes), default=0))}"
               f" CPUs, {_amount(max((float(n.get('GPU', 0)) for n in nodes), default=0))} GPUs")
    has = (f"the cluster has {_amount(total_gpu)} GPUs and {_amount(total_cpu)} CPUs on "
           f"{len(nodes)} node(s), {largest}")
    want_gpu = want_cpu = 0.0
    for name, spec in specs.items():
        opts = _actor_options(spec)
        gpu, cpu = float(opts["num_gpus"]), float(opts["num_cpus"])
        want_gpu += gpu * spec.replicas
        want_cpu += cpu * spec.replicas
        if gpu == 0 and cpu == 0:
            continue
        fits = any(float(n.get("GPU", 0)) >= gpu and float(n.get("CPU", 0)) >= cpu
                   for n in nodes)
        if not fits:
            problems.append(f"backbone {name!r} ({spec.kind}: {spec.model}) asks for "
                            f"{_amount(gpu)} GPUs and {_amount(cpu)} CPUs per replica "
                            f"(x{spec.replicas}); no node offers that: {has}")
    if not problems and (want_gpu > total_gpu or want_cpu > total_cpu):
        asks = ", ".join(f"{n!r} {_amount(float(_actor_options(s)['num_gpus']) * s.replicas)}"
                         f" GPUs / {_amount(float(_actor_options(s)['num_cpus']) * s.replicas)}"
                         " CPUs" for n, s in specs.items())
        problems.append(f"the backbones ask for {_amount(want_gpu)} GPUs and "
                        f"{_amount(want_cpu)} CPUs together ({asks}); {has}")
    return problems


def check_resources(specs: Mapping[str, EngineSpec]) -> None:
    """Before any engine starts: a `ConfigError` (exit 2) when the live cluster could never
    host every replica (`resource_problems`), instead of waiting for engines that cannot
    start. A cluster that adds nodes on demand sets ``autoscaling: true`` to skip it."""
    from df_ray.config import ConfigError

    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    problems = resource_problems(specs, nodes)
    if problems:
        raise ConfigError("; ".join(problems) + ". Lower replicas or num_gpus/n_threads, run "
                          "on a cluster that has them, or set autoscaling: true if the cluster "
                          "adds nodes on demand")


class EnginePool:
    """Starts the replicas of every backbone once; `handles` is what stages receive."""

    def __init__(self, backbones: Mapping[str, EngineSpec]) -> None:
        from df_ray.pipeline.engine_health import EngineSupervisor

        self.specs = dict(backbones)
        self.handles: dict[str, list[Any]] = {}
        self.token = uuid.uuid4().hex[:16]
        plugins = worker_plugins()
        for name, spec in self.specs.items():
            opts = _actor_options(spec)
            self.handles[name] = [
                EngineActor.options(**opts, name=None).remote(
                    spec.model_dump(mode="json"), name, i, self.token, plugins)
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

    def capacities(self, timeout_s: float = 30.0) -> dict[str, int]:
        """Requests each backbone's replicas work on at once, all replicas together, as the
        running engines report it (vLLM's ``max_num_seqs``, llama.cpp's ``n_parallel``, a
        static engine's batch size); the spec's figure for a replica that does not answer."""
        out: dict[str, int] = {}
        for name, hs in self.handles.items():
            refs = [h.stats.remote() for h in hs]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
            total = 0
            for ref in refs:
                with contextlib.suppress(RayActorError, RayTaskError):
                    total += int(ray.get(ref)["capacity"]) if ref in ready else 0
            fallback = self.specs[name].capacity * len(hs)
            out[name] = total if len(ready) == len(refs) and total else fallback
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


def worker_plugins() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The plugins this driver imported and the folders they came from, for an actor."""
    from df_ray.plugins import import_roots, loaded

    return loaded(), import_roots(loaded())


def _provider(specs: Mapping[str, EngineSpec]):
    """The module that builds pools and clients for a job with backbones served from outside
    it (their spec class's ``pool_provider``), or None."""
    import importlib

    mods = sorted({s.pool_provider for s in specs.values() if s.pool_provider})
    if len(mods) > 1:
        raise ValueError(f"backbones served by several providers at once: {mods}")
    return importlib.import_module(mods[0]) if mods else None


def make_pool(backbones: Mapping[str, EngineSpec]):
    """A job's engine pool: its own `EnginePool`, or its provider's pool when some backbone
    is served from outside the job (e.g. the shared Serve service)."""
    provider = _provider(backbones)
    return provider.make_pool(backbones) if provider is not None else EnginePool(backbones)


def make_client(handles: Mapping[str, list[Any]], specs: Mapping[str, EngineSpec],
                retries: int = 2):
    """The client a stage holds over a pool's handles (see `make_pool`)."""
    provider = _provider(specs)
    if provider is not None:
        return provider.make_client(handles, specs, retries=retries)
    return EngineClient(handles, specs, retries=retries)


class EngineClient:
    """Sends requests to the pools; picklable, so stages get their own copy.

    Each request goes, on its own, to the replica of its backbone with the fewest requests
    outstanding from this client (ties in turn), so a slow or busy replica gets less and a
    free one more; each answer is taken as it arrives. A replica that fails a request (it
    raised on it, or died) gets the request retried, at most ``retries`` times, on the least
    loaded replica once the failed one answers again.

    A request past its backbone's ``request_timeout_s`` is the engine's to cancel (llama.cpp
    frees its slot, vLLM aborts it, the HTTP client closes its connection): it comes back as
    one ``request_timeout`` failed call. Should it still be unanswered a grace later
    (`cancel_grace_s`), the client asks the replica whether it still answers: a replica that
    answered nothing for ``request_timeout_s`` while it had requests, or that does not answer
    the question within `PROBE_S`, has stopped answering everything; it is killed (Ray
    restarts it) and its in-flight requests are retried once on another replica (the
    restarted one when it has none). A replica that keeps answering others is left alone:
    the request waits for its engine, and after `CLIENT_CANCEL_TIMEOUTS` timeouts is failed
    by the client alone. A replica is killed once for the requests in flight on it, by
    whichever of the client's threads sees them late first; one already down (restarting,
    e.g. killed by another stage's client) is not killed again: its requests wait for it. A
    request that met its replica restarting (the call never reached a live replica) is
    retried without using up a retry (at most `UNAVAILABLE_RETRIES` times). When the retries
    run out the request is answered with its last error; its batch-mates are not.
    """

    def __init__(self, handles: Mapping[str, list[Any]], specs: Mapping[str, EngineSpec],
                 retries: int = 2) -> None:
        self.handles = {k: list(v) for k, v in handles.items()}
        self.specs = dict(specs)
        self.retries = retries
        self._load = {k: [0] * len(v) for k, v in self.handles.items()}
        self._turn = dict.fromkeys(self.handles, 0)
        self._lock = threading.Lock()  # a stage actor's batches share one client
        self._killed_at: dict[tuple[str, int], float] = {}  # replica -> when this client killed it

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
        state["_load"] = {k: [0] * len(v) for k, v in self.handles.items()}
        state["_killed_at"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def backbone_of(self, request: ChatRequest) -> str:
        return route(request, self.specs)

    # -- dispatch
    def _pick(self, name: str, avoid: set[tuple[str, int]] | frozenset = frozenset()) -> int:
        """The replica of ``name`` with the fewest outstanding requests (of those not in
        ``avoid``, when there are any); it gets one more."""
        with self._lock:
            load = self._load[name]
            usable = [i for i in range(len(load)) if (name, i) not in avoid] or list(
                range(len(load)))
            low = min(load[i] for i in usable)
            ties = [i for i in usable if load[i] == low]
            k = ties[self._turn[name] % len(ties)]
            self._turn[name] += 1
            load[k] += 1
            return k

    def _release(self, name: str, k: int) -> None:
        with self._lock:
            self._load[name][k] -= 1

    def _kill_once(self, name: str, k: int, since: float) -> bool:
        """Kill replica ``k`` of ``name`` (Ray restarts it) unless this client (any of its
        threads) already killed it after ``since``: whether this call killed it."""
        with self._lock:
            if self._killed_at.get((name, k), float("-inf")) >= since:
                return False
            self._killed_at[(name, k)] = time.monotonic()
        ray.kill(self.handles[name][k], no_restart=False)
        return True

    def outstanding(self) -> dict[str, list[int]]:
        """Requests outstanding per replica, per backbone (from this client)."""
        with self._lock:
            return {k: list(v) for k, v in self._load.items()}

    #: ``generate`` takes ``on_answer``: the driver then caches answers as they come.
    answers_as_they_come = True

    def generate(self, requests: Sequence[ChatRequest],
                 on_answer: Callable[[int, Completion], None] | None = None
                 ) -> list[Completion]:
        """Answer every request; all backbones and replicas work at once. ``on_answer(i,
        completion)`` is called, in this thread, for each request answered, as it is."""
        names = [self.backbone_of(r) for r in requests]
        results: list[Completion | None] = [None] * len(requests)
        last_error: dict[int, str] = {}
        hung: dict[int, int] = {}  # request -> replicas that stopped answering under it
        unavailable: dict[int, int] = {}  # request -> times it met its replica restarting
        tries: dict[int, int] = {}  # request -> failed attempts counted against ``retries``
        pending = list(range(len(requests)))
        avoid: set[tuple[str, int]] = set()
        while pending:
            before = dict(unavailable)
            failed, troubled = self._round(requests, names, pending, results, last_error,
                                           on_answer, hung, avoid, unavailable)
            for i in failed:
                met = unavailable.get(i, 0)
                if before.get(i, 0) < met <= UNAVAILABLE_RETRIES:
                    continue  # it never reached a live replica: not one of its retries
                tries[i] = tries.get(i, 0) + 1
            # in flight on two replicas that stopped answering: not retried a second time
            final = [i for i in failed if hung.get(i, 0) > 1 or tries.get(i, 0) > self.retries]
            for i in final:
                results[i] = Completion("", 0, 0, error=last_error.get(i, "engine failed"))
            pending = [i for i in failed if i not in final]
            avoid = set(troubled)
            if pending:
                # wait only for the restarted replicas the retries must go to (a backbone
                # with no other replica)
                self._await_replicas([a for (name, k), a in troubled.items()
                                      if all((name, j) in troubled
                                             for j in range(len(self.handles[name])))])
        return [r if r is not None else Completion("", 0, 0, error="engine failed")
                for r in results]

    def _round(self, requests: Sequence[ChatRequest], names: Sequence[str],
               idxs: Sequence[int], results: list, last_error: dict[int, str],
               on_answer: Callable[[int, Completion], None] | None = None,
               hung: dict[int, int] | None = None,
               avoid: set[tuple[str, int]] | frozenset = frozenset(),
               unavailable: dict[int, int] | None = None):
        """Send ``idxs`` (one call each) and take every answer as it comes: the requests that
        failed, and the replicas that failed them (``(backbone, replica) -> handle``).
        ``hung`` and ``unavailable`` count, per request, the replicas that stopped answering
        under it and the times it met its replica restarting."""
        hung = {} if hung is None else hung
        unavailable = {} if unavailable is None else unavailable
        inflight: dict[Any, tuple[int, str, int, float]] = {}
        sent: dict[Any, float] = {}
        for i in idxs:
            name = names[i]
            k = self._pick(name, avoid)
            ref = self.handles[name][k].generate.remote([requests[i].to_dict()])
            timeout_s = self.specs[name].request_timeout_s
            sent[ref] = now = time.monotonic()
            inflight[ref] = (i, name, k, now + timeout_s + cancel_grace_s(timeout_s))
        failed: list[int] = []
        troubled: dict[tuple[str, int], Any] = {}
        killed: set[tuple[str, int]] = set()
        while inflight:
            wait_s = min(d for *_, d in inflight.values()) - time.monotonic()
            refs = list(inflight)
            ready, rest = ray.wait(refs, num_returns=1, timeout=max(0.0, min(wait_s, 10.0)))
            if ready and rest:
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in ready:
                i, name, k, _ = inflight.pop(ref)
                self._release(name, k)
                try:
                    (d,) = ray.get(ref)
                except (RayActorError, RayTaskError) as e:
                    log.warning("engine replica %s/%d failed (%s); retrying", name, k,
                                type(e).__name__)
                    failed.append(i)
                    if isinstance(e, ActorUnavailableError):
                        unavailable[i] = unavailable.get(i, 0) + 1
                        last_error[i] = f"{UNAVAILABLE}: {last_line(e)}"
                    else:
                        last_error[i] = f"engine error: {last_line(e)}"
                    troubled[(name, k)] = self.handles[name][k]
                    continue
                if "failed" in d:
                    failed.append(i)
                    last_error[i] = f"engine error: {d['failed']}"
                    continue
                results[i] = Completion(**d)
                if on_answer is not None:
                    on_answer(i, results[i])
            now = time.monotonic()
            late = {(name, k) for (_i, name, k, deadline) in inflight.values()
                    if deadline <= now and (name, k) not in killed}
            answering = {key: self._answers(*key) for key in late}
            for ref, (i, name, k, deadline) in list(inflight.items()):
                if deadline > now:
                    continue
                actor = self.handles[name][k]
                timeout_s = self.specs[name].request_timeout_s
                if (name, k) not in killed and answering.get((name, k), False):
                    if now - sent[ref] < CLIENT_CANCEL_TIMEOUTS * timeout_s:
                        # it answers others: its engine cancels this request (or answers it)
                        inflight[ref] = (i, name, k, now + timeout_s)
                        continue
                    # an engine that did not cancel it: this request fails alone
                    log.warning("engine replica %s/%d left a request unanswered for %.0f s "
                                "while answering others; failing that request alone",
                                name, k, now - sent[ref])
                    with contextlib.suppress(Exception):
                        ray.cancel(ref)
                    del inflight[ref]
                    self._release(name, k)
                    results[i] = timed_out(timeout_s, engine="the engine client")
                    continue
                if (name, k) not in killed:
                    killed.add((name, k))
                    # not when it is down already (restarting: killed by another client) or
                    # was killed by another thread of this one since this request was sent
                    if answering.get((name, k)) is None:
                        log.warning("engine replica %s/%d stopped answering under a request "
                                    "and is restarting; waiting for it", name, k)
                    elif self._kill_once(name, k, since=sent[ref]):
                        log.warning("engine replica %s/%d stopped answering (nothing answered "
                                    "for %.0f s); restarting it", name, k, timeout_s)
                del inflight[ref]
                self._release(name, k)
                failed.append(i)
                hung[i] = hung.get(i, 0) + 1
                last_error[i] = (f"engine timed out: replica {k} stopped answering for "
                                 f"{timeout_s:g} s and was restarted")
                troubled[(name, k)] = actor
        return failed, troubled

    def _answers(self, name: str, k: int) -> bool | None:
        """Whether replica ``k`` of ``name`` still answers: it answers its ``stats`` within
        `PROBE_S` and answered some request within the last ``request_timeout_s`` (or has
        none in its engine). None: it is down (dead or restarting), which Ray is handling."""
        timeout_s = self.specs[name].request_timeout_s
        try:
            s = ray.get(self.handles[name][k].stats.remote(), timeout=PROBE_S)
        except RayActorError:
            return None
        except (RayTaskError, GetTimeoutError):
            return False
        except Exception:
            return False
        if not s.get("in_engine"):
            return True
        last = s.get("last_at") or s.get("first_at")
        return last is not None and time.time() - float(last) < timeout_s

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

    def count_tokens(self, backbone: str, texts: Sequence[str]) -> list[int]:
        """Token counts with ``backbone``'s tokenizer, through the same retries as a generation;
        when they run out, an `EngineFailure` with the one-line cause."""
        spec = self.specs[backbone]
        cause = "no answer"
        k = 0
        for _attempt in range(self.retries + 1):
            k = self._pick(backbone)
            actor = self.handles[backbone][k]
            since = time.monotonic()
            try:
                return list(ray.get(actor.count_tokens.remote(list(texts)),
                                    timeout=spec.request_timeout_s))
            except GetTimeoutError:
                cause = f"a token count got no answer in {spec.request_timeout_s:.0f} s"
                log.warning("engine replica %s/%d hung counting tokens; restarting it",
                            backbone, k)
                self._kill_once(backbone, k, since)
            except (RayActorError, RayTaskError) as e:
                cause = f"a token count failed: {last_line(e)}"
                log.warning("engine replica %s/%d failed counting tokens (%s); retrying",
                            backbone, k, type(e).__name__)
            finally:
                self._release(backbone, k)
            self._await_replicas([actor])
        from df_ray.pipeline.engine_health import EngineFailure

        raise EngineFailure(backbone, spec.model, k, "?",
                            f"{cause} ({self.retries + 1} attempts)")
