"""Graph-of-Agents, mean and max pooling (Yun et al., ICLR 2026, "Graph-of-Agents: A
Graph-based Framework for Multi-Agent LLM Collaboration"; github.com/UNITES-Lab/GoA).

Agents are nodes of a graph built per question; messages pass along its edges; the graph is
read out by pooling. Stages, one pipeline round each:

0. **Node sampling** (1 call): the meta-LLM (the run's coordinator agent, else the first
   agent; GoA's is Qwen2.5-7B-Instruct) picks the ``top_k`` agents most relevant to the
   question from their model cards (``AgentConfig.description``, filled from the backbone
   pool, ``df_ray.experiments.pool``). As GoA runs, the agents are the whole six-model pool
   (composition ``pool``) and ``top_k`` is 3, so each question gets its own three nodes.
   With ``top_k`` >= n every agent is a node; the call is still made and paid for, as in
   the reference. With fewer, the reply's indices are used
   (duplicates dropped; an unusable reply falls back to the first ``top_k`` agents, the
   reference's fallback). Nodes keep config order.
1. **Initial answers** (k calls): each node answers with reasoning, answer and confidence (the
   task prompt, slot ``"independent"``: the DarkForest generations). With a single node its
   answer is final (2 calls in all).
2. **Edge sampling** (k calls): each node scores the other nodes' answers with scores summing
   to 1. A node's score is the mean of the scores it received from valid judges (a judge whose
   reply is not exactly k-1 numbers with 0.9 < sum <= 1 is dropped, as the reference drops it
   after its retries; we do not retry, so that the call count is fixed), normalised to sum 1.
   Nodes scoring at most ``threshold`` are pruned. The survivors, ranked by score (ties: config
   order), form a DAG: an edge from every node to every lower-ranked node.
   If one node survives its initial answer is final; if none does, the meta-LLM pools the
   initial answers (1 call), as in the reference.
3. **Message passing**, per round (``rounds``, default 1), two stages:
   source-to-target: every node with an incoming edge (all but the top node) refines its answer
   reading its sources' answers, each labelled high/moderate/low relevance by its score
   normalised over the sources (k-1 calls); target-to-source: nodes with an outgoing edge
   refine their answers reading their targets' *refined* answers (mean: all but the last
   node, k-1 calls; max: only the top node, whose answer is the readout, 1 call). The
   reference shows the targets' pre-refinement answers under the heading "updated responses
   from other models"; we follow the paper and show the refined ones.
4. **Graph pooling**: max: the top node's latest answer is final (0 calls); mean: the
   meta-LLM synthesises every node's latest answer, each labelled by its relevance (1 call).
   (The reference README names a ``weighted_mean`` pooling that its code does not implement;
   its ``mean`` already labels responses by relevance, which is what we do.)

Every refinement and the pooling prompt end with the task's answer and confidence
instructions, so that every node's answer can be parsed. The reference's replacement of a
low-confidence node by the general model (a conditional extra call) is left out.

Calls for k nodes and R rounds: max 1 + k + k + R*k (3 agents, 1 round: 1 selection + 3
answers + 3 scoring + 2 source-to-target + 1 target-to-source = 10); mean
1 + k + k + R*(2k-2) + 1 (3 agents, 1 round: 1 + 3 + 3 + 2 + 2 + 1 pooling = 12).

method_args: ``rounds`` (message-passing rounds, default 1), ``top_k`` (nodes to select,
default 3, GoA's; ``null``: every agent), ``threshold`` (edge-score pruning threshold,
default 0.05). These defaults are GoA's reference code's (``top_k`` 3, threshold 0.05,
1 round; it samples at temperature 0.7 with max_tokens 800, the agents' settings in our
compositions).
"""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

from pydantic import Field

from df_ray.core.types import Observation
from df_ray.methods.base import (
    AgentView,
    Call,
    Method,
    MethodArgs,
    MethodContext,
    Outcome,
    SampleState,
)
from df_ray.methods.common import (
    AGENT_ROLE,
    independent_call,
    independent_observations,
    lead_agent,
    parse_record,
    records_by_agent,
    single_final,
)
from df_ray.methods.prompt_templates import (
    goa_pooling_prompt,
    goa_scoring_prompt,
    goa_selection_prompt,
    goa_source_to_target_prompt,
    goa_target_to_source_prompt,
)
from df_ray.tasks.base import problem_statement

