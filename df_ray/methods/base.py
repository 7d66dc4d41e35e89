"""What a coordination method is: rounds of LLM calls over one sample's state, then an outcome.

A method never talks to an engine. Each round it *plans* the calls a sample needs given what
the earlier rounds returned (an empty plan means the sample issues no call this round, e.g.
a lazy coordinator or an early stop); the evaluation driver (``df_ray.evaluation``) runs the
planned calls through the generation cache and an engine client and appends the results to
the state. After the last round `finish` turns the state into an `Outcome`. A sample's
rounds and its `finish` run in one process (the stage), so a method may keep what a round
computed for the next one or for `finish` in the state's ``memo``.

A method declares its settings as a pydantic ``Args`` model (``method_args`` in a config):
unknown keys, wrong types and out-of-range values are refused with the method, the field and
what is allowed. A method that weighs agents by held-out reliability says so with
``needs_calibration``; the records it fits on come from ``calibration_observations``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from df_ray.core.parsing import parse
from df_ray.core.types import Observation
from df_ray.engines.base import ChatRequest, Message, SamplingParams
from df_ray.methods.result_columns import RowMean
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
    #: Why the completion ended: "stop", "length" (cut off at max_tokens) or None (unknown).
    finish_reason: str | None = None
    #: Lone surrogates in the engine's text replaced by U+FFFD at the engine boundary.
    repaired: int = 0

    @property
    def reply(self) -> str:
        """The call's text, empty when the call failed."""
        return "" if self.error else self.text

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)
class SampleState:
    """A sample on its way through the rounds. ``data`` is the method's scratch space of
    JSON values (its JSON form, ``to_dict``, keeps it); ``memo`` holds objects a round built
    that a later round or ``finish`` reuses in the same process (not in the JSON form)."""

    sample: Sample
    calls: list[CallRecord] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: Set when the method, a parser or the grader raised for this sample: where and what
    #: (``plan round 0: ValueError: ...``); the sample then becomes an error row.
    error: str | None = None

    def records(self, *, round: int | None = None, role: str | tuple[str, ...] | None = None
                ) -> list[CallRecord]:
        """The calls of ``round`` (None: every round) made under ``role`` (or one of several
        roles; None: any role), in the order they were made."""
        roles = (role,) if isinstance(role, str) else role
        return [c for c in self.calls
                if (round is None or c.round == round) and (roles is None or c.role in roles)]

    def to_dict(self, *, with_sample: bool = True) -> dict:
        """The JSON form; without the sample when a row carries it once for every state."""
        d: dict[str, Any] = {"calls": [c.to_dict() for c in self.calls], "data": self.data,
                             "done": self.done, "error": self.error}
        if with_sample:
            d["sample"] = asdict(self.sample)
        return d

    @classmethod
    def from_dict(cls, d: dict, sample: Sample | None = None) -> SampleState:
        """From ``to_dict``'s form; ``sample`` when the dict was written without one."""
        if sample is None:
            sample = Sample(**d["sample"])
        return cls(sample=sample, calls=[CallRecord(**c) for c in d["calls"]],
                   data=dict(d.get("data") or {}), done=bool(d.get("done")),
                   error=d.get("error"))


@dataclass(frozen=True, slots=True)
class AgentView:
    """What a method needs to know about an agent to build its requests."""

    id: str
    model: str
    revision: str | None
    sampling: SamplingParams
    seed: int
    system_prompt: str | None = None
    #: The backbone's model card (what it is good at), when the config gives one.
    description: str | None = None
    #: The configuration's backbone the agent is bound to (its calls go there).
    backbone: str | None = None


def agent_view(cfg: Any, agent_id: str) -> AgentView:
    """The AgentView of ``agent_id`` in a RunConfig (its backbone's model, its sampling)."""
    a = cfg.agent(agent_id)
    spec = cfg.backbones[a.backbone]
    return AgentView(id=a.id, model=spec.model, revision=spec.revision,
                     sampling=SamplingParams(temperature=a.temperature, top_p=a.top_p,
                                             max_tokens=a.max_tokens,
                                             ignore_eos=a.ignore_eos),
                     seed=a.seed, system_prompt=a.system_prompt,
                     description=getattr(a, "description", None), backbone=a.backbone)


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
        """Build a request. The seed depends on the agent, the sample, a slot name and the run
        seed only, so the same call made by two methods (or two configurations) of one run
        seed is one cache entry, and another run seed samples anew."""
        msgs: list[Message] = []
        if agent.system_prompt:
            msgs.append(Message("system", agent.system_prompt))
        msgs.extend(history)
        msgs.append(Message("user", user))
        sampling = agent.sampling
        if temperature is not None:
            sampling = dataclasses.replace(sampling, temperature=temperature)
        return ChatRequest(model=agent.model, revision=agent.revision, messages=tuple(msgs),
                           sampling=sampling, seed=self.seed(agent, sample, slot),
                           backbone=agent.backbone)

    def seed(self, agent: AgentView, sample: Sample, slot: str) -> int:
        """The seed of ``agent``'s request for ``sample`` in ``slot`` (what :meth:`request`
        gives it): a method that draws a fallback from its request's seed asks here."""
        return derive_seed(agent.seed, sample.id, slot, self.run_seed)


