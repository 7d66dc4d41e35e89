"""Mixture-of-Agents (Wang et al., 2024, "Mixture-of-Agents Enhances Large Language Model
Capabilities"; reference: togethercomputer/MoA, ``utils.py`` ``generate_with_references`` /
``inject_references_to_messages`` and the evaluation scripts that call them).

Layer 1: the n agents propose independently (task prompt, slot ``"independent"``: the
DarkForest generations). Layers 2..L-1: the n agents propose again, each reading every
response of the previous layer through the MoA Aggregate-and-Synthesize prompt (slot
``"moa-l<l>"``). Layer L: one aggregator reads every response of layer L-1 through the same
prompt and writes the final answer (slot ``"moa-aggregator"``). The aggregator is the run's
coordinator agent if it has one, else the first agent. Failed responses are left out of the
references.

The final answer is the aggregator's, parsed with the task's parser (none valid: no answer).

method_args:
    layers: L >= 2, counting the aggregator layer (default 2, the reference's: its
        ``rounds`` counts the proposer layers after the first, L = rounds + 1, and its
        evaluation scripts run ``rounds`` 1, so n proposers and the aggregator). ``layers: 3``
        is the MoA paper's larger configuration (an ablation here).
    aggregator_temperature: the aggregator's sampling temperature (default 0.7, the
        reference's ``generate_with_references`` default; ``null``: the aggregator agent's
        own, our coordinator's 0.2).

Remaining differences from the reference:
- the reference injects the aggregate-and-synthesize text as a system message; we open the
  user turn with the same text, so that backbones without a system role work the same;
- its aggregator is a separate, larger model; ours is the run's coordinator (the composition's
  general model), and its proposers are the composition's three agents;
- max_tokens is the agents' budget, the benchmark's in the paper's sweeps (2048 for MATH,
  MMLU-Pro and GPQA, 1024 for HumanEval, FinQA and LegalBench:
  ``df_ray/experiments/budgets.py``), where the reference sends every call at its 2048;
- the task's own prompt (with its answer instruction) is the query, so the aggregator's
  answer can be parsed like every other method's.

Calls per sample: n x (L - 1) + 1.
"""

from __future__ import annotations

from pydantic import Field

from df_ray.methods.base import Call, Method, MethodArgs, MethodContext, Outcome, SampleState
from df_ray.methods.common import (
    from_args,
    independent_calls,
    independent_observations,
    lead_agent,
    records_by_agent,
    single_final,
)
from df_ray.methods.prompt_templates import moa_prompt

PROPOSER_ROLE = "proposer"
AGGREGATOR_ROLE = "aggregator"


class MixtureOfAgents(Method):
    name = "moa"

    class Args(MethodArgs):
        layers: int = Field(2, strict=True, ge=2,
                            description="layers counting the aggregator layer (the "
                                        "reference's evaluation: 2)")
        aggregator_temperature: float | None = Field(
            0.7, ge=0.0, le=2.0,
            description="the aggregator's temperature (the reference's 0.7; null: the "
                        "aggregator agent's own)")

    layers = from_args("layers")
    rounds = from_args("layers")

    def _references(self, state: SampleState, ctx: MethodContext, round: int) -> list[str]:
        recs = records_by_agent(state, round=round)
        return [recs[a.id].reply for a in ctx.agents
                if a.id in recs and recs[a.id].reply.strip()]

    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        if round == 0:
            return independent_calls(ctx, ctx.agents, state)
        sample = state.sample
        user = moa_prompt(ctx.task.agent_prompt(sample), self._references(state, ctx, round - 1))
        if round == self.layers - 1:
            agg = lead_agent(ctx)
            return [Call(AGGREGATOR_ROLE, agg.id,
                         ctx.request(agg, user, sample=sample, slot="moa-aggregator",
                                     temperature=self.args.aggregator_temperature))]
        return [Call(PROPOSER_ROLE, a.id,
                     ctx.request(a, user, sample=sample, slot=f"moa-l{round + 1}"))
                for a in ctx.agents]

    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        agg = state.records(role=AGGREGATOR_ROLE)
        final = single_final(agg[-1] if agg else None, ctx, state)
        return Outcome(final=final, agent_observations=independent_observations(state, ctx),
                       extra={"aggregator": agg[-1].agent if agg else None})

    def max_calls_per_sample(self, ctx: MethodContext) -> int:
        return len(ctx.agents) * (self.layers - 1) + 1
