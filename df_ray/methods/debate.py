"""Multi-agent Debate (Du et al., 2023, "Improving Factuality and Reasoning in Language Models
through Multiagent Debate"); reference: composable-models/llm_multiagent_debate
``gsm/gen_gsm.py`` (``construct_message``: the debate message; ``agents = 3``,
``rounds = 2``) and ``gsm/eval_gsm.py`` (the majority of the last round).

Round 1: every agent answers alone (task prompt, slot ``"independent"``: the DarkForest
generations). Round r >= 2: every agent continues its own conversation (the question, its
earlier answers as assistant turns, the earlier debate messages) with a new user turn holding
the other agents' round r-1 answers: "These are the solutions to the problem from other
agents: One agent solution: ```...``` ... Using the reasoning from other agents as additional
advice, can you give an updated answer? ..." followed by the task's answer instruction. Slot
``"debate-r<r>"``.

Final answer: plurality vote over the last round's parsed answers (ties: larger support, then
the lowest-index agent in config order, then the smaller key). An unparseable answer does not
vote and a sample with no valid last-round answer has no answer (graded wrong). This follows
the paper; the reference GSM scorer counts an unparseable answer as correct, a bug we do not
copy.

method_args:
    rounds: debate rounds including the independent one (default 2; Du et al. 2023 report
        their main results with 3 agents and 2 rounds, which our three-agent compositions
        match).

Remaining differences from the reference: its debate message restates the question and
asks for a boxed number (GSM8K); ours ends with the task's own answer instruction. Its agents
are three copies of one API model; ours the composition's three backbones.

Calls per sample: n x rounds.
"""

from __future__ import annotations

from pydantic import Field

from df_ray.engines.base import Message
from df_ray.methods.base import Call, Method, MethodArgs, MethodContext, Outcome, SampleState
from df_ray.methods.common import (
    from_args,
    independent_calls,
    independent_observations,
    majority,
    obs_summary,
    observations,
    records_by_agent,
    vote_counts,
)
from df_ray.methods.prompt_templates import debate_prompt, response_text

DEBATE_ROLE = "debate"


class Debate(Method):
    name = "debate"

    class Args(MethodArgs):
        rounds: int = Field(2, strict=True, ge=1,
                            description="debate rounds including the independent one")

    rounds = from_args("rounds")

    def _texts(self, state: SampleState, round: int) -> dict[str, str]:
        return {a: r.reply for a, r in records_by_agent(state, round=round).items()}

    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        if round == 0:
            return independent_calls(ctx, ctx.agents, state)
        sample = state.sample
        instructions = ctx.task.answer_instructions()
        by_round = [self._texts(state, r) for r in range(round)]
        calls = []
        for a in ctx.agents:
            # The agent's conversation so far: question, own answer, debate message, ...
            history = [Message("user", ctx.task.agent_prompt(sample))]
            for r in range(round):
                history.append(Message("assistant", response_text(by_round[r].get(a.id))))
                if r < round - 1:
                    history.append(Message("user", self._message(by_round[r], a.id, ctx,
                                                                  instructions)))
            user = self._message(by_round[round - 1], a.id, ctx, instructions)
            calls.append(Call(DEBATE_ROLE, a.id,
                              ctx.request(a, user, sample=sample, slot=f"debate-r{round + 1}",
                                          history=history)))
        return calls

    @staticmethod
    def _message(texts: dict[str, str], agent_id: str, ctx: MethodContext,
                 instructions: str) -> str:
        others = [texts.get(b.id, "") for b in ctx.agents if b.id != agent_id]
        return debate_prompt(others, instructions)

    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        rounds = sorted({r.round for r in state.calls})
        last = rounds[-1] if rounds else 0
        final_obs = observations(state, ctx, round=last)
        return Outcome(final=majority(final_obs, ctx),
                       agent_observations=independent_observations(state, ctx),
                       extra={"rounds_run": len(rounds), "votes": vote_counts(final_obs),
                              "last_round": obs_summary(final_obs)})

    def max_calls_per_sample(self, ctx: MethodContext) -> int:
        return len(ctx.agents) * self.rounds
