"""Self-Refine (Madaan et al., 2023, "Self-Refine: Iterative Refinement with Self-Feedback"), as
its reference code runs it: madaan/self-refine ``src/gsm/run.py`` (``iterative_gsm``: the loop,
``max_attempts`` 4, the first answer at ``temperature`` 0, feedback at 0.7, the stop on "it is
correct") and ``src/gsm/feedback.py`` (one few-shot call that writes the feedback *and* the
fixed solution, cut at ``### END``).

``protocol: few_shot`` (the default, the reference's):

1. The agent answers the task prompt at ``init_temperature`` 0 (slot ``"refine-init"``: its
   own call, not DarkForest's sampled generation).
2. Up to ``iterations`` (4) times: a feedback call (slot ``"refine-fb<t>"``, at
   ``feedback_temperature`` 0.7, ``feedback_max_tokens`` 600 (``GSMFeedback``'s
   ``max_tokens``), stop ``### END``) on the current solution, with the task
   kind's few-shot examples followed by every earlier (solution, feedback and rewrite) of
   this sample, each as one more example (``GSMFeedback.update_prompt`` appends them to its
   prompt, so the t-th feedback call reads the t-1 before it) (``df_ray.methods.self_refine_fewshot``: a step-by-step review
   marking each step "looks good" or "wrong! ...", then "Okay! Here is the rewrite:" and the
   fixed solution, or "... It is correct! Here is the rewrite (for the sake of
   completeness):"). If the feedback says "it is correct" (any case) the loop stops;
   otherwise the rewrite is the next solution. A reply without a rewrite keeps the current
   solution.
3. The final answer is the last feedback call's rewrite (the reference's
   ``generated_answer_ours``), or, when that does not parse to a valid answer, the latest
   solution that does (ours: a rewrite that lost the answer format does not erase an
   earlier valid answer).

Calls per sample: at most 1 + iterations (5).

``protocol: df_ray`` (df_ray's earlier Self-Refine, kept as an ablation): zero-shot. The
first answer is the shared independent generation (slot ``"independent"``); each iteration is
a critique call (``FEEDBACK_FOCUS`` per task kind, a last line ``Verdict: CORRECT`` /
``Verdict: INCORRECT``) and, unless the verdict is CORRECT, a separate refine call reading
every attempt and critique; every call at the agent's temperature. At most 1 + 2T calls.

method_args:
    iterations: the most feedback calls (few_shot; the reference's ``max_attempts`` 4) or
        feedback + refine rounds (df_ray).
    agent: the agent that answers, critiques and fixes (default the first agent).
    protocol: ``few_shot`` or ``df_ray``.
    init_temperature / feedback_temperature: few_shot's sampling (0 and 0.7, the
        reference's).

Remaining differences from the reference:
- the first answer is the task's zero-shot prompt (the reference's is a few-shot program
  prompt for GSM8K);
- the few-shot examples are ours, one wrong and one correct solution per task kind, in the
  reference's format; the feedback prompt adds one line saying how the rewrite must end, so
  that it parses with the task's parser;
- the first answer has the agent's budget (the reference's ``GSMInit`` has 300 tokens for a
  short program; ours is a chain of thought);
- the reference retries a whole sample when its output cannot be split; we keep the
  current solution and go on.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Literal

from pydantic import Field

from df_ray.core.parsing import parse
from df_ray.core.types import Observation
from df_ray.methods.base import Call, Method, MethodArgs, MethodContext, Outcome, SampleState
from df_ray.methods.common import (
    AGENT_ROLE,
    AgentId,
    from_args,
    independent_call,
    independent_observations,
    parse_record,
    pick_agent,
)
from df_ray.methods.prompt_templates import self_refine_feedback_prompt, self_refine_refine_prompt
from df_ray.methods.self_refine_fewshot import feedback_prompt, says_correct, split_feedback
from df_ray.tasks.base import problem_statement

FEEDBACK_ROLE = "feedback"
REFINE_ROLE = "refine"
INIT_ROLE = "refine_init"
#: The df_ray protocol's attempts: the independent first answer, then each refine call.
ATTEMPT_ROLES = (AGENT_ROLE, REFINE_ROLE)
STOP = ("### END",)
#: ``GSMFeedback(max_tokens=600)``: the feedback-and-rewrite call's budget.
FEEDBACK_MAX_TOKENS = 600

_VERDICT_RE = re.compile(r"^[\s*_#>`-]*verdict[\s*_]*:[\s*_]*([a-z]+)", re.IGNORECASE)


def feedback_says_correct(text: str) -> bool:
    """True when the critique's last verdict line says CORRECT (see the module docstring)."""
    verdict = None
    for line in text.splitlines():
        m = _VERDICT_RE.match(line)
        if m:
            verdict = m.group(1).upper()
    return verdict == "CORRECT"


