"""Glue the baselines share: the independent first round, parsing records, voting, settings.

Roles. A call's ``role`` says what it is in its protocol. ``"agent"`` is reserved for an
agent's independent first answer (the task's plain ``agent_prompt`` under slot
``"independent"``: one cache entry shared with DarkForest and every other method), so the
pipeline's ``agent_tokens`` are the same generations for every method and everything a method
adds on top lands in ``other_tokens`` (or ``coordinator_tokens`` for DarkForest). Baselines
whose reference code asks for a first answer of its own (GoA's brief JSON answer, ReConcile's
JSON answer, Self-Refine's greedy first answer) make it under their own role: those tokens are
``other_tokens`` too, and such a method's ``agent_tokens`` are 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StringConstraints

from df_ray.core import majority_vote, parse, weighted_vote
from df_ray.core.types import Observation
from df_ray.core.voting import RUN_TIE_RULES
from df_ray.methods.base import (
    AgentView,
    Call,
    CallRecord,
    MethodArgsError,
    MethodContext,
    SampleState,
    rekeyed,
)

INDEPENDENT_SLOT = "independent"
AGENT_ROLE = "agent"


# ----------------------------------------------------------------------------- settings

#: An agent id in ``method_args`` (checked against the run's agents when the method plans).
AgentId = Annotated[str, StringConstraints(strict=True, min_length=1)]


def _run_tie_rule(value: Any) -> Any:
    if value == "expected":
        raise ValueError("'expected' is a score, not an answer: a run breaks its ties by "
                         f"{' or '.join(repr(r) for r in RUN_TIE_RULES)} (df-ray report "
                         "--tie-rule expected scores them exactly)")
    return value


#: A run's tie rule in ``method_args`` (``df_ray.core.voting``'s ``first`` or ``random``).
RunTieRule = Annotated[Literal[RUN_TIE_RULES], BeforeValidator(_run_tie_rule)]  # type: ignore[valid-type]


def tie_rule_field(first: str) -> Any:
    """The ``tie_rule`` field of a method whose answer is a vote or an argmax; ``first``
    says what the ``first`` rule picks there."""
    return Field("first", description=f"how a tie at the top is broken: 'first' ({first}), "
                                      "or 'random' (uniform among the tied answers, seeded "
                                      "by the run seed and the sample id)")


def from_args(name: str, *, equals: Any = None) -> Any:
    """A method's read-only attribute that is one of its Args (``self.args.<name>``), or with
    ``equals`` whether that Args field has that value: ``samples = from_args("samples")``,
    ``json = from_args("protocol", equals="json")`` in the class body."""
    if equals is not None:
        return property(lambda self: getattr(self.args, name) == equals,
                        doc=f"``self.args.{name} == {equals!r}``")
    return property(lambda self: getattr(self.args, name), doc=f"``self.args.{name}``")


def pick_agent(ctx: MethodContext, agent_id: str | None, method: str) -> AgentView:
    """The agent named by ``agent_id`` (an agent or the coordinator), else the first agent."""
    if agent_id is None:
        return ctx.agents[0]
    try:
        return ctx.agent(agent_id)
    except KeyError:
        known = [a.id for a in ctx.agents] + ([ctx.coordinator.id] if ctx.coordinator else [])
        raise MethodArgsError(f"method {method!r}: method_args agent {agent_id!r} is not one "
                              f"of the run's agents {known}") from None


def lead_agent(ctx: MethodContext) -> AgentView:
    """Who aggregates or selects for the agents: the coordinator if any, else the first agent."""
    return ctx.coordinator if ctx.coordinator is not None else ctx.agents[0]


def agent_order(ctx: MethodContext) -> list[str]:
    """Agent ids in config order (the tie-break order of every vote)."""
    ids = [a.id for a in ctx.agents]
    if ctx.coordinator is not None and ctx.coordinator.id not in ids:
        ids.append(ctx.coordinator.id)
    return ids


# ----------------------------------------------------------------------------- calls


def independent_call(ctx: MethodContext, agent: AgentView, state: SampleState) -> Call:
    """An agent's independent answer: the task's prompt alone, slot ``"independent"``."""
    sample = state.sample
    return Call(AGENT_ROLE, agent.id, ctx.request(agent, ctx.task.agent_prompt(sample),
                                                  sample=sample, slot=INDEPENDENT_SLOT))


def independent_calls(ctx: MethodContext, agents: Sequence[AgentView],
                      state: SampleState) -> list[Call]:
    return [independent_call(ctx, a, state) for a in agents]


# ----------------------------------------------------------------------------- records


def parse_record(rec: CallRecord, ctx: MethodContext, state: SampleState) -> Observation:
    """A finished call as an observation (a failed call is invalid)."""
    if rec.error:
        return Observation.invalid(rec.agent, raw="")
    return parse(rec.text, ctx.task.parse_spec(state.sample), agent=rec.agent)


def records_by_agent(state: SampleState, *, round: int, role: str | None = None
                     ) -> dict[str, CallRecord]:
    """The calls of a round keyed by agent (one call per agent per round; the last one wins)."""
    return {r.agent: r for r in state.records(round=round, role=role)}


def observations(state: SampleState, ctx: MethodContext, *, round: int | None = None,
                 role: str | None = None) -> list[Observation]:
    obs = [parse_record(r, ctx, state) for r in state.records(round=round, role=role)]
    return rekeyed(obs, ctx, state, f"{role}:{round}")


def behaviour_seconds(state: SampleState) -> float:
    """The sandbox seconds this sample's behaviour keys took (0 with text keys)."""
    return float(sum((state.data.get("behaviour_s") or {}).values()))


