"""Engines that cannot generate are found when they start, not after the whole run.

Each engine replica makes a one-token smoke generation when it starts (and when Ray restarts
it), and reports every life of its process to Ray's key-value store: ``starting`` when it
begins, ``ready`` once the smoke generation answered, ``failed`` with the exception when the
start raised. The driver's `EngineSupervisor` reads those reports and fails the job at once,
with one message naming the backbone, model, replica, node and cause, when

- a replica's start raised (the exception and its first lines);
- a replica died while starting: a life still ``starting`` was replaced by a new one (the
  signal that killed it, from its fault log: see `df_ray.pipeline.faults`);
- a replica crash-loops: more than ``EngineSpec.max_restarts`` restarts within
  ``EngineSpec.restart_window_s`` seconds.

A replica that dies once while serving is restarted by Ray and its requests retried, as
before; the death is counted and shown in the run's summary. A replica whose node was lost
is restarted by Ray where its placement group can be placed again; meanwhile the engine client
sends its requests to the backbone's other replicas. When every replica of a backbone is on
lost nodes and none has been placed again within `lost_backbone_wait_s`, the job stops with
one line naming the backbone, the node lost and the capacity left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from df_ray.engines.base import ChatRequest, Message, SamplingParams
from df_ray.engines.spec import EngineSpec
from df_ray.errors import EngineFailure
from df_ray.pipeline import faults
from df_ray.pipeline.answer_streams import answer_of
from df_ray.pipeline.placement import bundle_text, replica_bundle
from df_ray.pipeline.ticker import Ticker

log = logging.getLogger(__name__)

T = TypeVar("T")

KV_PREFIX = "df_ray/engines"

#: How often the supervisor asks Ray which nodes are alive (seconds).
NODES_POLL_S = 2.0


def node_name(node: Mapping[str, Any]) -> str:
    """A node as its operator knows it (one entry of ``ray.nodes()``): its ``--node-name``,
    which Ray sets to the node's IP when none was given. Not the IP a worker finds from its
    own perspective (``ray.util.get_node_ip_address()`` in a worker: the interface that routes
    out, which differs from the node's address on a machine with several)."""
    return str(node.get("NodeName") or node.get("NodeManagerAddress") or "?")


def this_node_name(node_id: str) -> str:
    """`node_name` of the node with this id (one call to Ray's GCS); "?" when unknown."""
    import ray

    for n in ray.nodes():
        if n.get("NodeID") == node_id:
            return node_name(n)
    return "?"


def lost_backbone_wait_s() -> float:
    """Seconds a backbone may have no replica on a live node before the job stops
    (``DF_RAY_LOST_BACKBONE_WAIT_S``, default 60): long enough for a restart that can be
    placed, bounded for one that cannot."""
    return float(os.environ.get("DF_RAY_LOST_BACKBONE_WAIT_S", "60"))


#: The smoke request: one token, greedy.
SMOKE_PROMPT = "Reply with one word: OK."


class EngineStartError(RuntimeError):
    """The engine loaded but its smoke generation did not answer."""


def replica_label(backbone: str, replica: int) -> str:
    return f"engine-{backbone}-{replica}"


# --------------------------------------------------------------------------- in the replica


async def replica_answers(replica: Any, requests: list[dict],
                          journal: tuple[str, str] | None = None,
                          journals: Any = None, mark: bool = False) -> list[dict]:
    """A replica's answers to requests as dicts (``Replica.submit``), in order, for a Ray
    actor or a Serve deployment to return: a request the engine raised on comes back as
    ``{"failed": "Type: message"}`` alone (the caller retries it). With ``journal`` the
    answers are journaled there first (``journals``: the replica's
    `df_ray.pipeline.cache.journal.Journals`); with ``mark`` too, each answer on disk is
    marked ``"journaled": True`` (for a caller that reads the mark: its stage need not write
    it at once, `df_ray.pipeline.cache.write_behind`)."""
    reqs = [ChatRequest.from_dict(r) for r in requests]
    futs = replica.submit(reqs)
    for f in futs:
        with contextlib.suppress(Exception):  # answer_of says what it raised
            await asyncio.wrap_future(f)
    answers = [answer_of(f) for f in futs]
    if journal is not None and journals is not None:
        target = tuple(journal)
        on_disk = journals.write([(target, r, f.result())
                                  for r, f, a in zip(reqs, futs, answers, strict=True)
                                  if "failed" not in a])
        if mark and target in on_disk:
            for a in answers:
                if "failed" not in a and a["error"] is None:
                    a["journaled"] = True
    return answers


def smoke_test(engine: Any, spec: EngineSpec) -> None:
    """One greedy one-token generation; raises `EngineStartError` if it does not answer.

    An engine may provide its own ``smoke_test()`` (the scripted engine does, so that a test's
    responder is not asked a question it has no answer for)."""
    own = getattr(engine, "smoke_test", None)
    if callable(own):
        own()
        return
    req = ChatRequest(model=spec.model, revision=spec.revision,
                      messages=(Message("user", SMOKE_PROMPT),),
                      sampling=SamplingParams(temperature=0.0, max_tokens=1))
    out = engine.generate([req])
    if len(out) != 1:
        raise EngineStartError(f"smoke generation returned {len(out)} completions for 1 request")
    if out[0].error is not None:
        raise EngineStartError(f"smoke generation failed: {out[0].error}")


class LifeReport:
    """What one replica process tells the driver about itself (Ray's internal KV)."""

    def __init__(self, token: str | None, backbone: str, replica: int) -> None:
        self.token = token
        self.info: dict[str, Any] = {"pid": os.getpid(), "started": time.time(),
                                     "backbone": backbone, "replica": replica}
        try:
            import ray

            ctx = ray.get_runtime_context()
            self.info["node_id"] = ctx.get_node_id()
            self.info["node"] = this_node_name(self.info["node_id"])
            self.info["gpu_ids"] = [str(g) for g in ray.get_gpu_ids()]
        except Exception:
            pass
        self.key = (f"{KV_PREFIX}/{token}/{backbone}/{replica}/"
                    f"{time.time_ns():020d}-{os.getpid()}")

    def set(self, state: str, **extra: Any) -> None:
        if self.token is None:
            return
        self.info.update(state=state, at=time.time(), **extra)
        try:
            from ray.experimental.internal_kv import _internal_kv_put

            _internal_kv_put(self.key, json.dumps(self.info).encode(), overwrite=True)
        except Exception as e:
            log.warning("could not report engine state %s: %s", state, e)


def describe_exception(e: BaseException, lines: int = 4) -> str:
    """``Type: message`` plus the innermost lines of its traceback."""
    head = f"{type(e).__name__}: {e}".strip().splitlines()
    tb = traceback.extract_tb(e.__traceback__)[-lines:]
    where = [f"  {os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in tb]
    return "\n".join([*head[:lines], *where])


# --------------------------------------------------------------------------- on the driver


@dataclass(frozen=True)
class ReplicaDeath:
    """A replica process that died during the run (and was restarted)."""

    backbone: str
    replica: int
    node: str
    pid: int
    while_starting: bool
    cause: str

    def describe(self) -> str:
        when = "while starting" if self.while_starting else "while serving"
        return (f"engine {self.backbone!r} replica {self.replica} (pid {self.pid}, node "
                f"{self.node}) died {when}: {self.cause}")


class EngineSupervisor:
    """Watches every replica's life reports from a driver thread (see module docstring).

    ``failure`` is set (an `EngineFailure`) when the job must stop; ``on_failure`` is called
    once with it. ``deaths`` lists replica processes that died and were restarted.
    """

    def __init__(self, token: str, specs: Mapping[str, EngineSpec],
                 on_failure: Callable[[EngineFailure], None] | None = None,
                 interval_s: float = 0.5) -> None:
        self.token = token
        self.specs = dict(specs)
        self.on_failure = on_failure
        self.interval_s = interval_s
        self.failure: EngineFailure | None = None
        self.deaths: list[ReplicaDeath] = []
        self._final: dict[str, dict] = {}  # lives whose state will not change any more
        self._counted: set[str] = set()
        self._ticker = Ticker("df-ray-engine-supervisor", interval_s, self._tick)
        self._check_lock = threading.Lock()
        self._nodes_at = 0.0  # when the nodes were last read
        self._lost_since: dict[str, float] = {}  # backbone -> since when no replica is up

    # -- lifecycle
    def start(self) -> EngineSupervisor:
        self._ticker.start()
        return self

    def stop(self) -> None:
        self._ticker.stop(timeout_s=5)

    def _tick(self) -> bool:
        """One poll; True (stop polling) once the job must stop."""
        try:
            self.check()
        except Exception as e:
            log.debug("engine supervisor poll failed: %s", e)
        return self.failure is not None

    # -- reading the reports
    def lives(self) -> dict[tuple[str, int], list[dict]]:
        from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_list

        out: dict[tuple[str, int], list[dict]] = {}
        for raw in sorted(_internal_kv_list(f"{KV_PREFIX}/{self.token}/")):
            key = raw.decode() if isinstance(raw, bytes) else raw
            info = self._final.get(key)
            if info is None:
                val = _internal_kv_get(key)
                if val is None:
                    continue
                info = json.loads(val)
                if info.get("state") in ("ready", "failed"):
                    self._final[key] = info
            info = {**info, "key": key}
            out.setdefault((info["backbone"], int(info["replica"])), []).append(info)
        return out

    def check(self) -> EngineFailure | None:
        """Read the reports once; set (and return) ``failure`` when a replica cannot serve."""
        with self._check_lock:
            if self.failure is not None:
                return self.failure
            return self._check()

    def _check(self) -> EngineFailure | None:
        now = time.time()
        every = self.lives()
        for (backbone, replica), lives in every.items():
            spec = self.specs.get(backbone)
            if spec is None:
                continue
            for i, life in enumerate(lives):
                node = life.get("node") or "?"
                if life.get("state") == "failed":
                    return self._fail(EngineFailure(
                        backbone, spec.model, replica, node,
                        f"its start raised {life.get('error', 'an exception')}",
                        life.get("detail", "")))
                if i == len(lives) - 1 or life["key"] in self._counted:
                    continue
                # A life replaced by a newer one: its process died.
                self._counted.add(life["key"])
                starting = life.get("state") != "ready"
                cause = self._death_cause(backbone, replica, life)
                death = ReplicaDeath(backbone, replica, node, int(life.get("pid", 0)),
                                     starting, cause)
                self.deaths.append(death)
                log.debug("%s; Ray restarted it", death.describe())
                if starting:
                    return self._fail(EngineFailure(backbone, spec.model, replica, node,
                                                    f"died while starting: {cause}"))
            restarts = [life.get("started", now) for life in lives[1:]]
            recent = [t for t in restarts if now - t <= spec.restart_window_s]
            if len(recent) > spec.max_restarts:
                last = [d for d in self.deaths if (d.backbone, d.replica) == (backbone, replica)]
                cause = last[-1].cause if last else "its process keeps dying"
                return self._fail(EngineFailure(
                    backbone, spec.model, replica, lives[-1].get("node") or "?",
                    f"crash loop: restarted {len(recent)} times in "
                    f"{now - min(recent):.0f} s (max_restarts {spec.max_restarts} per "
                    f"{spec.restart_window_s:.0f} s); last death: {cause}"))
        return self._check_lost(every, now)

    def _check_lost(self, lives: Mapping[tuple[str, int], list[dict]],
                    now: float) -> EngineFailure | None:
        """A backbone whose replicas' latest lives are all on lost nodes for longer than
        `lost_backbone_wait_s` (no restart placed elsewhere): the job's failure."""
        if now - self._nodes_at < NODES_POLL_S:
            return None
        self._nodes_at = now
        import ray

        nodes = ray.nodes()
        dead = {n["NodeID"]: node_name(n) for n in nodes if not n.get("Alive")}
        wait_s = lost_backbone_wait_s()
        for backbone, spec in self.specs.items():
            latest = [(lives.get((backbone, i)) or [{}])[-1] for i in range(spec.replicas)]
            if not dead or any(life.get("node_id") not in dead for life in latest):
                self._lost_since.pop(backbone, None)
                continue
            since = self._lost_since.setdefault(backbone, now)
            if now - since < wait_s:
                continue
            ids = sorted({life["node_id"] for life in latest})
            lost = [f"{dead[i]} ({i[:8]})" for i in ids]
            live = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
            free = float(ray.available_resources().get("GPU", 0.0))
            total = sum(float(r.get("GPU", 0.0)) for r in live)
            cause = (f"no replica left: node {', '.join(lost)} was lost with its "
                     f"{spec.replicas} replica(s), and none could be placed again in "
                     f"{wait_s:.0f} s; {len(live)} live node(s) have {free:g} of {total:g} "
                     f"GPUs free, a replica asks for {bundle_text(replica_bundle(spec))}")
            return self._fail(EngineFailure(backbone, spec.model, 0, dead[ids[0]], cause))
        return None

    def ready(self) -> set[tuple[str, int]]:
        """Replicas whose latest life passed its smoke generation."""
        return {k for k, lives in self.lives().items() if lives[-1].get("state") == "ready"}

    @staticmethod
    def _death_cause(backbone: str, replica: int, life: dict) -> str:
        fault = faults.fault_of(replica_label(backbone, replica), int(life.get("pid", 0)),
                                life.get("node_id"))
        if fault is not None:
            return fault.describe()
        return ("its process died without a Python fault report (killed with SIGKILL, e.g. "
                "out of memory or by Ray, or it exited)")

    def _fail(self, failure: EngineFailure) -> EngineFailure:
        if self.failure is None:
            self.failure = failure
            if self.on_failure is not None:
                self.on_failure(failure)
        return self.failure

    def cleanup(self) -> None:
        try:
            from ray.experimental.internal_kv import _internal_kv_del

            _internal_kv_del(f"{KV_PREFIX}/{self.token}/", del_by_prefix=True)
        except Exception:
            pass


class NoSupervision:
    """The supervisor of a pool with no job-owned replica (every backbone served by the
    shared service, which restarts its own replicas): nothing to watch."""

    def __init__(self) -> None:
        self.failure = None
        self.deaths: list[ReplicaDeath] = []

    def check(self) -> None:
        return None


def until_failure(iterable: Iterable[T], failure: Callable[[], BaseException | None],
                  poll_s: float = 0.5) -> Iterator[T]:
    """Yield from ``iterable`` (consumed by a helper thread) until it ends, or raise
    ``failure()`` as soon as it returns an exception, without waiting for the next item.

    The pipeline's output iterator blocks until the next batch is graded; an engine that
    died would otherwise be noticed only when every retry of every request ran out."""
    q: queue.Queue = queue.Queue(maxsize=2)
    stop = threading.Event()

    def pump() -> None:
        it = iter(iterable)
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put(("item", item), timeout=poll_s)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    break
            else:
                q.put(("done", None))
        except BaseException as e:
            q.put(("error", e))
        finally:
            close = getattr(it, "close", None)
            if stop.is_set() and callable(close):
                with contextlib.suppress(Exception):
                    close()  # stops the pipeline's executor

    threading.Thread(target=pump, name="df-ray-results", daemon=True).start()
    try:
        while True:
            f = failure()
            if f is not None:
                raise f
            try:
                kind, item = q.get(timeout=poll_s)
            except queue.Empty:
                continue
            if kind == "item":
                yield item
            elif kind == "done":
                f = failure()
                if f is not None:
                    raise f
                return
            else:
                raise item
    finally:
        stop.set()
