"""A simulated continuous-batching engine: GPU-engine timing without a GPU, for measuring the
pipeline on CPU against a realistic engine.

It schedules like vLLM: up to ``capacity`` sequences run at once; every decode step takes
``step_s`` seconds (a memory-bound GPU step costs about the same for one sequence as for
many) and gives each running sequence one token; a waiting request takes a free slot before
the next step (continuous batching). Completion lengths vary as real ones do: each request's
length is drawn, by a hash of the request (so the same request always has the same length),
from a log-normal distribution of mean ``mean_tokens`` and shape ``sigma`` (long-tailed),
never more than the request's ``max_tokens`` and never fewer than the answer's own words
(whitespace tokens); a request with ``ignore_eos`` is ``max_tokens`` long. The text is the ``majority`` scripted
responder's answer (a seeded ``\\boxed{}`` answer with a confidence) padded to that length,
so methods parse and grade it.

    backbones:
      b1: {kind: simulated, model: m1,
           engine_args: {capacity: 64, step_s: 0.02, mean_tokens: 70, sigma: 1.0}}

The engine's own bound on a workload (what it does when every request is there from the
start, as vLLM's offline ``LLM.generate``) is :func:`offline_time` over the same lengths;
``lengths`` lists every request's length, in admission order. With ``DFPERF_SIM_LOG`` set to
a folder, every step's start, end, running sequences, the loop thread's CPU seconds so far
and the requests still queued are appended to ``<model>-<pid>.log`` there, and every
admitted request's length to ``<model>-<pid>.lengths``.

Where H100-like timing comes from (``capacity: 256``, ``step_s`` 0.02 and ``mean_tokens``
70, the cluster perf script's; the default capacity is 64): a memory-bound decode step of a 7-8B bf16 model reads its
~15 GB of weights once per step, about 5-7 ms of an H100's 3.35 TB/s; with 256 sequences of
short prompts in flight, attention over their KV cache and the scheduler bring vLLM's
measured step to 15-25 ms. So one replica makes 256 / 0.02 = 12,800 tokens/s at full
occupancy, and with 70-token answers about 180 requests/s (12,800 / 70); the 40 requests/s
per GPU used for head capacity is the rate at DarkForest's longer (~300-token) answers.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import math
import os
import queue
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from df_ray.engines.base import ChatRequest, Completion
from df_ray.engines.batching import admitted, generate_by_submit
from df_ray.engines.spec import EngineSpec

#: Sequences the engine runs at once by default.
DEFAULT_CAPACITY = 64
#: engine_args the engine takes, with their defaults.
DEFAULTS: dict[str, Any] = {"capacity": DEFAULT_CAPACITY, "step_s": 0.02, "mean_tokens": 70.0,
                            "sigma": 1.0, "responder": "majority"}


class SimulatedSpec(EngineSpec):
    """A simulated backbone: its timing is its ``engine_args`` (:data:`DEFAULTS`).

    It needs no GPU; on a simulated cluster (nodes that declare GPUs they do not have) give
    ``num_gpus: 1`` to place one replica per GPU as a vLLM backbone is placed, or
    ``tensor_parallel_size: N`` to ask for N GPUs on one node, as a tensor-parallel vLLM
    replica does."""

    capacity_arg = "capacity"
    default_capacity = DEFAULT_CAPACITY

    #: GPUs one replica spans, all on one node (as vLLM's ``tensor_parallel_size``); without
    #: ``num_gpus`` a replica asks for this many GPUs when it is above 1.
    tensor_parallel_size: int = Field(
        default=1, ge=1, le=64,
        description="GPUs one replica spans, on one node (as vLLM's); without num_gpus a replica "
                    "asks for this many GPUs when it is above 1")

    def default_num_gpus(self) -> float:
        return float(self.tensor_parallel_size) if self.tensor_parallel_size > 1 else 0.0


def draw_length(request: ChatRequest, mean_tokens: float, sigma: float) -> int:
    """A request's completion length: log-normal (mean ``mean_tokens``), by its hash;
    ``max_tokens`` for a request that ignores the end of sequence."""
    if request.sampling.ignore_eos:
        return max(1, request.sampling.max_tokens)
    h = hashlib.sha256(request.key().encode()).digest()
    u = (int.from_bytes(h[:8], "big") + 0.5) / 2.0**64
    mu = math.log(mean_tokens) - sigma * sigma / 2.0
    n = math.exp(mu + sigma * statistics.NormalDist().inv_cdf(u))
    return max(1, min(round(n), max(1, request.sampling.max_tokens)))


def finish_steps(lengths: Sequence[int], capacity: int,
                 ready: Sequence[int] | None = None) -> list[int]:
    """The step each request finishes at on this engine: request i waiting from step
    ``ready[i]`` (all from the start when None), admitted first come first served (in order,
    among those waiting together) into one of ``capacity`` slots, ``lengths[i]`` steps
    there."""
    ready = ready if ready is not None else [0] * len(lengths)
    order = sorted(range(len(lengths)), key=lambda i: (ready[i], i))
    done = [0] * len(lengths)
    running: list[tuple[int, int]] = []  # (finish step, request)
    now = q = 0
    while q < len(order) or running:
        while q < len(order) and ready[order[q]] <= now and len(running) < capacity:
            heapq.heappush(running, (now + lengths[order[q]], order[q]))
            q += 1
        nxt = [running[0][0]] if running else []
        if q < len(order) and len(running) < capacity:
            nxt.append(ready[order[q]])
        now = max(now, min(nxt))
        while running and running[0][0] <= now:
            f, i = heapq.heappop(running)
            done[i] = f
    return done


def offline_time(lengths: Sequence[int], capacity: int, step_s: float) -> float:
    """Seconds the engine takes over requests of these lengths when all are waiting from the
    start (admitted in order into free slots): its own bound on that work."""
    return max(finish_steps(lengths, capacity), default=0) * step_s


def _words(text: str) -> int:
    return len(text.split())


@dataclass
class _Seq:
    request: ChatRequest
    future: Future
    left: int
    length: int
    text: str


class SimulatedEngine:
    """The simulated continuous-batching engine (see the module docstring)."""

    concurrent_tokenize = True
    Spec = SimulatedSpec

    def __init__(self, spec: SimulatedSpec) -> None:
        from df_ray.engines.scripted import resolve_responder

        args = dict(spec.engine_args)
        unknown = sorted(set(args) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"simulated engine: unknown engine_args {unknown}; it takes "
                             f"{sorted(DEFAULTS)}")
        opts = {**DEFAULTS, **args}
        if spec.max_batch_size is not None and "capacity" not in args:
            opts["capacity"] = spec.max_batch_size
        self.model = spec.model
        self.capacity = int(opts["capacity"])
        self.step_s = float(opts["step_s"])
        self.mean_tokens = float(opts["mean_tokens"])
        self.sigma = float(opts["sigma"])
        if self.capacity < 1 or self.step_s < 0 or self.mean_tokens < 1 or self.sigma < 0:
            raise ValueError("simulated engine: capacity >= 1, step_s >= 0, mean_tokens >= 1 "
                             f"and sigma >= 0 are required; got {opts}")
        self.responder = resolve_responder(str(opts["responder"]))
        self.lengths: list[int] = []
        self.steps = 0
        self.busy_s = 0.0
        self.running_area = 0  # sum over steps of running sequences
        self._inbox: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="sim-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_spec(cls, spec: Any) -> SimulatedEngine:
        return cls(spec)

    # -- Engine protocol
    def count_tokens(self, text: str) -> int:
        return _words(text)

    @staticmethod
    def local_token_counter(spec: SimulatedSpec) -> Callable[[str], int]:
        """``count_tokens`` as a client runs it in its own process: words need no engine."""
        return _words

    def submit(self, request: ChatRequest) -> Future:
        f: Future = Future()
        self._inbox.put((request, f))
        return f

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        return generate_by_submit(self, requests)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def smoke_test(self) -> None:
        """Replicas' start-up check: nothing to load, nothing to ask."""

    # -- the scheduler
    def _loop(self) -> None:
        running: list[_Seq] = []
        log = os.environ.get("DFPERF_SIM_LOG")
        path = os.path.join(log, f"{self.model}-{os.getpid()}.log") if log else None
        while True:
            for seq in admitted(self._inbox, lambda: len(running) < self.capacity,
                                lambda: not running, functools.partial(self._seq, path=path)):
                running.append(seq)
            start = time.time()
            time.sleep(self.step_s)
            end = time.time()
            self.steps += 1
            self.busy_s += end - start
            self.running_area += len(running)
            if path:
                with open(path, "a") as fh:
                    fh.write(f"{start:.6f} {end:.6f} {len(running)} {time.thread_time():.4f} "
                             f"{self._inbox.qsize()}\n")
            still: list[_Seq] = []
            for s in running:
                s.left -= 1
                if s.left > 0:
                    still.append(s)
                    continue
                s.future.set_result(self._answer(s))
            running[:] = still

    def _seq(self, request: ChatRequest, f: Future, path: str | None) -> _Seq:
        """An admitted request: its answer and the length it is generated to."""
        text = self.responder(request)
        # At least the answer's own words: the answer is never cut.
        n = max(draw_length(request, self.mean_tokens, self.sigma), len(text.split()))
        self.lengths.append(n)
        if path:
            with open(path.removesuffix(".log") + ".lengths", "a") as fh:
                fh.write(f"{n}\n")
        return _Seq(request, f, n, n, text)

    @staticmethod
    def _answer(s: _Seq) -> Completion:
        text, pad = s.text, s.length - len(s.text.split())
        if pad > 0:
            text += "\n" + " ".join(["pad"] * pad)
        prompt = sum(len(m.content.split()) for m in s.request.messages)
        finish = "length" if s.length >= s.request.sampling.max_tokens else "stop"
        return Completion(text=text, prompt_tokens=prompt, completion_tokens=s.length,
                          finish_reason=finish)