#: GoA's defaults (UNITES-Lab/GoA): 3 nodes per question, edge threshold 0.05, 1 round.
DEFAULT_TOP_K = 3
SELECT_ROLE = "selector"
SCORE_ROLE = "scorer"
S2T_ROLE = "source_to_target"
T2S_ROLE = "target_to_source"
POOL_ROLE = "pooling"
ANSWER_ROLES = (AGENT_ROLE, S2T_ROLE, T2S_ROLE)

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_BRACKET_RE = re.compile(r"\[\s*(" + _NUM + r"(?:\s*[,;\s]\s*" + _NUM + r")*)\s*,?\s*\]")
_PLAIN_RE = re.compile(r"^\s*(" + _NUM + r"(?:\s*[,;\s]\s*" + _NUM + r")*)\s*$")
_INDICES_RE = re.compile(r"\d+(?:\s*,\s*\d+)*")


def parse_scores(text: str, k: int) -> list[float] | None:
    """A judge's k scores: a bracketed list anywhere, else the whole reply as a list.
    Valid iff exactly k finite non-negative numbers with 0.9 < sum <= 1 (the reference's check)."""
    m = _BRACKET_RE.search(text) or _PLAIN_RE.match(text.strip())
    if not m:
        return None
    try:
        vals = [float(t) for t in re.split(r"[,;\s]+", m.group(1).strip()) if t]
    except ValueError:
        return None
    if len(vals) != k or any(not math.isfinite(v) or v < 0 for v in vals):
        return None
    if not (0.9 < math.fsum(vals) <= 1.0 + 1e-9):
        return None
    return vals


def parse_selection(text: str, n: int, top_k: int) -> list[int] | None:
    """The selected indices (first comma-separated run of integers, deduplicated, at most
    top_k), or None when the reply has none or one is out of range."""
    m = _INDICES_RE.search(text)
    if not m:
        return None
    idx = [int(t) for t in re.split(r"\s*,\s*", m.group(0))]
    if any(i < 0 or i >= n for i in idx):
        return None
    out: list[int] = []
    for i in idx:
        if i not in out:
            out.append(i)
    return out[:top_k]


