"""Weighted Vote: the voting ablation of DarkForest (Table 6: majority, weighted, full).

Every agent answers independently (n calls, the DarkForest independent generations, slot
``"independent"``); the answer with the largest total agent reliability wins:

    s(z) = sum_{i in S_z} alpha_i

with alpha_i = (n_correct_i + 1) / (n_valid_i + 2) from the run's frozen calibration (1/2 for
every agent without one, which makes it a plain majority vote). Unlike DarkForest there is no
support-pattern reliability R_pi, no independence discount delta, no confidence or parse-quality
factor and no coordinator.

method_args:
    majority: True for the unweighted plurality vote (the "majority" row of the ablation).
    tie_rule: ``first`` (default) or ``random`` (core ``df_ray.core.voting``'s tie rules).

Ties go to the larger total weight, then the larger support; answers level on both are
broken by ``tie_rule``: ``first``, the answer of the lowest-index agent in config order,
then the smaller key (core ``weighted_vote``); ``random``, a uniform pick seeded by the run
seed and the sample id.
"""

from __future__ import annotations

from pydantic import Field

from df_ray.core.belief import LAPLACE_PRIOR
from df_ray.methods.base import Call, Method, MethodArgs, MethodContext, Outcome, SampleState
from df_ray.methods.common import (
    RunTieRule,
    from_args,
    independent_calls,
    independent_observations,
    majority,
    tie_rule_field,
    vote_counts,
    weighted,
)


class WeightedVote(Method):
    name = "weighted_vote"

    class Args(MethodArgs):
        majority: bool = Field(False, strict=True,
                               description="the unweighted plurality vote (no calibration)")
        tie_rule: RunTieRule = tie_rule_field("the answer of the lowest-index agent in config "
                                              "order, then the smaller key")

    majority = from_args("majority")
    tie_rule = from_args("tie_rule")

    @property
    def needs_calibration(self) -> bool:
        return not self.majority

    @property
    def rounds(self) -> int:
        return 1

    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        return independent_calls(ctx, ctx.agents, state) if round == 0 else []

    @staticmethod
    def weights(ctx: MethodContext) -> dict[str, float]:
        cal = ctx.calibration
        return {a.id: (float(cal.alpha(a.id)) if cal is not None else LAPLACE_PRIOR)
                for a in ctx.agents}

    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        obs = independent_observations(state, ctx)
        ties = (self.tie_rule, state.sample.id)
        if self.majority:
            final, weights = majority(obs, ctx, *ties), None
        else:
            weights = self.weights(ctx)
            final = weighted(obs, weights, ctx, *ties)
        return Outcome(final=final, agent_observations=obs, selected=final,
                       extra={"votes": vote_counts(obs), "weights": weights,
                              "voting": "majority" if self.majority else "alpha"})

    def max_calls_per_sample(self, ctx: MethodContext) -> int:
        return len(ctx.agents)
