"""A method with bugs that show on chosen samples only (its ``plan`` raises on one, its
``finish`` on another), and an engine whose token count fails: what the one driver path's
tests run on every path. A module of its own, so that a Ray stage unpickles the method."""

from __future__ import annotations

from df_ray.methods.single import SingleAgent

#: The sample whose plan raises, and the one whose finish raises.
PLAN_FAILS_ON, FINISH_FAILS_ON = "q3", "q7"


class Faulty(SingleAgent):
    """The single-agent baseline, whose ``plan`` raises on ``PLAN_FAILS_ON`` and ``finish``
    on ``FINISH_FAILS_ON``."""

    name = "faulty"

    def plan(self, round, state, ctx):
        if state.sample.id == PLAN_FAILS_ON:
            raise ZeroDivisionError(f"plan exploded on {PLAN_FAILS_ON}")
        return super().plan(round, state, ctx)

    def finish(self, state, ctx):
        if state.sample.id == FINISH_FAILS_ON:
            raise KeyError(f"finish exploded on {FINISH_FAILS_ON}")
        return super().finish(state, ctx)


class CountingFails(SingleAgent):
    """The single-agent baseline that counts its prompt's tokens in ``plan`` (as DarkForest
    counts its evidence): an engine whose token count fails fails it."""

    name = "counting"

    def plan(self, round, state, ctx):
        calls = list(super().plan(round, state, ctx))
        for c in calls:
            ctx.count_tokens(c.agent, c.request.messages[-1].content)
        return calls
