"""An in-process driver for methods: the pipeline's round loop without Ray.

``drive(method, samples, ctx, engine)``: for every round, plan each live sample's calls, answer
them with the scripted engine, append the records (the state goes through its JSON form
between rounds, as it does between Ray Data stages), then ``finish`` each sample.

Agents a1..a3 (a4 when a test asks for four) run on models m1..m3 (m4), the coordinator on mc; the ``Script`` responder answers
per (model, phase), the phase read from the prompt's text, so a test says "a2's debate
answer is C" in one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from df_ray.config import RunConfig
from df_ray.engines.base import ChatRequest
from df_ray.engines.scripted import ScriptedEngine, last_user_content, whitespace_tokens
from df_ray.methods import get_method
from df_ray.methods.base import (
    Call,
    CallRecord,
    Method,
    MethodContext,
    Outcome,
    SampleState,
    agent_view,
)
from df_ray.methods.prompts import (
    DEBATE_HEADER,
    MOA_AGGREGATE,
    RECONCILE_INTRO,
    VERDICT_CORRECT,
)
from df_ray.tasks import get_task
from df_ray.tasks.base import Sample

AGENTS = ("a1", "a2", "a3")
MODELS = {"a1": "m1", "a2": "m2", "a3": "m3", "a4": "m4", "coord": "mc"}
AGENT_OF = {m: a for a, m in MODELS.items()}

QUESTION = ("Which number is the sum of two and two?\n(A) 3\n(B) 4\n(C) 5\n(D) 6")


def make_sample(sid: str = "q1", question: str = QUESTION, gold: str = "B") -> Sample:
    return Sample(id=sid, task="mmlu_pro", question=f"[{sid}] {question}", gold=gold,
                  meta={"n_options": 4, "category": "math"})


def answer(letter: str, conf: float | None = 0.9, why: str = "Some reasoning.") -> str:
    text = f"{why}\nAnswer: {letter}"
    return text if conf is None else f"{text}\nConfidence: {conf}"


def config(*, agents: Sequence[str] = AGENTS, coordinator: bool = True,
           method: str = "darkforest", **over: Any) -> RunConfig:
    d: dict[str, Any] = {
        "benchmark": "mmlu_pro",
        "method": method,
        "backbones": {f"b{a}": {"kind": "scripted", "model": MODELS[a]}
                      for a in [*agents, "coord"]},
        "agents": [{"id": a, "backbone": f"b{a}"} for a in agents],
        "coordinator": {"id": "coord", "backbone": "bcoord"} if coordinator else None,
        "ablation": "no_calibration",
    }
    d.update(over)
    return RunConfig.model_validate(d)


def make_context(cfg: RunConfig, calibration: Any = None) -> MethodContext:
    return MethodContext(task=get_task(cfg.benchmark),
                         agents=[agent_view(cfg, a.id) for a in cfg.agents],
                         coordinator=agent_view(cfg, cfg.coordinator.id) if cfg.coordinator else None,
                         settings=cfg, calibration=calibration,
                         count_tokens=lambda agent, text: whitespace_tokens(text),
                         run_seed=cfg.seed)


# ----------------------------------------------------------------------------- responder


def phase(request: ChatRequest) -> str:
    """What kind of call a request is, from its last user message."""
    u = last_user_content(request)
    if DEBATE_HEADER in u:
        return "debate"
    if RECONCILE_INTRO in u:
        return "discussion"
    if u.startswith(MOA_AGGREGATE):
        return "moa"
    if u.startswith("Choose the "):
        return "select"
    if u.startswith("Rate the following"):
        return "score"
    if u.startswith("Improve your answer"):
        return "s2t"
    if u.startswith("Other models have refined"):
        return "t2s"
    if u.startswith("Combine the responses"):
        return "pool"
    if "Proposed solution:" in u and VERDICT_CORRECT in u:
        return "feedback"
    if "Using the feedback, write an improved solution" in u:
        return "refine"
    if u.startswith("You are the coordinator"):
        return "coordinator"
    return "independent"


@dataclass
class Script:
    """Answers by (agent, phase); a value may be a str, a list (one per successive call of
    that key) or a callable of the request. Unlisted keys get ``default``."""

    table: Mapping[tuple[str, str], Any] = field(default_factory=dict)
    default: str | Callable[[ChatRequest], str] = ""
    seen: dict[tuple[str, str], int] = field(default_factory=dict)

    def __call__(self, request: ChatRequest) -> str:
        key = (AGENT_OF.get(request.model, request.model), phase(request))
        val = self.table.get(key, self.default)
        if isinstance(val, list):
            i = self.seen.get(key, 0)
            self.seen[key] = i + 1
            val = val[min(i, len(val) - 1)]
        return val(request) if callable(val) else val


# ----------------------------------------------------------------------------- driver


@dataclass
class Run:
    states: list[SampleState]
    outcomes: list[Outcome]
    planned: list[tuple[int, str, Call]]  # (round, sample id, call)
    engine: ScriptedEngine

    def calls(self, sample_id: str | None = None, *, round: int | None = None,
              role: str | None = None) -> list[Call]:
        return [c for r, s, c in self.planned
                if (sample_id is None or s == sample_id) and (round is None or r == round)
                and (role is None or c.role == role)]

    def n_calls(self, sample_id: str | None = None) -> int:
        return len(self.calls(sample_id))

    @property
    def outcome(self) -> Outcome:
        return self.outcomes[0]

    @property
    def state(self) -> SampleState:
        return self.states[0]


def drive(method: Method, samples: Sequence[Sample], ctx: MethodContext,
          engine: ScriptedEngine) -> Run:
    states = [SampleState(sample=s) for s in samples]
    planned: list[tuple[int, str, Call]] = []
    for rnd in range(method.rounds):
        for st in states:
            if st.done:
                continue
            calls = method.plan(rnd, st, ctx)
            if not calls:
                continue
            comps = engine.generate([c.request for c in calls])
            for call, comp in zip(calls, comps, strict=True):
                planned.append((rnd, st.sample.id, call))
                st.calls.append(CallRecord(
                    round=rnd, role=call.role, agent=call.agent, key=call.request.key(),
                    text=comp.text, prompt_tokens=comp.prompt_tokens,
                    completion_tokens=comp.completion_tokens, error=comp.error))
        states = [SampleState.from_dict(json.loads(json.dumps(st.to_dict()))) for st in states]
    outcomes = [method.finish(st, ctx) for st in states]
    # Outcomes must be JSON-friendly where the pipeline stores them.
    for o in outcomes:
        json.dumps(o.extra, default=str)
    return Run(states, outcomes, planned, engine)


@pytest.fixture
def run_method():
    """run_method(name, script, method_args=..., samples=..., cfg=..., calibration=...)."""

    def run(name: str, script: Script | Callable[[ChatRequest], str] | str,
            method_args: Mapping[str, Any] | None = None, *, samples: Sequence[Sample] | None = None,
            cfg: RunConfig | None = None, calibration: Any = None,
            engine: ScriptedEngine | None = None) -> Run:
        cfg = cfg or config(method=name)
        method = get_method(name, **dict(method_args or {}))
        ctx = make_context(cfg, calibration)
        engine = engine or ScriptedEngine("scripted", script)
        run = drive(method, samples or [make_sample()], ctx, engine)
        bound = method.max_calls_per_sample(ctx)
        for st in run.states:
            assert bound is None or len(st.calls) <= bound
        return run

    return run
