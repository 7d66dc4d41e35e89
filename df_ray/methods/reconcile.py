"""ReConcile (Chen et al., 2024, "ReConcile: Round-Table Conference Improves Reasoning via
Consensus among Diverse LLMs"), as its reference code runs it: dinobby/ReConcile ``run.py``
(the phases and ``--round 2``), ``utils.py`` (``prepare_context``, ``parse_json``,
``invalid_result``, ``clean_output``, ``parse_output``, ``trans_confidence``) and
``generation.py`` (the ``*_gen_ans`` / ``*_debate`` functions).

``protocol: json`` (the default, the reference's):

Phase 1: every agent answers "Q: <the task> Please answer the question with step-by-step
reasoning. Also, evaluate your confidence level ... Output your answer in json format ...
{"reasoning": "", "answer": "", "confidence_level": ""} ..." plus the task's line on what the
``answer`` field may hold (slot ``"reconcile-r0"``: its own calls, not DarkForest's). Every
reply is read strictly (``df_ray.methods.json_answers.reconcile_json``: the span from the
first ``{`` to the last ``}`` must be a literal dict whose answer is valid for the task). An
invalid reply becomes a random valid answer with confidence 0 (``fallback_answer``: an option
letter or a label drawn from the request's seed; ``0`` for math and FinQA, as the reference's
numeric rule; a code task has none and stays invalid); a missing confidence is 0.
Discussion round d = 1..rounds, only while the previous round's answers differ: every agent
gets phase 1's prompt followed by "Carefully review the following solutions from other
agents ..." and, for the two most common answers, "There are m agents think the answer is X.
One agent solution: I think the answer is X because <reasoning> My confidence level is c."
(slot ``"reconcile-r<d>"``). The final answer is the last round's confidence-weighted vote
(core ``recalibrate_reconcile``, the reference's ``trans_confidence``: <= 0.6 -> 0.1, < 0.8 ->
0.3, < 0.9 -> 0.5, < 1 -> 0.8, 1 -> 1.0).

``protocol: df_ray`` (df_ray's earlier ReConcile, kept as an ablation): phase 1 is the task
prompt (slot ``"independent"``: the DarkForest generations, boxed / ``Answer:`` outputs read
by the task's parser); discussion prompts show every answer group with the raw traces and
confidences (``RECONCILE_INTRO``); invalid answers are not replaced, so they block consensus
and do not vote.

Early stop (both): as soon as every agent's latest answer is valid and the same, no further
call. Ties of the vote: larger total weight, larger support, then the lowest-index agent in
config order, then the smaller key.

method_args:
    rounds: discussion rounds after phase 1 (default 2: the reference's ``run.py``).
    protocol: ``json`` (the reference's) or ``df_ray`` (ablation).

Remaining differences from the reference:
- no convincing samples: the reference prepends human explanations that corrected an
  agent's mistake on training questions, which our benchmarks do not have;
- answers are compared by the task's canonical keys (the reference compares strings, so
  ``4`` and ``4.0`` are two answers there);
- a reply that is not JSON is not re-asked (the reference retries some backends up to 5
  times before falling back) and is not rewritten into JSON by a second call (the reference
  does that for Bard);
- its agents are three API models (ChatGPT, Bard, Claude); ours the composition's three.

Calls per sample: at most n x (rounds + 1).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Literal

from pydantic import Field

from df_ray.core import recalibrate_reconcile
from df_ray.core.types import Observation
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
    from_args,
    independent_calls,
    obs_summary,
    parse_record,
    records_by_agent,
    weighted,
)
from df_ray.methods.json_answers import fallback_answer, reconcile_json
from df_ray.methods.prompt_templates import (
    reconcile_answer_hint,
    reconcile_discussion_prompt,
    reconcile_explanation,
    reconcile_initial_prompt,
    reconcile_prompt,
)
from df_ray.tasks.base import problem_statement

INITIAL_ROLE = "reconcile_initial"
DISCUSS_ROLE = "discussion"
NO_ANSWER = "(no valid answer)"


def consensus(obs: list[Observation], n_agents: int) -> bool:
    """All n agents gave a valid answer and it is the same one."""
    return (len(obs) == n_agents and all(o.valid for o in obs)
            and len({o.answer for o in obs}) == 1)


def slot(round: int) -> str:
    return f"reconcile-r{round}"


class ReConcile(Method):
    name = "reconcile"

    class Args(MethodArgs):
        rounds: int = Field(2, strict=True, ge=0,
                            description="discussion rounds after phase 1 (the reference's "
                                        "run.py: 2)")
        protocol: Literal["json", "df_ray"] = Field(
            "json", description="json: the reference's JSON answers, strict parsing, random "
                                "valid answer for an invalid one, 'I think the answer is' "
                                "explanations; df_ray: the task's answer format and raw "
                                "traces (ablation)")

    discussion_rounds = from_args("rounds")
    json = from_args("protocol", equals="json")

    @property
    def rounds(self) -> int:
        return self.discussion_rounds + 1

    # ------------------------------------------------------------------ reading answers

    def _read(self, rec: CallRecord, state: SampleState, ctx: MethodContext
              ) -> tuple[Observation, str]:
        """(observation, reasoning) of one reply; under ``json`` an invalid reply becomes the
        fallback answer drawn from the request's seed."""
        if not self.json:
            return parse_record(rec, ctx, state), rec.reply
        spec = ctx.task.parse_spec(state.sample)
        obs, reasoning = reconcile_json(rec.reply, spec, agent=rec.agent)
        if obs.valid:
            return obs, reasoning
        seed = ctx.seed(ctx.agent(rec.agent), state.sample, slot(rec.round))
        fb = fallback_answer(spec, seed, agent=rec.agent)
        return (obs, "") if fb is None else (replace(fb, raw=obs.raw), "")

    def _round(self, state: SampleState, ctx: MethodContext, round: int
               ) -> list[tuple[Observation, str]]:
        recs = records_by_agent(state, round=round)
        return [self._read(recs[a.id], state, ctx) for a in ctx.agents if a.id in recs]

    # ------------------------------------------------------------------ planning

    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        sample = state.sample
        if round == 0:
            if not self.json:
                return independent_calls(ctx, ctx.agents, state)
            user = self._initial(state, ctx)
            return [Call(INITIAL_ROLE, a.id, ctx.request(a, user, sample=sample, slot=slot(0)))
                    for a in ctx.agents]
        if round > self.discussion_rounds or state.done:
            return []
        prev = self._round(state, ctx, round - 1)
        if consensus([o for o, _ in prev], len(ctx.agents)):
            state.data["stopped_after_round"] = round - 1
            state.done = True
            return []
        if self.json:
            spec = ctx.task.parse_spec(sample)
            hint = reconcile_answer_hint(spec)
            user = reconcile_discussion_prompt(problem_statement(ctx.task, sample), hint,
                                               self._top_two(prev))
        else:
            recs = records_by_agent(state, round=round - 1)
            user = reconcile_prompt(problem_statement(ctx.task, sample),
                                    self._groups([o for o, _ in prev], recs),
                                    ctx.task.answer_instructions())
        return [Call(DISCUSS_ROLE, a.id, ctx.request(a, user, sample=sample, slot=slot(round)))
                for a in ctx.agents]

    @staticmethod
    def _initial(state: SampleState, ctx: MethodContext) -> str:
        spec = ctx.task.parse_spec(state.sample)
        return reconcile_initial_prompt(problem_statement(ctx.task, state.sample),
                                        reconcile_answer_hint(spec))

    @staticmethod
    def _top_two(prev: list[tuple[Observation, str]]) -> list[tuple[str, list[str]]]:
        """The two most common answers (ties: first seen, as ``Counter.most_common``), each
        with its agents' "I think the answer is ..." explanations."""
        keys = [o.answer if o.valid else None for o, _ in prev]
        shown: dict[str | None, str] = {}
        for o, _ in prev:
            shown.setdefault(o.answer if o.valid else None,
                             (o.extracted or o.answer or "") if o.valid else NO_ANSWER)
        groups = []
        for key, _ in Counter(keys).most_common(2):
            exps = [reconcile_explanation(shown[key], reasoning, o.confidence)
                    for (o, reasoning), k in zip(prev, keys, strict=True) if k == key]
            groups.append((shown[key], exps))
        return groups

    @staticmethod
    def _groups(obs: list[Observation], recs) -> list[tuple[str, list[tuple[str, float]]]]:
        """Answers grouped by canonical key, in order of first appearance; invalid last."""
        groups: dict[str | None, tuple[str, list[tuple[str, float]]]] = {}
        for o in obs:
            key = o.answer if o.valid else None
            shown = (o.extracted or o.answer or "") if o.valid else NO_ANSWER
            rec = recs.get(o.agent)
            text = rec.reply if rec is not None else ""
            groups.setdefault(key, (shown, []))[1].append((text, o.confidence))
        ordered = [v for k, v in groups.items() if k is not None]
        if None in groups:
            ordered.append(groups[None])
        return ordered

    # ------------------------------------------------------------------ outcome

    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        rounds = sorted({r.round for r in state.calls})
        last = rounds[-1] if rounds else 0
        final_obs = [o for o, _ in self._round(state, ctx, last)]
        first = [o for o, _ in self._round(state, ctx, 0)] if rounds else []
        weights = {o.agent: recalibrate_reconcile(o.confidence) for o in final_obs}
        return Outcome(final=weighted(final_obs, weights, ctx), agent_observations=first,
                       extra={"rounds_run": len(rounds), "protocol": self.args.protocol,
                              "consensus": consensus(final_obs, len(ctx.agents)),
                              "fallbacks": sum(o.rule == "fallback" for o in final_obs),
                              "weights": weights, "last_round": obs_summary(final_obs)})

    def max_calls_per_sample(self, ctx: MethodContext) -> int:
        return len(ctx.agents) * (self.discussion_rounds + 1)
