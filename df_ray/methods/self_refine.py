"""Self-Refine (Madaan et al., 2023, "Self-Refine: Iterative Refinement with Self-Feedback").

One agent generates an answer (task prompt, slot ``"independent"``: the Single / DarkForest
cache entry), then iterates: it critiques its latest answer (FEEDBACK, slot
``"refine-fb<t>"``) and, unless the critique finds no error, rewrites the answer from the full
history of attempts and critiques (REFINE, slot ``"refine-<t>"``), for t = 1..iterations.

The critique is task-specific, as the paper's feedback prompts are per task: besides the
general review it names what to check for the task's kind (``FEEDBACK_FOCUS`` in
``df_ray.methods.prompt_templates``: each calculation for math, the table values and program steps for
FinQA, the docstring's examples and edge cases for code, every option for multiple choice,
the instruction's definition and the allowed labels for LegalBench), and it sees the whole
task (``problem_statement``).

Stop rule (precise): the critique prompt asks for a last line ``Verdict: CORRECT`` or
``Verdict: INCORRECT``. The sample stops after a critique whose *last* verdict line (a line
that, after stripping spaces and markdown emphasis, starts with ``verdict:``, any case) says
``CORRECT``; no refinement follows and the state is marked done. A critique without a verdict
line, or with ``INCORRECT`` (or anything else), continues. After the last refinement there is
no further critique.

Final answer: the latest attempt that parses to a valid answer (a refinement that lost the
answer format does not erase an earlier valid answer); none valid: no answer.

method_args:
    iterations: T, the most feedback+refine rounds (default 4: the paper's experiments stop
        after at most 4 iterations, Madaan et al. 2023, section 3).
    agent: the agent that generates, critiques and refines (default the first agent).

Calls per sample: at most 1 + 2T.
"""

from __future__ import annotations

import re

from pydantic import Field

from df_ray.methods.base import (
    Call,
    CallRecord,
    Method,
    MethodArgs,
    MethodContext,
    Outcome,
    SampleState,
)
from df_ray.methods.common import (
    AGENT_ROLE,
    AgentId,
    independent_call,
    independent_observations,
    parse_record,
    pick_agent,
)
from df_ray.methods.prompt_templates import self_refine_feedback_prompt, self_refine_refine_prompt
from df_ray.tasks.base import problem_statement

FEEDBACK_ROLE = "feedback"
REFINE_ROLE = "refine"

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
                                description="T, the most feedback + refine rounds "
                                            "(Self-Refine's at most 4)")
        agent: AgentId | None = Field(
            None, description="the agent that generates, critiques and refines "
                              "(default: the run's first agent)")

    @property
    def iterations(self) -> int:
        return self.args.iterations

    @property
    def agent_id(self) -> str | None:
        return self.args.agent

    @property
    def rounds(self) -> int:
        return 1 + 2 * self.iterations

    @staticmethod
    def _attempts(state: SampleState) -> list[CallRecord]:
        return [r for r in state.calls if r.role in (AGENT_ROLE, REFINE_ROLE)]

    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        agent = pick_agent(ctx, self.agent_id, self.name)
        if round == 0:
            return [independent_call(ctx, agent, state)]
        if round >= self.rounds or state.done:
            return []
        sample = state.sample
        attempts = self._attempts(state)
        feedbacks = state.records(role=FEEDBACK_ROLE)
        t = (round + 1) // 2
        if round % 2 == 1:  # critique the latest attempt
            latest = attempts[-1].text if attempts and not attempts[-1].error else ""
            user = self_refine_feedback_prompt(problem_statement(ctx.task, sample), latest,
                                               kind=getattr(ctx.task, "kind", ""))
            return [Call(FEEDBACK_ROLE, agent.id,
                         ctx.request(agent, user, sample=sample, slot=f"refine-fb{t}"))]
        last_fb = feedbacks[-1] if feedbacks else None
        if last_fb is not None and not last_fb.error and feedback_says_correct(last_fb.text):
            state.data["stopped_after_feedback"] = len(feedbacks)
            state.done = True
            return []
        pairs = [(a.text if not a.error else "", f.text if not f.error else "")
                 for a, f in zip(attempts, feedbacks, strict=False)]
        user = self_refine_refine_prompt(problem_statement(ctx.task, sample), pairs, ctx.task.answer_instructions())
        return [Call(REFINE_ROLE, agent.id,
                     ctx.request(agent, user, sample=sample, slot=f"refine-{t}"))]

    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        attempts = [parse_record(r, ctx, state) for r in self._attempts(state)]
        valid = [o for o in attempts if o.valid]
        return Outcome(final=valid[-1] if valid else None,
                       agent_observations=independent_observations(state, ctx),
                       extra={"attempts": len(attempts),
                              "feedbacks": len(state.records(role=FEEDBACK_ROLE)),
                              "stopped_early": "stopped_after_feedback" in state.data,
                              "attempt_answers": [o.answer for o in attempts]})

    def max_calls_per_sample(self, ctx: MethodContext) -> int:
        return 1 + 2 * self.iterations
