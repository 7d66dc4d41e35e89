"""Methods on the scripted engine through the evaluation driver (``df_ray.evaluation``), the
same round loop the Ray stages run, in this process: ``run_method(name, script, args)``.

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
from df_ray.evaluation import Driver, Member, PlannedCall, build_context
from df_ray.methods import get_method
from df_ray.methods.base import Call, Outcome, SampleState
from df_ray.methods.prompt_templates import (
    DEBATE_HEADER,
    MOA_AGGREGATE,
    RECONCILE_INTRO,
    RECONCILE_JSON_FORMAT,
    RECONCILE_REVIEW,
    VERDICT_CORRECT,
)
from df_ray.methods.self_refine_fewshot import INSTRUCTION as REFINE_INSTRUCTION
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


# ----------------------------------------------------------------------------- responder


def phase(request: ChatRequest) -> str:
    """What kind of call a request is, from its last user message."""
    u = last_user_content(request)
    if DEBATE_HEADER in u:
        return "debate"
    if RECONCILE_INTRO in u or RECONCILE_REVIEW in u:
        return "discussion"
    if u.startswith("Q: ") and RECONCILE_JSON_FORMAT in u:
        return "reconcile"
    if u.startswith(MOA_AGGREGATE):
        return "moa"
    if u.startswith("Select ") and "models best suited" in u:
        return "select"
    if "Provide brief reasoning (2-3 key sentences)" in u:
        return "goa_initial"
    if u.startswith("Score the following"):
        return "score"
    if u.startswith("Refine your answer by considering"):
        return "s2t"
    if u.startswith("Other models refined their answers"):
        return "t2s"
    if u.startswith("Synthesize these model responses"):
        return "pool"
    if REFINE_INSTRUCTION in u:
        return "fewshot_feedback"
    if "Proposed solution:" in u and VERDICT_CORRECT in u:
        return "feedback"
    if "Using the feedback, write an improved solution" in u:
        return "refine"
    if u.startswith("You are the coordinator"):
        return "coordinator"
    return "independent"


def json_answer(letter: str | None, conf: float | str | None = 0.9,
                why: str = "Brief reasoning.") -> str:
    """A JSON answer {"reasoning", "answer", "confidence_level"} (GoA's and ReConcile's)."""
    d = {"reasoning": why, "answer": letter}
    if conf is not None:
        d["confidence_level"] = conf
    return json.dumps(d)


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


# ----------------------------------------------------------------------------- runs


@dataclass
class Run:
    """What a driver run left: final states, outcomes and every planned call."""

    states: list[SampleState]
    outcomes: list[Outcome]
    planned: list[PlannedCall]
    engine: ScriptedEngine

    def calls(self, sample_id: str | None = None, *, round: int | None = None,
              role: str | None = None) -> list[Call]:
        return [p.call for p in self.planned
                if (sample_id is None or self.states[p.row].sample.id == sample_id)
                and (round is None or p.round == round)
                and (role is None or p.call.role == role)]

    def n_calls(self, sample_id: str | None = None) -> int:
        return len(self.calls(sample_id))

    @property
    def outcome(self) -> Outcome:
        return self.outcomes[0]

    @property
    def state(self) -> SampleState:
        return self.states[0]


@pytest.fixture
def run_method():
    """run_method(name, script, method_args=..., samples=..., cfg=..., calibration=...)."""

    def run(name: str, script: Script | Callable[[ChatRequest], str] | str,
            method_args: Mapping[str, Any] | None = None, *, samples: Sequence[Sample] | None = None,
            cfg: RunConfig | None = None, calibration: Any = None,
            engine: ScriptedEngine | None = None) -> Run:
        cfg = cfg or config(method=name)
        method = get_method(name, **dict(method_args or {}))
        ctx = build_context(cfg, calibration, lambda agent, text: whitespace_tokens(text))
        engine = engine or ScriptedEngine("scripted", script)
        driver = Driver([Member(method, ctx)], engine, keep_plan=True)
        rows = driver.run(samples or [make_sample()])
        finished = driver.outcomes(rows)
        run = Run([states[0] for states in rows], [o for _, o, _ in finished], driver.planned,
                  engine)
        bound = method.max_calls_per_sample(ctx)
        for st in run.states:
            assert bound is None or len(st.calls) <= bound
        return run

    return run
