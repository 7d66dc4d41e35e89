"""Single agent: one agent answers the question alone (1 call per sample).

method_args:
    agent: the agent id (default: the first agent of the run).

The call is the agent's independent answer (task prompt, slot ``"independent"``), so it is the
same cache entry as that agent's DarkForest generation.
"""

from __future__ import annotations

from pydantic import Field

from df_ray.methods.base import Call, Method, MethodArgs, MethodContext, Outcome, SampleState
from df_ray.methods.common import (
    AgentId,
    from_args,
    independent_call,
    independent_observations,
    pick_agent,
)


class SingleAgent(Method):
    name = "single"

    class Args(MethodArgs):
        agent: AgentId | None = Field(
            None, description="the agent that answers (default: the run's first agent)")

    agent_id = from_args("agent")

    @property
    def rounds(self) -> int:
        return 1

    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        if round != 0:
            return []
        return [independent_call(ctx, pick_agent(ctx, self.agent_id, self.name), state)]

    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        obs = independent_observations(state, ctx)
        final = obs[0] if obs and obs[0].valid else None
        return Outcome(final=final, agent_observations=obs,
                       extra={"agent": obs[0].agent if obs else None})

    def max_calls_per_sample(self, ctx: MethodContext) -> int:
        return 1
