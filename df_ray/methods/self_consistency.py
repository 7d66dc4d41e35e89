"""Self-Consistency (Wang et al., 2023): sample several reasoning paths, majority-vote the
final answers. There is no reference implementation to follow beyond the paper's protocol;
Table 1's sweeps draw ``SELF_CONSISTENCY_SAMPLES`` (10) answers of one model
(``SELF_CONSISTENCY_AGENT``: Qwen2.5-7B-Instruct, the coder on HumanEval), a choice reasoned
in ``df_ray/experiments/compositions.py`` from the paper's token ratio and the models'
reported scores.

method_args:
    samples: answers drawn per agent (default 3), each with its own seed.
    agent: draw from this agent only (the paper's single-model form); default every agent.
    tie_rule: ``first`` (default: the answer sampled first) or ``random`` (a uniform pick
        among the tied answers, seeded by the run seed and the sample id).

Sample 0 of an agent is its independent answer (task prompt, slot ``"independent"``: the
DarkForest / Single cache entry); sample k > 0 uses slot ``"sc-<k>"``, so only the seed
differs. The agents' sampling temperature must be above 0 for the samples to differ.
Calls per sample: samples x (number of agents drawn from).

The vote is a plurality over the canonical answer keys of every valid sample (invalid samples
do not vote; no valid sample: no answer). A tie goes to the answer sampled first: the tied
answer of the earliest valid sample in sampling order (sample 0, 1, ... of the first agent,
then of the next; core ``first_sample_vote``). The paper defines no tie rule; the first
sample is what a reader of the samples in order picks, and it is the single-agent answer
when every sample differs. (df_ray's earlier rule, the smaller answer key, chose the
lexicographically smallest program on HumanEval.) ``agent_observations`` are the sample-0
answers (one per agent, as for every method).
"""

from __future__ import annotations

from pydantic import Field

from df_ray.core.voting import first_sample_vote
from df_ray.methods.base import Call, Method, MethodArgs, MethodContext, Outcome, SampleState
from df_ray.methods.common import (
    AGENT_ROLE,
    INDEPENDENT_SLOT,
    AgentId,
    RunTieRule,
    from_args,
    independent_observations,
    observations,
    pick_agent,
    representative,
    tie_rule_field,
    vote_counts,
)

SAMPLE_ROLE = "sample"


class SelfConsistency(Method):
    name = "self_consistency"

    class Args(MethodArgs):
        samples: int = Field(3, strict=True, ge=1,
                             description="answers drawn per agent, each with its own seed")
        agent: AgentId | None = Field(
            None, description="draw from this agent only (default: every agent)")
        tie_rule: RunTieRule = tie_rule_field("the tied answer sampled first")

    samples = from_args("samples")
    agent_id = from_args("agent")
    tie_rule = from_args("tie_rule")

    @property
    def rounds(self) -> int:
        return 1

    def _agents(self, ctx: MethodContext):
        if self.agent_id is None:
            return list(ctx.agents)
        return [pick_agent(ctx, self.agent_id, self.name)]

    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        if round != 0:
            return []
        sample = state.sample
        prompt = ctx.task.agent_prompt(sample)
        calls = []
        for a in self._agents(ctx):
            for k in range(self.samples):
                slot = INDEPENDENT_SLOT if k == 0 else f"sc-{k}"
                calls.append(Call(AGENT_ROLE if k == 0 else SAMPLE_ROLE, a.id,
                                  ctx.request(a, prompt, sample=sample, slot=slot)))
        return calls

    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        obs = observations(state, ctx, round=0)
        final = representative(obs, first_sample_vote(
            obs, ties=self.tie_rule, run_seed=ctx.run_seed, sample_id=state.sample.id))
        return Outcome(final=final, selected=final,  # the vote is its selection
                       agent_observations=independent_observations(state, ctx),
                       extra={"votes": vote_counts(obs), "n_samples": len(obs)})

    def max_calls_per_sample(self, ctx: MethodContext) -> int:
        return self.samples * len(self._agents(ctx))