class SelfRefine(Method):
    name = "self_refine"

    class Args(MethodArgs):
        iterations: int = Field(4, strict=True, ge=0,
                                description="the most feedback calls (the reference's "
                                            "max_attempts 4; df_ray: feedback + refine rounds)")
        agent: AgentId | None = Field(
            None, description="the agent that generates, critiques and refines "
                              "(default: the run's first agent)")
        protocol: Literal["few_shot", "df_ray"] = Field(
            "few_shot", description="few_shot: the reference's few-shot feedback-and-fix "
                                    "calls; df_ray: zero-shot critique + refine (ablation)")
        init_temperature: float = Field(0.0, ge=0.0, le=2.0,
                                        description="few_shot: the first answer's temperature "
                                                    "(the reference's 0)")
        feedback_temperature: float = Field(0.7, ge=0.0, le=2.0,
                                            description="few_shot: the feedback calls' "
                                                        "temperature (the reference's 0.7)")
        feedback_max_tokens: int | None = Field(
            FEEDBACK_MAX_TOKENS, strict=True, ge=1, le=32768,
            description="few_shot: the feedback calls' completion budget (the reference's "
                        "GSMFeedback max_tokens 600); null: the agent's own")

    iterations = from_args("iterations")
    agent_id = from_args("agent")
    few_shot = from_args("protocol", equals="few_shot")

    @property
    def rounds(self) -> int:
        return 1 + (self.iterations if self.few_shot else 2 * self.iterations)

    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        if self.few_shot:
            return self._plan_few_shot(round, state, ctx)
        agent = pick_agent(ctx, self.agent_id, self.name)
        if round == 0:
            return [independent_call(ctx, agent, state)]
        if round >= self.rounds or state.done:
            return []
        sample = state.sample
        attempts = state.records(role=ATTEMPT_ROLES)
        feedbacks = state.records(role=FEEDBACK_ROLE)
        t = (round + 1) // 2
        if round % 2 == 1:  # critique the latest attempt
            latest = attempts[-1].reply if attempts else ""
            user = self_refine_feedback_prompt(problem_statement(ctx.task, sample), latest,
                                               kind=getattr(ctx.task, "kind", ""))
            return [Call(FEEDBACK_ROLE, agent.id,
                         ctx.request(agent, user, sample=sample, slot=f"refine-fb{t}"))]
        last_fb = feedbacks[-1] if feedbacks else None
        if last_fb is not None and feedback_says_correct(last_fb.reply):
            state.data["stopped_after_feedback"] = len(feedbacks)
            state.done = True
            return []
        pairs = [(a.reply, f.reply) for a, f in zip(attempts, feedbacks, strict=False)]
        user = self_refine_refine_prompt(problem_statement(ctx.task, sample), pairs,
                                         ctx.task.answer_instructions())
        return [Call(REFINE_ROLE, agent.id,
                     ctx.request(agent, user, sample=sample, slot=f"refine-{t}"))]

    # ------------------------------------------------------------------ few_shot

    @staticmethod
    def _solutions(state: SampleState) -> list[str]:
        """The solutions so far: the first answer, then each feedback call's rewrite (a
        feedback without one repeats the solution it reviewed)."""
        sols: list[str] = []
        for r in state.calls:
            if r.role == INIT_ROLE:
                sols.append(r.reply)
            elif r.role == FEEDBACK_ROLE:
                fixed = None if r.error else split_feedback(r.text)[1]
                sols.append(fixed if fixed is not None else (sols[-1] if sols else ""))
        return sols

    def _plan_few_shot(self, round: int, state: SampleState, ctx: MethodContext
                       ) -> list[Call]:
        agent = pick_agent(ctx, self.agent_id, self.name)
        sample = state.sample
        if round == 0:
            return [Call(INIT_ROLE, agent.id, ctx.request(
                agent, ctx.task.agent_prompt(sample), sample=sample, slot="refine-init",
                temperature=self.args.init_temperature))]
        if round >= self.rounds or state.done:
            return []
        feedbacks = state.records(role=FEEDBACK_ROLE)
        if feedbacks and not feedbacks[-1].error \
                and says_correct(split_feedback(feedbacks[-1].text)[0]):
            state.data["stopped_after_feedback"] = len(feedbacks)
            state.done = True
            return []
        solutions = self._solutions(state)
        history = [(sol, fb.reply) for sol, fb in zip(solutions, feedbacks, strict=False)]
        user = feedback_prompt(getattr(ctx.task, "kind", ""), problem_statement(ctx.task, sample),
                               solutions[-1], ctx.task.answer_instructions(), history)
        req = ctx.request(agent, user, sample=sample, slot=f"refine-fb{round}",
                          temperature=self.args.feedback_temperature)
        budget = self.args.feedback_max_tokens or req.sampling.max_tokens
        req = dataclasses.replace(req, sampling=dataclasses.replace(
            req.sampling, stop=STOP, max_tokens=budget))
        return [Call(FEEDBACK_ROLE, agent.id, req)]

    def _finish_few_shot(self, state: SampleState, ctx: MethodContext) -> Outcome:
        spec = ctx.task.parse_spec(state.sample)
        agent = pick_agent(ctx, self.agent_id, self.name).id
        attempts = [parse(text, spec, agent=agent) for text in self._solutions(state)]
        valid = [o for o in attempts if o.valid]
        final = attempts[-1] if attempts and attempts[-1].valid else (valid[-1] if valid else None)
        return Outcome(final=final, agent_observations=attempts[:1],
                       extra=self._extra(state, attempts))

    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        if self.few_shot:
            return self._finish_few_shot(state, ctx)
        attempts = [parse_record(r, ctx, state) for r in state.records(role=ATTEMPT_ROLES)]
        valid = [o for o in attempts if o.valid]
        return Outcome(final=valid[-1] if valid else None,
                       agent_observations=independent_observations(state, ctx),
                       extra=self._extra(state, attempts))

    @staticmethod
    def _extra(state: SampleState, attempts: list[Observation]) -> dict[str, Any]:
        return {"attempts": len(attempts), "feedbacks": len(state.records(role=FEEDBACK_ROLE)),
                "stopped_early": "stopped_after_feedback" in state.data,
                "attempt_answers": [o.answer for o in attempts]}

    def max_calls_per_sample(self, ctx: MethodContext) -> int:
        return self.rounds  # one call a round at most
