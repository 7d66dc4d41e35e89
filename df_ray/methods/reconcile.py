"""ReConcile (Chen et al., 2024, "ReConcile: Round-Table Conference Improves Reasoning via
Consensus among Diverse LLMs").

Phase 1: every agent answers with its reasoning, an answer and a confidence (the task prompt,
which asks for all three; slot ``"independent"``: the DarkForest generations).
Phase 2, discussion round d = 1..rounds: every agent gets one fresh prompt with the question,
the previous round's answers *grouped by answer* ("k of the n agents think the answer is X"),
each with its explanation and confidence, the ReConcile discussion instruction and the task's
answer and confidence instructions (slot ``"reconcile-d<d>"``). The convincing samples of the
paper (human explanations that fixed an agent's mistake) need training data and are left out.

Early stop: as soon as all agents' latest answers are valid and agree (consensus), the sample
stops: no further call (plan returns [] and the state is marked done). A sample whose agents
agree from the start makes only the n independent calls.

Final answer: the last round's answers, each weighted by its recalibrated confidence
(core ``recalibrate_reconcile``: <= 0.6 -> 0.1, < 0.8 -> 0.3, < 0.9 -> 0.5, < 1 -> 0.8,
1 -> 1.0); the largest total weight wins (ties: larger support, then the lowest-index agent in
config order, then the smaller key). An agent that gave no confidence counts 0.5 -> 0.1.

method_args:
    rounds: discussion rounds after the initial answers (default 3: ReConcile discusses for
        at most 3 rounds, stopping early on consensus; Chen et al. 2024, section 3).

Calls per sample: at most n x (rounds + 1).
"""

from __future__ import annotations

from pydantic import Field

from df_ray.core import recalibrate_reconcile
from df_ray.core.types import Observation
from df_ray.methods.base import Call, Method, MethodArgs, MethodContext, Outcome, SampleState
from df_ray.methods.common import (
    independent_calls,
    independent_observations,
    obs_summary,
    parse_record,
    records_by_agent,
    weighted,
)
from df_ray.methods.prompt_templates import reconcile_prompt
from df_ray.tasks.base import problem_statement

DISCUSS_ROLE = "discussion"
NO_ANSWER = "(no valid answer)"


def consensus(obs: list[Observation], n_agents: int) -> bool:
    """All n agents gave a valid answer and it is the same one."""
    return (len(obs) == n_agents and all(o.valid for o in obs)
            and len({o.answer for o in obs}) == 1)


class ReConcile(Method):
    name = "reconcile"

    class Args(MethodArgs):
        rounds: int = Field(3, strict=True, ge=0,
                            description="discussion rounds after the initial answers "
                                        "(ReConcile's at most 3)")

    @property
    def discussion_rounds(self) -> int:
        return self.args.rounds

    @property
    def rounds(self) -> int:
        return self.discussion_rounds + 1

    def _round_obs(self, state: SampleState, ctx: MethodContext, round: int
                   ) -> list[Observation]:
        recs = records_by_agent(state, round=round)
        return [parse_record(recs[a.id], ctx, state) for a in ctx.agents if a.id in recs]

    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        if round == 0:
            return independent_calls(ctx, ctx.agents, state)
        if round > self.discussion_rounds or state.done:
            return []
        prev = self._round_obs(state, ctx, round - 1)
        if consensus(prev, len(ctx.agents)):
            state.data["stopped_after_round"] = round - 1
            state.done = True
            return []
        sample = state.sample
        recs = records_by_agent(state, round=round - 1)
        user = reconcile_prompt(problem_statement(ctx.task, sample), self._groups(prev, recs),
                                ctx.task.answer_instructions())
        return [Call(DISCUSS_ROLE, a.id,
                     ctx.request(a, user, sample=sample, slot=f"reconcile-d{round}"))
                for a in ctx.agents]

    @staticmethod
    def _groups(obs: list[Observation], recs) -> list[tuple[str, list[tuple[str, float]]]]:
        """Answers grouped by canonical key, in order of first appearance; invalid last."""
        groups: dict[str | None, tuple[str, list[tuple[str, float]]]] = {}
        for o in obs:
            key = o.answer if o.valid else None
            shown = (o.extracted or o.answer or "") if o.valid else NO_ANSWER
            rec = recs.get(o.agent)
            text = rec.text if rec is not None and not rec.error else ""
            groups.setdefault(key, (shown, []))[1].append((text, o.confidence))
        ordered = [v for k, v in groups.items() if k is not None]
        if None in groups:
            ordered.append(groups[None])
        return ordered

    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        rounds = sorted({r.round for r in state.calls})
        last = rounds[-1] if rounds else 0
        final_obs = self._round_obs(state, ctx, last)
        weights = {o.agent: recalibrate_reconcile(o.confidence) for o in final_obs}
        return Outcome(final=weighted(final_obs, weights, ctx),
                       agent_observations=independent_observations(state, ctx),
                       extra={"rounds_run": len(rounds),
                              "consensus": consensus(final_obs, len(ctx.agents)),
                              "weights": weights, "last_round": obs_summary(final_obs)})

    def max_calls_per_sample(self, ctx: MethodContext) -> int:
        return len(ctx.agents) * (self.discussion_rounds + 1)
