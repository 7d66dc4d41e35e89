"""What a coordination method is: rounds of LLM calls over one sample's state, then an outcome.

A method never talks to an engine. Each round it *plans* the calls a sample needs given what
the earlier rounds returned (an empty plan means the sample issues no call this round, e.g.
a lazy coordinator or an early stop); the pipeline runs the planned calls through the
generation cache and the shared engines and appends the results to the state. After the
last round `finish` turns the state into an `Outcome`. Everything in the state is JSON, so
a row can cross Ray Data stages and processes unchanged.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from df_ray.core.types import Decision, Observation
from df_ray.engines.base import ChatRequest, Message, SamplingParams
from df_ray.tasks.base import Sample, Task


@dataclass(frozen=True, slots=True)
class Call:
    """One planned LLM call: who answers (an agent id), in what role, with what request."""

    role: str
    agent: str
    request: ChatRequest


@dataclass(slots=True)
class CallRecord:
    """A finished call as the state keeps it."""

    round: int
    role: str
    agent: str
    key: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool = False
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)
class SampleState:
    """A sample on its way through the rounds. ``data`` is the method's JSON scratch space."""

    sample: Sample
    calls: list[CallRecord] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    done: bool = False

    def records(self, *, round: int | None = None, role: str | None = None) -> list[CallRecord]:
        return [c for c in self.calls
                if (round is None or c.round == round) and (role is None or c.role == role)]

    def to_dict(self) -> dict:
        return {"sample": asdict(self.sample), "calls": [c.to_dict() for c in self.calls],
                "data": self.data, "done": self.done}

    @classmethod
    def from_dict(cls, d: dict) -> SampleState:
        return cls(sample=Sample(**d["sample"]), calls=[CallRecord(**c) for c in d["calls"]],
                   data=dict(d.get("data") or {}), done=bool(d.get("done")))


@dataclass(frozen=True, slots=True)
class AgentView:
    """What a method needs to know about an agent to build its requests."""

    id: str
    model: str
    revision: str | None
    sampling: SamplingParams
    seed: int
    system_prompt: str | None = None


def agent_view(cfg: Any, agent_id: str) -> AgentView:
    """The AgentView of ``agent_id`` in a RunConfig (its backbone's model, its sampling)."""
    a = cfg.agent(agent_id)
    spec = cfg.backbones[a.backbone]
    return AgentView(id=a.id, model=spec.model, revision=spec.revision,
                     sampling=SamplingParams(temperature=a.temperature, top_p=a.top_p,
                                             max_tokens=a.max_tokens),
                     seed=a.seed, system_prompt=a.system_prompt)


@dataclass
class MethodContext:
    """Everything a method may use besides the sample: the task, the agents, the method's
    settings and a token counter per agent (the engine's own tokenizer)."""

    task: Task
    agents: list[AgentView]
    coordinator: AgentView | None
    settings: Any  # the RunConfig (kept untyped here so methods stay importable without Ray)
    calibration: Any = None  # df_ray.core.Calibration or None
    count_tokens: Callable[[str, str], int] = lambda agent, text: len(text.split())
    run_seed: int = 0

    def agent(self, agent_id: str) -> AgentView:
        for a in [*self.agents, *([self.coordinator] if self.coordinator else [])]:
            if a.id == agent_id:
                return a
        raise KeyError(agent_id)

    def request(self, agent: AgentView, user: str, *, sample: Sample, slot: str = "0",
                history: Sequence[Message] = (), temperature: float | None = None) -> ChatRequest:
        """Build a request. The seed depends on the agent, the sample and a slot name only, so
        the same call made by two methods (or two configurations) is one cache entry."""
        msgs: list[Message] = []
        if agent.system_prompt:
            msgs.append(Message("system", agent.system_prompt))
        msgs.extend(history)
        msgs.append(Message("user", user))
        sampling = agent.sampling
        if temperature is not None:
            sampling = SamplingParams(temperature=temperature, top_p=sampling.top_p,
                                      max_tokens=sampling.max_tokens, stop=sampling.stop)
        return ChatRequest(model=agent.model, revision=agent.revision, messages=tuple(msgs),
                           sampling=sampling, seed=derive_seed(agent.seed, sample.id, slot))


def derive_seed(agent_seed: int, sample_id: str, slot: str) -> int:
    h = hashlib.sha256(f"{agent_seed}\x00{sample_id}\x00{slot}".encode()).digest()
    return int.from_bytes(h[:4], "big") & 0x7FFFFFFF


@dataclass
class Outcome:
    """What a method concluded for one sample.

    ``final`` is the answer to grade (None: no valid answer); ``agent_observations`` are the
    independent first-round answers (candidate reachability is measured on them);
    ``decision`` is DarkForest's decision (None for other methods); ``extra`` any further
    per-sample fields worth keeping (belief, evidence tokens...).
    """

    final: Observation | None
    agent_observations: list[Observation] = field(default_factory=list)
    decision: Decision | None = None
    t_cross: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Method(ABC):
    """A coordination method: ``rounds`` rounds of planned calls, then ``finish``."""

    name: ClassVar[str]

    def __init__(self, **args: Any) -> None:
        unknown = set(args) - set(self.arg_names())
        if unknown:
            raise ValueError(f"method {self.name!r}: unknown method_args {sorted(unknown)}; "
                             f"allowed: {sorted(self.arg_names())}")

    @classmethod
    def arg_names(cls) -> tuple[str, ...]:
        return ()

    @property
    @abstractmethod
    def rounds(self) -> int:
        """The most rounds any sample can take."""

    @abstractmethod
    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        """The calls this sample needs in ``round`` (empty: none)."""

    @abstractmethod
    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        """Turn the finished state into an outcome."""

    def max_calls_per_sample(self, ctx: MethodContext) -> int | None:
        """Upper bound on calls per sample (documented per method; None when unbounded)."""
        return None