def derive_seed(agent_seed: int, sample_id: str, slot: str, run_seed: int = 0) -> int:
    """A request's seed: a hash of the agent's seed, the sample, the slot and the run seed
    (``RunConfig.seed``). Run seed 0 hashes as before run seeds entered it, so the
    generations already cached for seed 0 stay valid."""
    blob = f"{agent_seed}\x00{sample_id}\x00{slot}"
    if run_seed:
        blob += f"\x00run{int(run_seed)}"
    h = hashlib.sha256(blob.encode()).digest()
    return int.from_bytes(h[:4], "big") & 0x7FFFFFFF


@dataclass
class Outcome:
    """What a method concluded for one sample.

    ``final`` is the answer to grade (None: no valid answer); ``agent_observations`` are the
    independent first-round answers (candidate reachability is measured on them);
    ``coordinator`` the coordinator's parsed answer when one was called, valid or not;
    ``t_cross`` the evidence tokens shown to the coordinator; ``extra`` any further
    JSON-ready per-sample fields worth keeping in the row's ``detail`` (the belief's
    clusters, votes...). ``columns`` holds the values of the method's ``result_columns``,
    ``graded`` the observations whose grade is one of them (None: not graded, a null):
    a declared column left out of both is null. ``selected`` is the answer the method's
    selection among the independent answers picked before any later decision (DarkForest's
    z*, a vote's winner); None: the plurality vote over ``agent_observations`` (its grade is
    the row's ``selected_correct``, df_ray.methods.result_columns.won_and_lost).
    """

    final: Observation | None
    agent_observations: list[Observation] = field(default_factory=list)
    coordinator: Observation | None = None
    t_cross: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, Any] = field(default_factory=dict)
    graded: dict[str, Observation | None] = field(default_factory=dict)
    selected: Observation | None = None


class MethodArgs(BaseModel):
    """A method's settings (``method_args``). Subclass it as ``Args`` inside the method, one
    field per setting, each with a description; unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class MethodArgsError(ValueError):
    """Bad ``method_args``; the message names the method, the field and what is allowed."""


_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def _type_name(ann: Any) -> str:
    """A readable type: ``int``, ``str | None``, ``one of 'a', 'b'``."""
    origin = get_origin(ann)
    if origin is Annotated:
        return _type_name(get_args(ann)[0])
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(ann))
    if origin in (Union, UnionType):
        return " | ".join(_type_name(a) for a in get_args(ann))
    if ann is type(None):
        return "None"
    return getattr(ann, "__name__", None) or str(ann).replace("typing.", "")


def describe_args(args_model: type[MethodArgs], only: Any = None) -> str:
    """Every field (or those in ``only``): name, type or allowed values with bounds, default,
    description."""
    lines = []
    for name, f in args_model.model_fields.items():
        if only is not None and name not in only:
            continue
        kind = _type_name(f.annotation)
        for m in f.metadata:
            kind += "".join(f", {sym} {getattr(m, attr)}" for attr, sym in _BOUNDS
                            if getattr(m, attr, None) is not None)
        default = ("required" if f.is_required()
                    else f"default {f.get_default(call_default_factory=True)!r}")
        desc = f": {f.description}" if f.description else ""
        lines.append(f"{name} ({kind}; {default}){desc}")
    return "; ".join(lines) if lines else "(none)"


def validate_args(method: str, args_model: type[MethodArgs], args: Any) -> MethodArgs:
    """``args`` (a mapping or an Args instance) as the method's Args, or MethodArgsError."""
    if isinstance(args, args_model):
        return args
    args = dict(args or {})
    unknown = sorted(set(args) - set(args_model.model_fields))
    if unknown:
        raise MethodArgsError(f"method {method!r}: unknown method_args {unknown}; allowed: "
                              f"{describe_args(args_model)}")
    try:
        return args_model.model_validate(args)
    except ValidationError as e:
        problems, fields = [], set()
        for err in e.errors():
            fields.add(err["loc"][0] if err["loc"] else None)
            loc = ".".join(str(x) for x in err["loc"])
            msg = err["msg"]
            ctx = err.get("ctx") or {}
            if "expected" in ctx:
                msg += f" (allowed: {ctx['expected']})"
            problems.append(f"method_args.{loc}: {msg}, got {err.get('input')!r}")
        raise MethodArgsError(f"method {method!r}: " + "; ".join(problems)
                              + f". Allowed: {describe_args(args_model, fields)}") from None


