"""Long-lived engine actors: one pool per backbone, started once per job and shared by every
stage, round and configuration of that job.

Each replica is a Ray actor that owns one engine (a vLLM engine pinned to one GPU with
``num_gpus``, an embedded model on CPU threads, an HTTP client, or a scripted engine).
`EngineClient` is what stages hold: it spreads batches over the replicas of a backbone (the
requests of all its threads go to a replica in one call per few milliseconds, and answers
stream back a few engine steps' worth at a time: `df_ray.pipeline.engine_mux`), keeps every backbone's
requests in flight together, and turns engine faults into bounded
retries (a crashed replica is restarted by Ray; one that stops answering everything is killed
and restarted) and, when retries run out, into per-request errors rather than a crashed job.
A request that hangs alone is cancelled by its engine at ``request_timeout_s`` and is one
failed call; its replica and batch-mates are untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

from df_ray.engines.base import ChatRequest, Completion, route, timed_out
from df_ray.engines.spec import EngineSpec
from df_ray.pipeline.engine_mux import Mux
from df_ray.pipeline.error_text import first_line, last_line
from df_ray.pipeline.placement import (  # noqa: F401 - the pool's public names too
    _actor_options,
    alone_text,
    bundle_text,
    gpus_text,
    replica_bundle,
    resource_problems,
    unplaced,
)

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

#: Requests of one backbone that a client sends one replica together, at least (a flight
#: with fewer goes whole to one replica): an actor call costs each side about 0.7 CPU-ms
#: whatever it carries, and each replica answers on a stream of its own
#: (`jobs/perf/engine_costs.py`), so a batch spread thin over many replicas costs several
#: times what it costs on one. More replicas share a flight only when it gives each a chunk.
MIN_CHUNK = 16

#: Seconds a job waits for its backbones' placement groups before it says what it asked for
#: and what the cluster has (the pre-start check has found that they fit).
PLACEMENT_WAIT_S = 120.0


#: Seconds a request waits for some replica of its backbone to answer again when none is up
#: (each down replica is probed meanwhile), before it fails with its last error.
REPLICA_WAIT_S = 120.0

#: How often calls that wait for a replica look again (seconds).
PARK_POLL_S = 0.5

#: Seconds a job's end waits for its replicas to finish their journals.
JOURNAL_CLOSE_S = 5.0

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
                 token: str | None = None, plugins: tuple = ((), ()),
                 target: str | None = None) -> None:
        from df_ray.engines import make_engine, validate_spec
        from df_ray.engines.batching import Replica
        from df_ray.pipeline import engine_health, faults, lifeline
        from df_ray.pipeline.answer_streams import AnswerStreams
        from df_ray.plugins import load_in_worker

        load_in_worker(*plugins)  # the driver's plugins (an engine kind's, a responder's)
        faults.install(engine_health.replica_label(backbone, replica))
        lifeline.hold()
        # built from the plan's "module:Class" (``target``), not from this worker's registry
        self.spec = validate_spec(spec, target)
        report = engine_health.LifeReport(token, backbone, replica)
        report.set("starting")
        try:
            self.engine = make_engine(self.spec, target)
            engine_health.smoke_test(self.engine, self.spec)
        except BaseException as e:
            report.set("failed", error=first_line(e, typed=True),
                       detail=engine_health.describe_exception(e))
            self.__ray_shutdown__()  # a restart must find the GPU memory free
            raise
        report.set("ready")
        self.replica = Replica(self.engine, self.spec.batch_size_cap)
        self.streams = AnswerStreams(self.replica)
        self.capacity = engine_capacity(self.engine, self.spec)

    def __ray_shutdown__(self) -> None:
        """Close the engine (vLLM: its engine-core processes and GPU memory) when the actor
        ends gracefully or its start failed; a killed actor's are ended by
        ``df_ray.engines.reaper``."""
        close = getattr(self.__dict__.pop("engine", None), "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()

    async def generate(self, requests: list[dict],
                       journal: tuple[str, str] | None = None) -> list[dict]:
        from df_ray.pipeline import engine_health

        return await engine_health.replica_answers(self.replica, requests, journal,
                                                   self.streams.journals)

    async def submit(self, session: str, items: list[tuple[int, dict, str]],
                     journal: tuple[str, str] | None = None) -> int:
        """Requests in one call, tagged; their answers go to the session's stream (and to
        the journal at ``journal``, `df_ray.pipeline.cache.journal`, before they are sent)."""
        return self.streams.submit(session, items, journal)

    async def close_journals(self) -> None:
        """Finish this replica's journals (its run is ending): they can then be folded."""
        self.streams.journals.close()

    async def answers(self, session: str):
        """A client's answer stream: ``(tag, answer dict)`` lists, a few engine steps'
        worth each (`df_ray.pipeline.answer_streams`)."""
        async for out in self.streams.stream(session):
            yield out

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return await asyncio.wrap_future(self.replica.count_tokens(list(texts)))

    async def stats(self) -> dict[str, Any]:
        s = self.replica.stats()
        return {"model": self.spec.model, "pid": os.getpid(), "served": s["served"],
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


def check_resources(specs: Mapping[str, EngineSpec],
                    per_config: Mapping[str, Mapping[str, EngineSpec]] | None = None) -> None:
    """Before any engine starts: a `ConfigError` (exit 2) when the live cluster could never
    host every replica (`resource_problems`), instead of waiting for engines that cannot
    start; with ``per_config`` (each configuration's own backbones) it also says what each
    configuration asks for alone (`alone_text`). A cluster that adds nodes on demand sets
    ``autoscaling: true`` to skip it."""
    from df_ray.config import ConfigError

    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    problems = resource_problems(specs, nodes)
    if problems:
        alone = alone_text(per_config or {}, nodes)
        raise ConfigError("; ".join(problems) + (f"; {alone}" if alone else "") + ". Lower "
                          "replicas or num_gpus/n_threads, run on a cluster that has them, or "
                          "set autoscaling: true if the cluster adds nodes on demand")


class EnginePool:
    """Starts the replicas of every backbone once; `handles` is what stages receive.

    Placement, as a cluster operator expects it: each backbone's replicas are the bundles of
    one placement group (`replica_bundle`: one replica per GPU, a tensor-parallel replica's
    GPUs in one bundle, so on one node) with the ``SPREAD`` strategy, so its replicas go to
    different nodes as far as the nodes allow and a lost node does not take the backbone with
    it; replicas that hold no resource are spread by the ``SPREAD`` scheduling strategy.

    ``engines``: each engine kind's ``"module:Class"`` (the run plans'), which the replicas
    build from; a kind it does not name is looked up here, in the driver."""

    def __init__(self, backbones: Mapping[str, EngineSpec],
                 engines: Mapping[str, str] | None = None) -> None:
        from df_ray.engines.spec import engine_targets
        from df_ray.pipeline.engine_health import EngineSupervisor
        from df_ray.plugins import worker_plugins

        self.specs = dict(backbones)
        targets = engine_targets(self.specs.values(), engines)
        self.handles: dict[str, list[Any]] = {}
        self.groups: dict[str, Any] = {}  # backbone -> its placement group
        self.token = uuid.uuid4().hex[:16]
        self._seen: dict[tuple[str, int, int], dict[str, Any]] = {}  # (name, i, pid) -> stats
        plugins = worker_plugins()
        for name, spec in self.specs.items():
            opts = _actor_options(spec)
            self.handles[name] = [
                EngineActor.options(**opts, name=None,
                                    scheduling_strategy=self._strategy(name, spec, i)).remote(
                    spec.model_dump(mode="json"), name, i, self.token, plugins,
                    targets[spec.kind])
                for i in range(spec.replicas)
            ]
        self.supervisor = EngineSupervisor(self.token, self.specs).start()

    def _strategy(self, name: str, spec: EngineSpec, replica: int) -> Any:
        """Replica ``replica``'s scheduling strategy: its bundle of the backbone's group."""
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = replica_bundle(spec)
        if not bundle:
            return "SPREAD"
        if name not in self.groups:
            self.groups[name] = placement_group([bundle] * spec.replicas, strategy="SPREAD",
                                                name=f"df-ray-{self.token}-{name}")
        return PlacementGroupSchedulingStrategy(placement_group=self.groups[name],
                                                placement_group_bundle_index=replica)

    def wait_placed(self, timeout_s: float = PLACEMENT_WAIT_S) -> None:
        """Until every backbone's placement group is placed; a `ConfigError` naming what was
        asked and what the cluster has when one is not within ``timeout_s``."""
        from df_ray.config import ConfigError

        deadline = time.time() + timeout_s
        for name, pg in self.groups.items():
            if pg.wait(timeout_seconds=max(1.0, deadline - time.time())):
                continue
            nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
            spec = self.specs[name]
            raise ConfigError(
                f"backbone {name!r}: its {spec.replicas} replica(s) of "
                f"{bundle_text(replica_bundle(spec))} could not be placed in {timeout_s:.0f} s "
                f"(the cluster has {gpus_text(nodes)}; other jobs may hold the rest)")

    @property
    def failure(self):
        """An `EngineFailure` once a replica cannot serve (the job must stop), else None."""
        return self.supervisor.failure

    def wait_ready(self, timeout_s: float = 900) -> None:
        """Block until every replica is placed (`wait_placed`), has loaded its engine and
        answered its smoke generation.

        Raises `EngineFailure` at once when a replica's start raises or its process dies
        while starting (see `df_ray.pipeline.engine_health`)."""
        self.wait_placed(min(timeout_s, PLACEMENT_WAIT_S))
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
        """Every replica's counters (served and failed requests, tokens), one row per life of
        its process: a replica lost with its node, or restarted, keeps in the totals the
        calls it served (its last counters seen)."""
        refs = {h.stats.remote(): (name, i)
                for name, hs in self.handles.items() for i, h in enumerate(hs)}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        for ref in ready:
            try:
                row = ray.get(ref)
            except (RayActorError, RayTaskError):
                continue
            name, i = refs[ref]
            self._seen[(name, i, int(row.get("pid", 0)))] = row
        return list(self._seen.values())

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
        self.close_journals()
        for hs in self.handles.values():
            for h in hs:
                ray.kill(h)
        self.handles.clear()
        from ray.util.placement_group import remove_placement_group

        for pg in self.groups.values():
            with contextlib.suppress(Exception):
                remove_placement_group(pg)
        self.groups.clear()

    def close_journals(self, timeout_s: float = JOURNAL_CLOSE_S) -> None:
        """Have every replica finish its journals (so that the run's end folds them); a
        replica that does not answer in time is left (its journals are finished when its
        process ends)."""
        refs = [h.close_journals.remote() for hs in self.handles.values() for h in hs]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for ref in ready:
            with contextlib.suppress(RayActorError, RayTaskError):
                ray.get(ref)


def _provider(specs: Mapping[str, EngineSpec]):
    """The module that builds pools and clients for a job with backbones served from outside
    it (their spec class's ``pool_provider``), or None."""
    import importlib

    mods = sorted({s.pool_provider for s in specs.values() if s.pool_provider})
    if len(mods) > 1:
        raise ValueError(f"backbones served by several providers at once: {mods}")
    return importlib.import_module(mods[0]) if mods else None


def make_pool(backbones: Mapping[str, EngineSpec], engines: Mapping[str, str] | None = None):
    """A job's engine pool: its own `EnginePool`, or its provider's pool when some backbone
    is served from outside the job (e.g. the shared Serve service). ``engines``: the engine
    kinds' targets (`EnginePool`)."""
    provider = _provider(backbones)
    if provider is not None:
        return provider.make_pool(backbones, engines)
    return EnginePool(backbones, engines)


def make_client(handles: Mapping[str, list[Any]], specs: Mapping[str, EngineSpec],
                retries: int = 2):
    """The client a stage holds over a pool's handles (see `make_pool`)."""
    provider = _provider(specs)
    if provider is not None:
        return provider.make_client(handles, specs, retries=retries)
    return EngineClient(handles, specs, retries=retries)


@dataclass
class _Call:
    """One request's (or token count's) life in the client: where it is, what it met."""

    name: str  # its backbone
    method: str  # the replica method: "generate" or "count_tokens"
    payload: Any
    tries: int = 0  # failed attempts counted against ``retries``
    unavailable: int = 0  # times it met its replica restarting (not counted, up to a bound)
    hung: int = 0  # replicas that stopped answering under it
    last_error: str = ""
    replica: int = -1  # where it was last sent
    parked_at: float = 0.0  # when it began waiting for a replica of its backbone to answer


@dataclass
class _Flight:
    """One actor call in flight: the calls it carries (by position) and those unanswered."""

    name: str
    k: int
    calls: list[int]
    left: set[int]
    sent: float
    deadline: float

    def take_all(self) -> list[int]:
        """The calls still unanswered (the flight is over for them)."""
        out = [self.calls[p] for p in sorted(self.left)]
        self.left.clear()
        return out


class EngineClient:
    """Sends requests to the pools; picklable, so stages get their own copy.

    A batch's requests for one backbone go to as few of its replicas as keep the load
    balanced: in chunks of at least `MIN_CHUNK` (a smaller batch whole to one replica), each
    to the replica with the fewest requests outstanding from this client, all threads
    counted (ties in turn), so a slow or busy replica gets less and a free one more, and
    the balance holds over the many batches a stage runs at once; retries are placed the
    same way. The requests that go to one replica, from every thread of the process,
    travel together (one ``EngineActor.submit`` per replica per few milliseconds, through
    the process's `Mux`), and answers come back on one stream per replica as their engine
    finishes them, a few engine steps' worth per Ray object, so a continuous-batching engine
    keeps its own order and Ray's costs are paid per engine step, not per request or batch.
    Every fault goes through one loop (`_serve`), for
    generations and token counts alike:

    - A replica that raised on a request: the request is retried at once on another replica,
      at most ``retries`` times.
    - A replica that is gone (its process died, its node was lost, or it is restarting: Ray's
      ``ActorDiedError`` / ``ActorUnavailableError``) is marked down in this client; its
      requests go at once to the backbone's other replicas, and no new one is sent to it until
      it answers a probe again (its restart may never be placed when its node was lost). A
      request that met a restarting replica is not charged a retry (at most
      `UNAVAILABLE_RETRIES` times). With no replica of the backbone left, requests wait for
      one to answer (`REPLICA_WAIT_S`; the job's supervisor stops the job sooner when none
      can be placed: `df_ray.pipeline.engine_health`).
    - A request past its backbone's ``request_timeout_s`` is the engine's to cancel
      (llama.cpp frees its slot, vLLM aborts it, the HTTP client closes its connection): it
      comes back as one ``request_timeout`` failed call. Should it still be unanswered a grace
      later (`cancel_grace_s`), the client asks the replica whether it still answers: one
      that answered nothing for ``request_timeout_s`` while it had requests, or that does not
      answer within `PROBE_S`, has stopped answering everything; it is killed (Ray restarts
      it), once for all the client's threads, and its requests are retried elsewhere (a
      request under two such replicas is not retried again). A replica that keeps answering
      others is left alone: the request waits for its engine, and after
      `CLIENT_CANCEL_TIMEOUTS` timeouts is failed by the client alone.

    When the retries run out a request is answered with its last error (a token count raises
    `EngineFailure`); its batch-mates are not.

    ``generate_rolling`` is ``generate`` for calls that lead to more (a sample's next round
    once its own calls are answered, `df_ray.evaluation.rolling`): the calls its answer
    callback returns join the same loop, and every fault path above applies to them.
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
        self._down: dict[tuple[str, int], float] = {}  # replica -> when it was found gone
        self._mux: Mux | None = None
        self.journal: tuple[str, str] | None = None
        #: keys of answers their replica journaled at ``journal`` before sending them
        self.journaled: set[str] = set()

    def journal_to(self, target: tuple[str, str] | None) -> None:
        """Have the replicas journal this client's answers at ``target`` (``(cache root,
        user)``: `df_ray.pipeline.cache.journal`) as they finish them."""
        with self._lock:
            self.journal = target
            if self._mux is not None:
                self._mux.journal = target

    @property
    def mux(self) -> Mux:
        """This process's pump to the replicas (`df_ray.pipeline.engine_mux`), one for all
        the threads of the client."""
        with self._lock:
            if self._mux is None:
                self._mux = Mux(self.handles, self.journal)
            return self._mux

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_mux")}
        state["_load"] = {k: [0] * len(v) for k, v in self.handles.items()}
        state["_killed_at"] = {}
        state["_down"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._mux = None

    def backbone_of(self, request: ChatRequest) -> str:
        return route(request, self.specs)

    # -- dispatch
    def _assign(self, name: str, n: int, avoid: set[tuple[str, int]] | frozenset = frozenset()
                ) -> list[tuple[int, int]] | None:
        """Where ``n`` requests of ``name`` go, as ``(replica, how many)``: as few chunks as
        keep the load balanced (one per `MIN_CHUNK` requests, at most one per usable
        replica), each to the replica with the fewest outstanding requests (ties in turn),
        of those not down (and not in ``avoid``, when others are left); each chunk is added
        to its replica's load before the next is placed. None: every replica is down."""
        with self._lock:
            load = self._load[name]
            up = [i for i in range(len(load)) if (name, i) not in self._down]
            usable = [i for i in up if (name, i) not in avoid] or up
            if not usable:
                return None
            chunks = max(1, min(len(usable), n // MIN_CHUNK))
            out = []
            for j in range(chunks):
                size = n // chunks + (j < n % chunks)
                low = min(load[i] for i in usable)
                ties = [i for i in usable if load[i] == low]
                k = ties[self._turn[name] % len(ties)]
                self._turn[name] += 1
                load[k] += size
                out.append((k, size))
            return out

    def _place(self, pending: dict[tuple[str, frozenset], list[int]], calls: list[_Call],
               outbox: dict[tuple[str, int], list[int]], parked: list[int]) -> None:
        """Give the calls sent since the last pass their replicas (`_assign`), a backbone's
        (that avoid the same replicas) together; calls whose backbone has no replica up wait
        in ``parked``."""
        for (name, avoid), idxs in pending.items():
            where = self._assign(name, len(idxs), avoid)
            if where is None:
                now = time.monotonic()
                for i in idxs:
                    calls[i].parked_at = calls[i].parked_at or now
                parked.extend(idxs)
                continue
            at = 0
            for k, size in where:
                for i in idxs[at:at + size]:
                    calls[i].replica, calls[i].parked_at = k, 0.0
                outbox.setdefault((name, k), []).extend(idxs[at:at + size])
                at += size
        pending.clear()

    def _release(self, name: str, k: int) -> None:
        with self._lock:
            self._load[name][k] -= 1

    def _mark_down(self, name: str, k: int, why: str) -> None:
        with self._lock:
            if (name, k) in self._down:
                return
            self._down[(name, k)] = time.monotonic()
            left = sum((name, j) not in self._down for j in range(len(self.handles[name])))
        log.warning("engine replica %s/%d is gone (%s); its requests go to the %d other "
                    "replica(s) of %s", name, k, why, left, name)

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
        def done(i: int, completion: Completion, ok: bool) -> Sequence[ChatRequest]:
            if ok and on_answer is not None:
                on_answer(i, completion)
            return ()

        return self._generate(requests, done)

    def generate_rolling(self, first: Sequence[ChatRequest],
                         on_answer: Callable[[int, Completion], Sequence[ChatRequest]]
                         ) -> list[Completion]:
        """``generate`` for requests that lead to more: ``on_answer(i, completion)`` is
        called, in this thread, once for each request when its final answer comes (an
        ``error`` completion when its retries ran out), and the requests it returns join the
        serve at once (the next indices), sent with the other threads' at the loop's next
        pass. Every answer, in index order. Should ``on_answer`` raise, the calls in flight
        are forgotten (their answers, should they come, are dropped) and it raises."""
        return self._generate(first, lambda i, c, _ok: on_answer(i, c))

    def _generate(self, requests: Sequence[ChatRequest],
                  done: Callable[[int, Completion, bool], Sequence[ChatRequest]]
                  ) -> list[Completion]:
        """Both ``generate``s: ``done(i, completion, answered)`` for each request's final
        answer (``answered``: the engine's, not an error), its requests added to the serve."""
        calls: list[_Call] = []
        results: list[Completion | None] = []
        raised: list[BaseException] = []  # what ``done`` raised: the serve stops

        def add(more: Sequence[ChatRequest]) -> None:
            for r in more:
                calls.append(_Call(self.backbone_of(r), "generate", (r.to_dict(), r.key())))
                results.append(None)

        def finish(i: int, completion: Completion, ok: bool) -> None:
            results[i] = completion
            if raised:
                return
            try:  # raised at the loop's next pass, not from inside its fault handling
                add(done(i, completion, ok))
            except BaseException as e:
                raised.append(e)

        def answered(i: int, d: Any) -> str | None:
            if "failed" in d:
                return f"engine error: {d['failed']}"
            if d.pop("journaled", False):
                self.journaled.add(calls[i].payload[1])
            finish(i, Completion(**d), True)
            return None

        def gave_up(i: int, completion: Completion | None) -> None:
            finish(i, completion or Completion(
                "", 0, 0, error=calls[i].last_error or "engine failed"), False)

        add(requests)
        self._serve(calls, answered, gave_up, lambda: raised[0] if raised else None)
        return [r if r is not None else Completion("", 0, 0, error="engine failed")
                for r in results]

    def count_tokens(self, backbone: str, texts: Sequence[str]) -> list[int]:
        """Token counts with ``backbone``'s tokenizer, through the same faults path as a
        generation; when its retries run out, an `EngineFailure` with the one-line cause."""
        call = _Call(backbone, "count_tokens", list(texts))
        out: list[list[int]] = []

        def answered(_i: int, value: Any) -> str | None:
            out.append(list(value))
            return None

        self._serve([call], answered, lambda _i, _c: None)
        if out:
            return out[0]
        from df_ray.pipeline.engine_health import EngineFailure

        cause = call.last_error.removeprefix("engine error: ")
        raise EngineFailure(backbone, self.specs[backbone].model, max(call.replica, 0), "?",
                            f"a token count failed: {cause} ({self.retries + 1} attempts)")

    # -- the one loop
    def _serve(self, calls: list[_Call], answered: Callable[[int, Any], str | None],
               gave_up: Callable[[int, Completion | None], None],
               halted: Callable[[], BaseException | None] = lambda: None) -> None:
        """Send every call and take each answer as it comes, through every fault (see the
        class docstring). Generations bound for one replica go as one flight (through the
        `Mux`: answers stream back as each finishes). ``answered(i, value)``
        returns an engine error for a value that is one (the call is retried), else None;
        ``gave_up(i, completion)`` ends a call whose retries ran out (``completion``: the
        client's own timeout answer, or None). Calls the two append to ``calls`` are sent
        at the loop's next pass; once ``halted()`` gives an exception, the calls not
        answered yet are forgotten and it is raised."""
        inflight: dict[int, _Flight] = {}  # the mux's flight id -> what it carries
        inbox: queue.SimpleQueue = queue.SimpleQueue()  # the mux's messages for this loop
        outbox: dict[tuple[str, int], list[int]] = {}  # replica -> calls to send it
        parked: list[int] = []  # calls whose backbone has no replica up
        probes: dict[Any, tuple[str, int, float]] = {}  # stats ref -> replica, sent
        killed: set[tuple[str, int]] = set()

        pending: dict[tuple[str, frozenset], list[int]] = {}  # calls to place (`_place`)

        def send(i: int, avoid: frozenset | set = frozenset()) -> None:
            pending.setdefault((calls[i].name, frozenset(avoid)), []).append(i)

        def failed(i: int, error: str, avoid: frozenset | set = frozenset(),
                   charged: bool = True) -> None:
            c = calls[i]
            c.last_error = error
            c.tries += charged
            if c.hung > 1 or c.tries > self.retries:
                gave_up(i, None)
            else:
                send(i, avoid)

        sent = 0
        try:
            while True:
                stop = halted()
                if stop is not None:
                    raise stop
                for i in range(sent, len(calls)):  # the first calls, then those answers added
                    send(i)
                sent = len(calls)
                self._place(pending, calls, outbox, parked)
                self._flush(outbox, inflight, calls, inbox)
                if not (inflight or parked):
                    return
                self._take(inflight, inbox, calls, answered, failed,
                           PARK_POLL_S if parked else 10.0)
                if inflight:
                    self._police(inflight, calls, killed, failed, gave_up)
                if parked:
                    self._unpark(parked, probes, calls, send, gave_up)
        except BaseException:  # a callback raised (the run stops): nothing left in flight
            self._abandon(outbox, inflight)
            raise

    def _abandon(self, outbox: dict[tuple[str, int], list[int]], inflight: dict) -> None:
        """Forget the calls not sent yet and those in flight (their answers, should they
        come, are dropped), and give their replicas back the load they counted."""
        for (name, k), idxs in outbox.items():
            for _ in idxs:
                self._release(name, k)
        outbox.clear()
        for ref, f in list(inflight.items()):
            self.mux.forget(ref)
            for _ in f.take_all():
                self._release(f.name, f.k)
        inflight.clear()

    def _flush(self, outbox: dict[tuple[str, int], list[int]], inflight: dict,
               calls: list[_Call], inbox: queue.SimpleQueue) -> None:
        """A replica's generations as one flight (the mux sends them with the other
        threads' in one submit, and their answers stream back); a token count on its own."""
        now = time.monotonic()
        for (name, k), idxs in outbox.items():
            timeout_s = self.specs[name].request_timeout_s
            deadline = now + timeout_s + cancel_grace_s(timeout_s)
            gens = [i for i in idxs if calls[i].method == "generate"]
            if gens:
                fid = self.mux.send(inbox, (name, k), "generate",
                                    [calls[i].payload for i in gens])
                inflight[fid] = _Flight(name, k, gens, set(range(len(gens))), now, deadline)
            for i in idxs:
                if calls[i].method != "generate":
                    fid = self.mux.send(inbox, (name, k), calls[i].method, calls[i].payload)
                    inflight[fid] = _Flight(name, k, [i], {0}, now, deadline)
        outbox.clear()

    def _take(self, inflight: dict, inbox: queue.SimpleQueue, calls: list[_Call], answered,
              failed, most_s: float) -> None:
        """Wait (at most until the nearest deadline, or ``most_s``) for answers, and handle
        each one that came."""
        if not inflight:
            time.sleep(PARK_POLL_S)
            return
        wait_s = min(f.deadline for f in inflight.values()) - time.monotonic()
        try:
            messages = [inbox.get(timeout=max(0.0, min(wait_s, most_s)))]
        except queue.Empty:
            return
        with contextlib.suppress(queue.Empty):
            while True:
                messages.append(inbox.get_nowait())
        for kind, ref, value in messages:
            f = inflight.get(ref)
            if f is None:
                continue  # over for this loop already (failed alone, or retried)
            try:
                if kind == "error":
                    raise value
            except RayActorError as e:
                del inflight[ref]
                self.mux.forget(ref)
                unavailable = isinstance(e, ActorUnavailableError)
                self._mark_down(f.name, f.k, type(e).__name__)
                prefix = UNAVAILABLE if unavailable else "engine error"
                for i in f.take_all():
                    self._release(f.name, f.k)
                    calls[i].unavailable += unavailable
                    failed(i, f"{prefix}: {last_line(e)}", {(f.name, f.k)},
                           charged=not unavailable or calls[i].unavailable > UNAVAILABLE_RETRIES)
                continue
            except RayTaskError as e:
                del inflight[ref]
                self.mux.forget(ref)
                log.warning("engine replica %s/%d failed (%s); retrying", f.name, f.k,
                            type(e).__name__)
                for i in f.take_all():
                    self._release(f.name, f.k)
                    failed(i, f"engine error: {last_line(e)}", {(f.name, f.k)})
                continue
            except Exception as e:  # anything else a call raised: a failed call, retried
                del inflight[ref]
                self.mux.forget(ref)
                for i in f.take_all():
                    self._release(f.name, f.k)
                    failed(i, f"engine error: {first_line(e, typed=True)}", {(f.name, f.k)})
                continue
            for pos, v in value:
                if pos not in f.left:
                    continue  # failed alone by the client meanwhile
                f.left.discard(pos)
                i = f.calls[pos]
                self._release(f.name, f.k)
                error = answered(i, v)
                if error is not None:
                    failed(i, error)
            if not f.left:
                del inflight[ref]
                self.mux.forget(ref)

    def _police(self, inflight: dict, calls: list[_Call], killed: set, failed,
                gave_up) -> None:
        """Calls past their deadline: wait for a replica that answers others (its engine
        cancels them), fail alone those it left unanswered too long, and kill (once) a
        replica that answers nothing, its calls going elsewhere."""
        now = time.monotonic()
        late = {(f.name, f.k) for f in inflight.values()
                if f.deadline <= now and (f.name, f.k) not in killed}
        answering = {key: self._answers(*key) for key in late}
        for ref, f in list(inflight.items()):
            if f.deadline > now:
                continue
            key = (f.name, f.k)
            timeout_s = self.specs[f.name].request_timeout_s
            del inflight[ref]
            if key not in killed and answering.get(key, False):
                if now - f.sent < CLIENT_CANCEL_TIMEOUTS * timeout_s:
                    # it answers others: its engine cancels these requests (or answers them)
                    f.deadline = now + timeout_s
                    inflight[ref] = f
                    continue
                log.warning("engine replica %s/%d left %d request(s) unanswered for %.0f s "
                            "while answering others; failing them alone", f.name, f.k,
                            len(f.left), now - f.sent)
                self.mux.forget(ref)  # its answers, should they come, are dropped
                for i in f.take_all():
                    self._release(f.name, f.k)
                    calls[i].last_error = f"no answer in {now - f.sent:.0f} s"
                    gave_up(i, timed_out(timeout_s, engine="the engine client"))
                continue
            self.mux.forget(ref)
            if key not in killed:
                killed.add(key)
                # not when it is down already (restarting: killed by another client) or
                # was killed by another thread of this one since these requests were sent
                if answering.get(key) is None:
                    log.warning("engine replica %s/%d stopped answering under a request "
                                "and is restarting; waiting for it", f.name, f.k)
                elif self._kill_once(f.name, f.k, since=f.sent):
                    log.warning("engine replica %s/%d stopped answering (nothing answered "
                                "for %.0f s); restarting it", f.name, f.k, timeout_s)
            for i in f.take_all():
                self._release(f.name, f.k)
                calls[i].hung += 1
                failed(i, f"engine timed out: replica {f.k} stopped answering for "
                          f"{timeout_s:g} s and was restarted", {key})

    def _unpark(self, parked: list[int], probes: dict, calls: list[_Call], send,
                gave_up) -> None:
        """Calls whose backbone had no replica up: probe the down replicas (their ``stats``);
        one that answers is up again and the calls go to it. A call that waited
        `REPLICA_WAIT_S` ends with its last error."""
        now = time.monotonic()
        for ref, (name, k, sent) in list(probes.items()):
            done, _ = ray.wait([ref], timeout=0)
            if not done and now - sent < PROBE_S:
                continue
            del probes[ref]
            if done:
                with contextlib.suppress(RayActorError, RayTaskError):
                    ray.get(ref)
                    with self._lock:
                        self._down.pop((name, k), None)
        waiting = {calls[i].name for i in parked}
        busy = {(n, k) for n, k, _ in probes.values()}
        for name in waiting:
            for k in range(len(self.handles[name])):
                if (name, k) in self._down and (name, k) not in busy:
                    probes[self.handles[name][k].stats.remote()] = (name, k, now)
        again, parked[:] = list(parked), []
        for i in again:
            c = calls[i]
            if now - c.parked_at > REPLICA_WAIT_S:
                c.last_error = (f"{c.last_error}; no replica of {c.name} answered for "
                                f"{REPLICA_WAIT_S:.0f} s")
                gave_up(i, None)
            else:
                send(i)

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