class GraphOfAgents(Method):
    """Shared machinery; ``pooling`` is "mean" or "max" in the registered subclasses."""

    name = "goa"
    pooling: ClassVar[str] = "mean"

    class Args(MethodArgs):
        rounds: int = Field(1, strict=True, ge=1, description="message-passing rounds")
        top_k: int | None = Field(DEFAULT_TOP_K, strict=True, ge=1,
                                  description="nodes the meta-LLM selects per question "
                                              "(GoA's 3; null: every agent)")
        threshold: float = Field(0.05, strict=True, ge=0.0, lt=1.0,
                                 description="edge-score pruning threshold (GoA's 0.05)")

    @property
    def mp_rounds(self) -> int:
        return self.args.rounds

    @property
    def top_k(self) -> int | None:
        return self.args.top_k

    @property
    def threshold(self) -> float:
        return float(self.args.threshold)

    @property
    def rounds(self) -> int:
        # select, answer, score, 2 per message-passing round, pool
        return 3 + 2 * self.mp_rounds + 1

    # ------------------------------------------------------------------ graph state

    def _k(self, ctx: MethodContext) -> int:
        n = len(ctx.agents)
        return n if self.top_k is None else min(self.top_k, n)

    def _nodes(self, state: SampleState, ctx: MethodContext) -> list[AgentView]:
        if "nodes" not in state.data:
            k, n = self._k(ctx), len(ctx.agents)
            chosen: list[int] | None = list(range(n))
            if k < n:
                sel = state.records(role=SELECT_ROLE)
                text = sel[-1].text if sel and not sel[-1].error else ""
                chosen = parse_selection(text, n, k)
                state.data["selection_fallback"] = chosen is None
                if chosen is None:
                    chosen = list(range(k))
            state.data["nodes"] = [ctx.agents[i].id for i in sorted(chosen)]
        return [ctx.agent(a) for a in state.data["nodes"]]

    def _graph(self, state: SampleState, ctx: MethodContext) -> dict[str, Any]:
        """Scores, ranking and top node from the scoring calls (computed once, kept in data)."""
        if "graph" in state.data:
            return state.data["graph"]
        nodes = [a.id for a in self._nodes(state, ctx)]
        scoring = records_by_agent(state, round=2, role=SCORE_ROLE)
        total = dict.fromkeys(nodes, 0.0)
        judged = dict.fromkeys(nodes, 0)
        dropped = []
        for judge in nodes:
            others = [o for o in nodes if o != judge]
            rec = scoring.get(judge)
            vals = parse_scores(rec.text, len(others)) if rec is not None and not rec.error \
                else None
            if vals is None:
                dropped.append(judge)
                continue
            for o, v in zip(others, vals, strict=True):
                total[o] += v
                judged[o] += 1
        avg = {a: (total[a] / judged[a] if judged[a] else 0.0) for a in nodes}
        s = math.fsum(avg.values())
        scores = {a: (v / s if s > 0 else v) for a, v in avg.items()}
        ranked = sorted(nodes, key=lambda a: -scores[a])  # stable: ties keep config order
        ranked = [a for a in ranked if scores[a] > self.threshold]
        graph = {"scores": scores, "ranked": ranked, "dropped_judges": dropped,
                 "top": ranked[0] if ranked else None}
        state.data["graph"] = graph
        return graph

    @staticmethod
    def _latest(state: SampleState, agent: str, before_round: int) -> str:
        """A node's latest successful answer among calls of rounds < before_round."""
        text = ""
        for r in state.calls:
            if (r.agent == agent and r.role in ANSWER_ROLES and r.round < before_round
                    and not r.error):
                text = r.text
        return text

    # ------------------------------------------------------------------ planning

    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        if state.done:
            return []
        sample = state.sample
        task = ctx.task
        if round == 0:
            meta = lead_agent(ctx)
            cards = [model_card(a) for a in ctx.agents]
            user = goa_selection_prompt(problem_statement(ctx.task, sample), cards, self._k(ctx))
            return [Call(SELECT_ROLE, meta.id,
                         ctx.request(meta, user, sample=sample, slot="goa-select"))]
        nodes = self._nodes(state, ctx)
        if round == 1:
            return [independent_call(ctx, a, state) for a in nodes]
        if len(nodes) == 1:
            state.done = True
            return []
        if round == 2:
            answers = {a.id: self._latest(state, a.id, 2) for a in nodes}
            calls = []
            for a in nodes:
                others = [(b.id, answers[b.id]) for b in nodes if b.id != a.id]
                calls.append(Call(SCORE_ROLE, a.id, ctx.request(
                    a, goa_scoring_prompt(problem_statement(ctx.task, sample), others), sample=sample,
                    slot="goa-score")))
            return calls
        graph = self._graph(state, ctx)
        ranked, scores = graph["ranked"], graph["scores"]
        instructions = task.answer_instructions()
        if len(ranked) <= 1:
            state.done = True
            if ranked:  # one survivor: its initial answer is final
                return []
            # none survives: the meta-LLM pools the initial answers (reference fallback)
            state.data["fallback"] = "pool_initial"
            refs = [(a.id, None, self._latest(state, a.id, 2)) for a in nodes]
            meta = lead_agent(ctx)
            return [Call(POOL_ROLE, meta.id, ctx.request(
                meta, goa_pooling_prompt(problem_statement(ctx.task, sample), refs, instructions), sample=sample,
                slot="goa-pool-initial"))]
        last_mp = 2 + 2 * self.mp_rounds
        if round <= last_mp:
            m = (round - 3) // 2 + 1  # message-passing round, 1-based
            start = 3 + 2 * (m - 1)   # the pipeline round where it began
            if round == start:  # source -> target
                calls = []
                for j, target in enumerate(ranked[1:], 1):
                    sources = ranked[:j]
                    refs = _weighted(sources, scores,
                                     {s: self._latest(state, s, start) for s in sources})
                    user = goa_source_to_target_prompt(
                        problem_statement(ctx.task, sample), self._latest(state, target, start), refs, instructions)
                    a = ctx.agent(target)
                    calls.append(Call(S2T_ROLE, target, ctx.request(
                        a, user, sample=sample, slot=f"goa-s2t-{m}")))
                return calls
            # target -> source, reading the targets' refined answers of this round
            refined = records_by_agent(state, round=start, role=S2T_ROLE)
            sources = ranked[:-1] if self.pooling == "mean" else ranked[:1]
            calls = []
            for source in sources:
                targets = ranked[ranked.index(source) + 1:]
                texts = {}
                for t in targets:
                    rec = refined.get(t)
                    texts[t] = rec.text if rec is not None and not rec.error \
                        else self._latest(state, t, start)
                refs = _weighted(targets, scores, texts)
                user = goa_target_to_source_prompt(
                    problem_statement(ctx.task, sample), self._latest(state, source, start), refs, instructions)
                a = ctx.agent(source)
                calls.append(Call(T2S_ROLE, source, ctx.request(
                    a, user, sample=sample, slot=f"goa-t2s-{m}")))
            return calls
        if round == last_mp + 1 and self.pooling == "mean":
            refs = [(a, scores[a], self._latest(state, a, round)) for a in ranked]
            meta = lead_agent(ctx)
            return [Call(POOL_ROLE, meta.id, ctx.request(
                meta, goa_pooling_prompt(problem_statement(ctx.task, sample), refs, instructions), sample=sample,
                slot="goa-pool"))]
        return []

    # ------------------------------------------------------------------ outcome

    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        nodes = self._nodes(state, ctx) if state.calls else []
        initial = independent_observations(state, ctx)
        extra: dict[str, Any] = {"pooling": self.pooling, "nodes": [a.id for a in nodes]}
        pooled = state.records(role=POOL_ROLE)
        final: Observation | None
        if pooled:
            final = single_final(pooled[-1], ctx, state)
        elif len(nodes) == 1:
            final = _valid(initial[0]) if initial else None
        elif state.records(role=SCORE_ROLE) or any(r.round >= 3 for r in state.calls):
            graph = self._graph(state, ctx)
            extra["graph"] = graph
            top = graph["top"]
            final = None
            if top is not None:
                recs = [r for r in state.calls
                        if r.agent == top and r.role in ANSWER_ROLES and not r.error]
                final = _valid(parse_record(recs[-1], ctx, state)) if recs else None
        else:
            final = None
        if "graph" in state.data:
            extra["graph"] = state.data["graph"]
        if "fallback" in state.data:
            extra["fallback"] = state.data["fallback"]
        return Outcome(final=final, agent_observations=initial, extra=extra)

    def max_calls_per_sample(self, ctx: MethodContext) -> int:
        k = self._k(ctx)
        if k == 1:
            return 2
        if self.pooling == "mean":
            return 1 + 2 * k + self.mp_rounds * (2 * k - 2) + 1
        return 1 + 2 * k + self.mp_rounds * k


def model_card(agent: AgentView) -> str:
    """What the meta-LLM reads about a candidate node: its model card, else its model id."""
    if agent.description:
        return f"{agent.model}: {agent.description}"
    return f"{agent.model} (no description)"


def _weighted(names: list[str], scores: dict[str, float], texts: dict[str, str]
              ) -> list[tuple[str, float, str]]:
    """(name, score normalised over ``names``, text): GoA's relevance weights of references."""
    total = math.fsum(scores[a] for a in names)
    return [(a, (scores[a] / total if total > 0 else 1.0 / len(names)), texts[a]) for a in names]


def _valid(o: Observation | None) -> Observation | None:
    return o if o is not None and o.valid else None


class GoAMean(GraphOfAgents):
    name = "goa_mean"
    pooling = "mean"


class GoAMax(GraphOfAgents):
    name = "goa_max"
    pooling = "max"
