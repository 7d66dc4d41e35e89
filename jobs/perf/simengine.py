"""A simulated GPU engine for throughput studies, usable from any config as a scripted engine.

A continuous-batching GPU engine serves up to C sequences at once; a batch of up to C requests
takes ``t0 + per_token * max_tokens_in_batch`` seconds. This module reproduces that timing inside
the scripted engine (``df_ray.engines.scripted.ScriptedEngine``), so the whole pipeline (Ray Data
stages, engine actors, cache, grading) runs unchanged:

    backbones:
      b1: {kind: scripted, model: m1, script: "jobs.perf.simengine:sim_c8_t0.05_p0.001_n50"}

The attribute name carries the parameters (PEP 562 module ``__getattr__``):
``c`` capacity (requests per engine batch), ``t`` fixed cost per batch (s), ``p`` cost per
output token (s), ``n`` output tokens per answer (answers are padded to at least n whitespace tokens; every
batch costs ``t + p * n``). Answers are the builtin ``majority`` responder's (a seeded,
realistic disagreement with ``\\boxed{}`` and a confidence), padded to n tokens.

How the timing works: ScriptedEngine.generate(batch) calls the responder once per request, in
order. The responder finds its engine (it is built inside ScriptedEngine.__init__), reads the
size of the batch being served from ``engine.batches`` and sleeps ``t + p * n`` on the first
request of every chunk of C within that batch: a call with m requests takes ceil(m / C) batch
times, exactly like a GPU engine whose batches are capped at C and whose batch time is set by
its longest sequence. An underfilled batch costs as much as a full one, as on a GPU.

The simpler alternative, ``engine_args: {latency_s: x}``, is a capacity-1 engine (a batch of m
takes m * x seconds).
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass

from df_ray.engines.base import ChatRequest
from df_ray.engines.scripted import ScriptedEngine, majority

_NAME = re.compile(r"^sim((?:_[ctpn][0-9.eE-]+)*)$")


@dataclass(frozen=True)
class SimParams:
    capacity: int = 8
    t0: float = 0.05
    per_token: float = 0.001
    tokens: int = 50

    @property
    def batch_time(self) -> float:
        return self.t0 + self.per_token * self.tokens

    def name(self) -> str:
        return f"sim_c{self.capacity}_t{self.t0:g}_p{self.per_token:g}_n{self.tokens}"

    def script(self) -> str:
        return f"jobs.perf.simengine:{self.name()}"


def parse_name(name: str) -> SimParams:
    m = _NAME.match(name)
    if not m:
        raise AttributeError(name)
    kw = {}
    for part in m.group(1).split("_")[1:]:
        k, v = part[0], part[1:]
        if k == "c":
            kw["capacity"] = int(v)
        elif k == "t":
            kw["t0"] = float(v)
        elif k == "p":
            kw["per_token"] = float(v)
        elif k == "n":
            kw["tokens"] = int(v)
    return SimParams(**kw)


def _find_engine() -> ScriptedEngine | None:
    f = sys._getframe(1)
    while f is not None:
        obj = f.f_locals.get("self")
        if isinstance(obj, ScriptedEngine):
            return obj
        f = f.f_back
    return None


class SimResponder:
    """The responder; one per engine (built inside the engine's constructor)."""

    def __init__(self, params: SimParams) -> None:
        self.p = params
        self.engine = _find_engine()
        self._batches_seen = 0
        self._batch_start = 0
        self.busy_s = 0.0
        self.engine_batches = 0

    def _log(self, start: float, end: float) -> None:
        """With DFPERF_SIM_LOG set (a folder), append every engine batch's start and end."""
        folder = os.environ.get("DFPERF_SIM_LOG")
        if folder:
            model = self.engine.model if self.engine is not None else "?"
            with open(os.path.join(folder, f"{model}-{os.getpid()}.log"), "a") as f:
                f.write(f"{start:.6f} {end:.6f}\n")

    def __call__(self, request: ChatRequest) -> str:
        eng = self.engine
        if eng is not None:
            n_calls = len(eng.calls)
            if len(eng.batches) != self._batches_seen:
                self._batches_seen = len(eng.batches)
                self._batch_start = n_calls - 1
            idx = n_calls - 1 - self._batch_start
            if idx % self.p.capacity == 0:
                self.engine_batches += 1
                self.busy_s += self.p.batch_time
                start = time.time()
                time.sleep(self.p.batch_time)
                self._log(start, time.time())
        text = majority(request)
        words = text.split()
        if len(words) < self.p.tokens:
            text += "\n" + " ".join(["pad"] * (self.p.tokens - len(words)))
        return text


def __getattr__(name: str):
    params = parse_name(name)  # AttributeError for anything else
    # resolve_responder instantiates a class with no arguments: bind the parameters in one.
    return type(name, (SimResponder,), {"__init__": lambda self: SimResponder.__init__(self, params)})