def independent_observations(state: SampleState, ctx: MethodContext) -> list[Observation]:
    """The independent first answers (what candidate reachability is measured on): the calls
    with role ``"agent"``, whatever round they ran in."""
    return observations(state, ctx, role=AGENT_ROLE)


def last_round(state: SampleState, role: str | None = None) -> int | None:
    rounds = [r.round for r in state.calls if role is None or r.role == role]
    return max(rounds) if rounds else None


# ----------------------------------------------------------------------------- votes


def representative(obs: Sequence[Observation], answer: str | None) -> Observation | None:
    """The observation graded for a voted answer: among the valid observations with that
    answer, the best parsed (highest quality, then confidence, then earliest)."""
    if answer is None:
        return None
    members = [(i, o) for i, o in enumerate(obs) if o.valid and o.answer == answer]
    if not members:
        return None
    return max(members, key=lambda io: (io[1].quality, io[1].confidence, -io[0]))[1]


def vote_counts(obs: Sequence[Observation]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for o in obs:
        if o.valid and o.answer is not None:
            counts[o.answer] = counts.get(o.answer, 0) + 1
    return counts


def majority(obs: Sequence[Observation], ctx: MethodContext, ties: str = "first",
             sample_id: str = "") -> Observation | None:
    """Plurality vote over valid answers (core ``majority_vote``: ties go to the larger
    support, then the answer of the lowest-index agent in config order, then the smaller
    key; ``ties="random"``: a pick seeded by the run seed and ``sample_id``)."""
    return representative(obs, majority_vote(obs, agent_order=agent_order(ctx), ties=ties,
                                             run_seed=ctx.run_seed, sample_id=sample_id))


def weighted(obs: Sequence[Observation], weights: Mapping[str, float],
             ctx: MethodContext, ties: str = "first", sample_id: str = "") -> Observation | None:
    """Weighted vote (core ``weighted_vote``: ties go to the larger total weight, then the
    larger support, then the lowest agent index, then the smaller key; ``ties`` as
    :func:`majority`'s)."""
    return representative(obs, weighted_vote(obs, weights, agent_order=agent_order(ctx),
                                             ties=ties, run_seed=ctx.run_seed,
                                             sample_id=sample_id))


def single_final(rec: CallRecord | None, ctx: MethodContext,
                 state: SampleState) -> Observation | None:
    """A one-call final answer: the parsed call, or None when it gave no valid answer."""
    if rec is None:
        return None
    o = parse_record(rec, ctx, state)
    return o if o.valid else None


def obs_summary(obs: Sequence[Observation]) -> list[dict[str, Any]]:
    """A compact, JSON-ready view of observations for ``Outcome.extra``."""
    return [{"agent": o.agent, "answer": o.answer, "confidence": o.confidence,
             "valid": o.valid} for o in obs]