def rekeyed(obs: list[Observation], ctx: MethodContext, state: SampleState,
            slot: str = "agent") -> list[Observation]:
    """The observations as the benchmark keys them into candidates (HumanEval's behaviour
    keys; unchanged for a benchmark without ``rekey``). The sandbox seconds that took are
    kept per ``slot`` in ``state.data["behaviour_s"]`` (a second keying of the same calls,
    answered from the behaviour cache, replaces its figure instead of adding to it);
    ``df_ray.methods.common.behaviour_seconds`` sums them."""
    rekey = getattr(ctx.task, "rekey", None)
    if rekey is None:
        return obs
    out, seconds = rekey(state.sample, obs)
    if seconds:
        state.data.setdefault("behaviour_s", {})[slot] = float(seconds)
    return out


class Method(ABC):
    """A coordination method: ``rounds`` rounds of planned calls, then ``finish``.

    ``Args`` declares its settings; ``self.args`` holds them, validated."""

    name: ClassVar[str]
    Args: ClassVar[type[MethodArgs]] = MethodArgs
    #: Rounds run over held-out samples to collect calibration records (when needed).
    calibration_rounds: ClassVar[int] = 1
    #: Top-level config keys of earlier versions that now live in this method's Args
    #: (config key -> Args field): a config that still has one gets an error saying where.
    moved_config_keys: ClassVar[dict[str, str]] = {}
    #: Whether a configuration of this method must name a coordinator agent.
    needs_coordinator: ClassVar[bool] = False
    #: The method's own columns of ``samples.parquet`` (name -> Arrow type name), after the
    #: generic ones; ``finish`` fills them (``Outcome.columns`` / ``Outcome.graded``).
    result_columns: ClassVar[dict[str, str]] = {}
    #: The method's own metrics over its rows (name -> RowMean), logged beside the generic
    #: ones (df_ray.methods.result_columns).
    metrics: ClassVar[dict[str, RowMean]] = {}
    #: Of ``metrics``, those the command's results table shows (as shares), one column each
    #: named by the metric without ``_rate``; a method that declares none adds no column.
    summary_metrics: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def explain(cls, row: Mapping[str, Any], detail: Mapping[str, Any]) -> list[str]:
        """Lines that say how the method reached one sample's answer, for the table of
        answers a small run prints (``row``: the sample's result columns, the method's own
        included; ``detail``: its parsed ``detail``). None by default."""
        return []

    def __init__(self, args: MethodArgs | dict[str, Any] | None = None, **kwargs: Any) -> None:
        if args is not None and kwargs:
            raise TypeError("pass method args either as one Args/mapping or as keywords")
        self.args = validate_args(self.name, self.Args, args if args is not None else kwargs)

    @classmethod
    def arg_names(cls) -> tuple[str, ...]:
        return tuple(cls.Args.model_fields)

    @classmethod
    def hashed_args(cls, args: dict[str, Any]) -> dict[str, Any]:
        """The validated ``method_args`` as the configuration's fingerprint hashes them: a
        method leaves out fields added later at their defaults, so that configurations that
        do not set them keep their fingerprint (the identity). ``tie_rule`` at ``first``
        (the rule every run had before it was a setting) is left out here for every method."""
        if args.get("tie_rule") == "first":
            return {k: v for k, v in args.items() if k != "tie_rule"}
        return args

    @property
    def needs_calibration(self) -> bool:
        """Whether this method (with these args) uses a frozen calibration."""
        return False

    def check_agents(self, agent_ids: Sequence[str]) -> None:
        """Refuse args that name an agent the run does not have (an ``agent`` field)."""
        agent = getattr(self.args, "agent", None)
        if agent is not None and agent not in agent_ids:
            raise MethodArgsError(f"method {self.name!r}: method_args.agent {agent!r} is not "
                                  f"one of the run's agents; allowed: {list(agent_ids)}")

    def calibration_observations(self, state: SampleState, ctx: MethodContext
                                 ) -> list[Observation]:
        """The observations a held-out sample contributes to a calibration fit, after
        ``calibration_rounds`` rounds: by default the agents' independent answers, keyed
        into candidates as the benchmark keys them at evaluation (``Task.rekey``: HumanEval's
        behaviour keys), so R_pi and kappa count the clusters the run will see."""
        spec = ctx.task.parse_spec(state.sample)
        obs = [Observation.invalid(r.agent, raw="") if r.error
               else parse(r.text, spec, agent=r.agent)
               for r in state.records(role="agent")]
        return rekeyed(obs, ctx, state, "agent:0")

    @property
    @abstractmethod
    def rounds(self) -> int:
        """The most rounds any sample can take."""

    @abstractmethod
    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        """The calls this sample needs in ``round`` (empty: none); asked only for rounds
        below ``rounds`` and of a sample not ``done``."""

    @abstractmethod
    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        """Turn the finished state into an outcome."""

    def max_calls_per_sample(self, ctx: MethodContext) -> int | None:
        """Upper bound on calls per sample (documented per method; None when unbounded)."""
        return None
