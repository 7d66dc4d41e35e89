"""Graph-of-Agents, mean and max pooling (Yun et al., ICLR 2026, "Graph-of-Agents: A
Graph-based Framework for Multi-Agent LLM Collaboration"), as its reference code runs it:
UNITES-Lab/GoA ``main.py`` (``process_fn``, the defaults of ``main``) and ``modules.py``
(``node_sampling_model_card``, ``generate_initial_response_with_confidence``,
``maybe_replace_with_general``, ``edge_sampling``, ``message_passing``, ``graph_pooling``).

Agents are nodes of a graph built per question; messages pass along its edges; the graph is
read out by pooling. ``instruction`` below is the task's own agent prompt (the reference's
``messages[0]``: the question and how to answer it); the meta-LLM is the run's coordinator
(else the first agent; GoA's is Qwen2.5-7B-Instruct, the pool's general model). Stages, each
one or more pipeline rounds (a sample moves to the next stage as soon as its calls are in):

1. **Node sampling** (1-5 calls): the meta-LLM picks ``top_k`` model indices from the
   agents' model cards (``AgentConfig.description``: GoA's own ``endpoint.py`` cards, see
   ``df_ray.experiments.pool``), at GoA's sampling (``meta_temperature`` 0.7).
   An index may repeat when a model is highly relevant: each occurrence is its own node
   (its own seed slot, so its own sample). A reply is usable when the reference's pattern
   finds indices (``</think> 0,1,5`` / ``Answer: 0`` / a line of digits and commas) that are
   all in range, and there are exactly ``top_k`` of them; an unusable reply is shown back
   ("Previous invalid responses: [...]. Fix this.") and the call retried, up to
   ``selection_attempts`` (5) calls; then the first ``top_k`` agents (the reference's
   fallback). ``top_k: null`` makes every agent a node once, without the call (ours).
2. **First answers** (k calls): each node answers the instruction followed by GoA's
   brief-reasoning JSON instruction (``{"reasoning", "answer", "confidence_level"}``, read
   by ``df_ray.methods.json_answers.goa_json``), in its own calls and cache entries (slot
   ``"goa-initial"``, ``"goa-initial-<r>"`` for a repeat): not DarkForest's independent
   generations. With a single node its answer is final.
3. **Low-confidence replacement** (0-k calls): a node whose confidence is missing or below
   ``replace_below`` (0.1) is answered again, same prompt, by the general model (the agent
   on the meta-LLM's model, else the meta-LLM itself), which then is that node; a node that
   already is the general model keeps its answer. The calls and their tokens count.
4. **Edge sampling** (k calls, + retries): each node scores the other nodes' responses with
   scores summing to 1; a reply that is not exactly k-1 numbers with 0.9 < sum <= 1 is shown
   back and retried, up to ``scoring_attempts`` (3) calls per judge, then that judge is
   dropped. A node's score is the mean of the scores it received, normalised to sum 1; nodes
   scoring at most ``threshold`` (0.05) are pruned; the survivors, ranked by score (ties:
   node order), form a DAG from every node to every lower-ranked one. One survivor: its
   first answer is final; none: the meta-LLM pools the first answers (1 call).
5. **Message passing**, per round (``rounds``, 1), two stages: source-to-target: every node
   with an incoming edge refines its answer reading its sources' responses, each labelled
   high/moderate/low relevance by its score normalised over the sources (k-1 calls);
   target-to-source: nodes with an outgoing edge (mean: all but the last; max: only the top
   node) refine reading their targets' responses (k-1 or 1 calls). As in the reference's
   code at c9def00 (``_run_t_to_s`` builds its references from ``final_response_dict``, which
   source-to-target has just filled), target-to-source shows the targets' *refined*
   responses; ``t2s_reads: initial`` shows their responses from before this round (df_ray's
   earlier reading, kept as an ablation).
6. **Graph pooling**: max: the top node's latest answer is final (0 calls); mean: the
   meta-LLM synthesises every surviving node's latest answer, labelled by relevance (1 call).

Only max's target-to-source call and the pooling calls end with the task's answer
instruction (the reference's ``final_prompt``); the instruction itself carries the answer
format everywhere. Neither carries df_ray's confidence line ("Confidence: ..."): GoA's
instruction and ``final_prompt`` ask for none (its first answer's confidence is the JSON
``confidence_level``), so GoA's prompts are the task's with that line taken out.

Budget and sampling: every GoA call, the meta-LLM's included, is sent with ``max_tokens``
800 (``main``'s and ``run.sh``'s ``--max_tokens 800``; the ``max_tokens`` argument, null for
each agent's own budget) and temperature 0.7, whatever the benchmark's budget for the other
methods. With ``first_answer: independent`` the first answers are DarkForest's own shared
generations, at their own budget (that is the ablation's point).

Tokens: the generic accounting counts every call. GoA's own counter (``process_fn``'s
``input_token_total + output_token_total``) differs in one place: ``edge_sampling`` returns
only the token counts of its *last* call (the last judge's last attempt), and none when it
returns a single survivor or -1 (every node pruned). ``goa_tokens`` (result column) and
``goa_tokens_per_sample`` (metric) count a sample GoA's way, so the report can say which of
the two the paper's GoA figures match. The final answer is parsed by the task's parser (a JSON first answer, when
it is final, by GoA's JSON reader).

Switches kept as ablations: ``first_answer: independent`` uses DarkForest's shared
chain-of-thought generations as first answers (df_ray's earlier GoA: the confidence is the
parser's, 0.5 when none was given); ``allow_repeats: false`` drops repeated indices;
``selection_attempts: 1`` / ``scoring_attempts: 1`` never retry; ``replace_below: 0`` never
replaces.

Remaining differences from the reference:
- the reference sends every call with the same seed (0), so a repeated node there answers
  exactly as its twin under vLLM's per-request seeding; ours draw their own samples;
- a usable selection must have exactly ``top_k`` indices (the reference takes any count);
- max pooling breaks a tie for the top score by node order (the reference by domain:
  general, then code, then math);
- the final answer is read by the task's parser (the one every method's answers go
  through); the reference reads a multiple-choice answer by its last option letter alone and
  a MATH answer by its last ``\\boxed{}`` (else the whole text, ``0`` when empty). Only when
  our parser finds nothing in a multiple-choice answer does the reference's rule apply: its
  last option letter, else a random one (``invalid_final``); other tasks' unreadable answers
  are graded wrong;
- the reference counts only the last judge's tokens of edge sampling; the generic accounting
  counts every call (``goa_tokens`` counts GoA's way);
- finance-Llama3-8B has no chat template: the reference writes ChatML for it ("<|im_start|>
  system\nYou are a helpful assistant.<|im_end|>" for a plain string message; a message
  list, which always opens with its system turn there, keeps its own), and so do GoA's
  calls here (``no_template: chatml``, ``df_ray.engines.completion_prompt.render_chatml``:
  the default system turn where a request has none); every other row's calls, and GoA's
  first answers when ``first_answer`` is "independent" (DarkForest's shared calls), get
  df_ray's "Question:/Answer:" completion prompt. The HTTP engine sends chat messages and
  leaves the rendering to its server.

Calls for k nodes and R rounds, without retries or replacements: max 1 + 2k + R*k (3 nodes,
1 round: 1 selection + 3 answers + 3 scoring + 2 source-to-target + 1 target-to-source = 10),
mean 1 + 2k + R*(2k-2) + 1 (12). At most: ``selection_attempts`` + k + k +
``scoring_attempts`` * k + R*(2k-2) + 1.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any, ClassVar, Literal

from pydantic import Field

from df_ray.core.parsing import answer_words
from df_ray.core.types import Observation
from df_ray.methods.base import (
    AgentView,
    Call,
    CallRecord,
    Method,
    MethodArgs,
    MethodContext,
    Outcome,
    SampleState,
    derive_seed,
)
from df_ray.methods.common import (
    AGENT_ROLE,
    from_args,
    independent_call,
    lead_agent,
    parse_record,
)
from df_ray.methods.json_answers import fallback_answer, goa_json
from df_ray.methods.prompt_templates import (
    goa_answer_hint,
    goa_initial_prompt,
    goa_pooling_prompt,
    goa_scoring_prompt,
    goa_selection_prompt,
    goa_source_to_target_prompt,
    goa_target_to_source_prompt,
)
from df_ray.methods.result_columns import RowMean
from df_ray.tasks.answer_instruction import CONFIDENCE_INSTRUCTION

#: GoA's defaults (UNITES-Lab/GoA ``main``): 3 nodes per question, edge threshold 0.05,
#: 1 round, every call at temperature 0.7; ``modules.py``: 5 selection attempts, 3 scoring
#: attempts per judge, replacement below confidence 0.1.
DEFAULT_TOP_K = 3
#: ``main``'s and ``run.sh``'s ``--max_tokens``: every call of GoA's.
GOA_MAX_TOKENS = 800
SELECT_ROLE = "selector"
INITIAL_ROLE = "goa_initial"
REPLACE_ROLE = "goa_replacement"
SCORE_ROLE = "scorer"
S2T_ROLE = "source_to_target"
T2S_ROLE = "target_to_source"
POOL_ROLE = "pooling"

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_BRACKET_RE = re.compile(r"\[\s*(" + _NUM + r"(?:\s*[,;\s]\s*" + _NUM + r")*)\s*,?\s*\]")
_PLAIN_RE = re.compile(r"^\s*(" + _NUM + r"(?:\s*[,;\s]\s*" + _NUM + r")*)\s*$")
#: The reference's dictionary-style scores (``'0': 0.7`` / ``* 1: 0.3``).
_PAIR_RE = re.compile(r"[\*\-]?\s*'?(\d+)'?\s*:\s*([0-9]*\.?[0-9]+)")
#: The reference's selection pattern (``node_sampling_model_card``).
_SELECTION_RE = re.compile(r"</think>\s*([\d,]+)|(?:Answer:\s*|the answer is:\s*\n?)(\d+)"
                           r"|^\s*([\d,]+)\s*$", re.IGNORECASE | re.MULTILINE)


def parse_scores(text: str, k: int) -> list[float] | None:
    """A judge's k scores, read as the reference's ``parse_ranked_scores`` reads them: a
    bracketed list anywhere, else ``'1': 0.7``-style pairs ordered by their index, else the
    whole reply as a list. Valid iff exactly k finite non-negative numbers with
    0.9 < sum <= 1 (the reference's check)."""
    text = text[:2000]
    m = _BRACKET_RE.search(text)
    pairs = [] if m else _PAIR_RE.findall(text)
    if pairs:
        vals = [float(v) for _, v in sorted(pairs, key=lambda kv: int(kv[0]))]
    else:
        m = m or _PLAIN_RE.match(text.strip())
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


def parse_selection(text: str, n: int, top_k: int, *, allow_repeats: bool = True
                    ) -> list[int] | None:
    """The selected agent indices, in the reply's order, repeats kept (``allow_repeats``) or
    dropped; None when the reference's pattern finds none, one is out of range, or there are
    not exactly ``top_k``."""
    m = _SELECTION_RE.search(text or "")
    if not m:
        return None
    found = m.group(1) or m.group(2) or m.group(3)
    try:
        idx = [int(t) for t in found.split(",")]
    except ValueError:  # "0,,1"
        return None
    if any(i < 0 or i >= n for i in idx):
        return None
    if not allow_repeats:
        idx = list(dict.fromkeys(idx))
    return idx if len(idx) == top_k else None


class GraphOfAgents(Method):
    """Shared machinery; ``pooling`` is "mean" or "max" in the registered subclasses."""

    name = "goa"
    pooling: ClassVar[str] = "mean"
    result_columns: ClassVar[dict[str, str]] = {
        "goa_tokens": "int64",  # the sample's tokens as GoA's own counter counts them
    }
    metrics: ClassVar[dict[str, RowMean]] = {
        "goa_tokens_per_sample": RowMean("goa_tokens"),
    }

    class Args(MethodArgs):
        rounds: int = Field(1, strict=True, ge=1, description="message-passing rounds")
        top_k: int | None = Field(DEFAULT_TOP_K, strict=True, ge=1,
                                  description="nodes the meta-LLM selects per question "
                                              "(GoA's 3; null: every agent, no selection)")
        threshold: float = Field(0.05, strict=True, ge=0.0, lt=1.0,
                                 description="edge-score pruning threshold (GoA's 0.05)")
        first_answer: Literal["brief_json", "independent"] = Field(
            "brief_json", description="brief_json: GoA's brief JSON answer with a confidence "
                                      "(its own calls); independent: DarkForest's shared "
                                      "chain-of-thought answers (ablation)")
        allow_repeats: bool = Field(True, description="a repeated index is another node "
                                                      "(GoA's); false: repeats dropped")
        selection_attempts: int = Field(5, strict=True, ge=1,
                                        description="selection calls before the fallback "
                                                    "(GoA's 5)")
        scoring_attempts: int = Field(3, strict=True, ge=1,
                                      description="scoring calls per judge before it is "
                                                  "dropped (GoA's 3)")
        replace_below: float = Field(0.1, ge=0.0, le=1.0,
                                     description="a node whose confidence is missing or "
                                                 "below this is answered by the general "
                                                 "model (GoA's 0.1; 0: never)")
        meta_temperature: float | None = Field(
            0.7, ge=0.0, le=2.0, description="the meta-LLM's temperature for selection and "
                                             "pooling (GoA's 0.7; null: its own)")
        invalid_final: Literal["reference", "wrong"] = Field(
            "reference", description="a multiple-choice final answer the parser cannot read: "
                                     "the reference's last option letter in the text, else a "
                                     "random letter (reference); or no answer (wrong)")
        t2s_reads: Literal["refined", "initial"] = Field(
            "refined", description="what target-to-source shows of the targets: their "
                                   "responses after source-to-target (the reference code at "
                                   "c9def00, and the paper's text) or before this round "
                                   "(df_ray's earlier reading, ablation)")
        max_tokens: int | None = Field(
            GOA_MAX_TOKENS, strict=True, ge=1, le=32768,
            description="every GoA call's completion budget, the meta-LLM's included (GoA's "
                        "800: main.py, run.sh); null: each agent's own")
        no_template: Literal["chatml", "completion"] = Field(
            "chatml", description="a model without a chat template (finance-Llama): GoA's "
                                  "ChatML with 'You are a helpful assistant.' (utils.py "
                                  "generate_vllm), or df_ray's Question/Answer completion "
                                  "prompt (completion)")

    mp_rounds = from_args("rounds")
    top_k = from_args("top_k")

    @property
    def threshold(self) -> float:
        return float(self.args.threshold)

    @property
    def rounds(self) -> int:
        # every stage's calls at their most (selection, first answers, replacements, scoring,
        # two per message-passing round, pooling), then one round without calls in which the
        # last answers settle the outcome
        a = self.args
        return a.selection_attempts + 2 + a.scoring_attempts + 2 * self.mp_rounds + 1 + 1

    # ------------------------------------------------------------------ helpers

    def _k(self, ctx: MethodContext) -> int:
        return len(ctx.agents) if self.top_k is None else self.top_k

    @staticmethod
    def _general(ctx: MethodContext) -> AgentView:
        """The pool's general model: the agent on the meta-LLM's model, else the meta-LLM."""
        meta = lead_agent(ctx)
        for a in ctx.agents:
            if a.model == meta.model and a.revision == meta.revision:
                return a
        return meta

    @staticmethod
    def _by_key(state: SampleState) -> dict[str, CallRecord]:
        return {r.key: r for r in state.calls}

    def _text(self, state: SampleState, key: str | None) -> str:
        rec = self._by_key(state).get(key) if key else None
        return rec.reply if rec is not None else ""

    @staticmethod
    def _instruction(ctx: MethodContext, state: SampleState) -> str:
        """The reference's ``messages[0]``: the task's agent prompt, without df_ray's
        confidence line (GoA's instruction asks for none)."""
        return without_confidence(ctx.task.agent_prompt(state.sample))

    @staticmethod
    def _final_prompt(ctx: MethodContext) -> str:
        """The reference's ``final_prompt``: the task's answer instruction, without the
        confidence line."""
        return without_confidence(ctx.task.answer_instructions())

    def _request(self, ctx: MethodContext, agent: AgentView, user: str, state: SampleState,
                 slot: str, temperature: float | None = None):
        """A GoA call: the agent's request at GoA's budget (``max_tokens``), rendered as
        GoA renders it for a model without a chat template (``no_template``)."""
        req = ctx.request(agent, user, sample=state.sample, slot=slot, temperature=temperature)
        if self.args.no_template == "chatml":
            req = replace(req, no_template="chatml")
        if self.args.max_tokens is None or req.sampling.max_tokens == self.args.max_tokens:
            return req
        return replace(req, sampling=replace(req.sampling, max_tokens=self.args.max_tokens))

    def _meta_request(self, ctx: MethodContext, state: SampleState, user: str, slot: str):
        meta = lead_agent(ctx)
        return meta, self._request(ctx, meta, user, state, slot,
                                   temperature=self.args.meta_temperature)

    def _initial_call(self, ctx: MethodContext, state: SampleState, agent: AgentView,
                      slot: str, role: str) -> Call:
        if self.args.first_answer == "independent":
            if slot == "goa-initial":  # DarkForest's own generation: one shared cache entry
                return independent_call(ctx, agent, state)
            # a repeat or a replacement: the same prompt and budget as DarkForest's own
            user = ctx.task.agent_prompt(state.sample)
            return Call(role, agent.id, ctx.request(agent, user, sample=state.sample, slot=slot))
        spec = ctx.task.parse_spec(state.sample)
        hint = goa_answer_hint(spec)
        user = goa_initial_prompt(self._instruction(ctx, state), hint)
        return Call(role, agent.id, self._request(ctx, agent, user, state, slot))

    def _read_first(self, rec: CallRecord, ctx: MethodContext, state: SampleState
                    ) -> tuple[Observation, float | None]:
        """A first answer (or its replacement) and its confidence (None: missing)."""
        if rec.error:
            return Observation.invalid(rec.agent, raw=""), None
        if self.args.first_answer == "independent":
            o = parse_record(rec, ctx, state)
            return o, o.confidence
        return goa_json(rec.text, ctx.task.parse_spec(state.sample), agent=rec.agent)

    def _first_answer(self, ctx: MethodContext, state: SampleState, node: dict
                      ) -> tuple[Observation, float | None]:
        rec = self._by_key(state).get(node["key"])
        if rec is None:
            return Observation.invalid(node["agent"], raw=""), None
        return self._read_first(rec, ctx, state)

    # ------------------------------------------------------------------ planning

    def plan(self, round: int, state: SampleState, ctx: MethodContext) -> list[Call]:
        while not state.done:
            stage = state.data.get("stage", "select")
            calls = getattr(self, f"_stage_{stage}")(state, ctx)
            if calls:
                return calls
        return []

    def _stage_select(self, state: SampleState, ctx: MethodContext) -> list[Call]:
        d = state.data
        n, k = len(ctx.agents), self._k(ctx)
        chosen: list[int] | None = None
        if self.top_k is None:
            chosen = list(range(n))
        else:
            attempts = state.records(role=SELECT_ROLE)
            if attempts:
                last = attempts[-1]
                chosen = None if last.error else parse_selection(
                    last.text, n, k, allow_repeats=self.args.allow_repeats)
                if chosen is None and len(attempts) >= self.args.selection_attempts:
                    chosen = [i % n for i in range(k)]
                    d["selection_fallback"] = True
            if chosen is None:
                cards = [model_card(a) for a in ctx.agents]
                invalid = [r.text for r in attempts]
                user = goa_selection_prompt(self._instruction(ctx, state), cards, k, invalid)
                meta, req = self._meta_request(ctx, state, user, f"goa-select-{len(attempts)}")
                return [Call(SELECT_ROLE, meta.id, req)]
            d["selection_attempts"] = len(attempts)
        seen: dict[int, int] = {}
        nodes = []
        for i in chosen:
            r = seen.get(i, 0)
            seen[i] = r + 1
            nodes.append({"agent": ctx.agents[i].id,
                          "slot": "goa-initial" if r == 0 else f"goa-initial-{r}"})
        d["nodes"] = nodes
        d["stage"] = "initial"
        return []

    def _stage_initial(self, state: SampleState, ctx: MethodContext) -> list[Call]:
        d = state.data
        nodes = d["nodes"]
        if "key" not in nodes[0]:
            calls = [self._initial_call(ctx, state, ctx.agent(nd["agent"]), nd["slot"],
                                        INITIAL_ROLE) for nd in nodes]
            for nd, c in zip(nodes, calls, strict=True):
                nd["key"] = c.request.key()
            return calls
        if len(nodes) == 1:  # a single node: its answer is final
            d["final_key"] = nodes[0]["key"]
            state.done = True
            return []
        d["stage"] = "replace"
        return []

    def _stage_replace(self, state: SampleState, ctx: MethodContext) -> list[Call]:
        d = state.data
        nodes = d["nodes"]
        pending = d.get("replacing")
        if pending is None:
            general = self._general(ctx)
            calls, replacing = [], {}
            for j, nd in enumerate(nodes):
                _, conf = self._first_answer(ctx, state, nd)
                nd["confidence"] = conf
                if self.args.replace_below <= 0:
                    continue
                if conf is not None and conf >= self.args.replace_below:
                    continue
                agent = ctx.agent(nd["agent"])
                if agent.model == general.model and agent.revision == general.revision:
                    continue  # already the general model: kept
                c = self._initial_call(ctx, state, general, f"goa-replace-{j}", REPLACE_ROLE)
                calls.append(c)
                replacing[str(j)] = c.request.key()
            d["replacing"] = replacing
            if calls:
                return calls
        for j, key in (d.get("replacing") or {}).items():
            nd = nodes[int(j)]
            nd["replaced"] = nd["agent"]
            nd["agent"] = self._general(ctx).id
            nd["key"] = key
        for nd in nodes:
            nd["latest"] = nd["key"]
        d["stage"] = "score"
        return []

    def _stage_score(self, state: SampleState, ctx: MethodContext) -> list[Call]:
        d = state.data
        nodes = d["nodes"]
        k = len(nodes)
        judges: dict[str, dict[str, Any]] = d.setdefault(
            "judges", {str(j): {"keys": [], "scores": None} for j in range(k)})
        by_key = self._by_key(state)
        calls = []
        instruction = self._instruction(ctx, state)
        for j in range(k):
            jd = judges[str(j)]
            if jd["scores"] is not None:
                continue
            replies = [by_key[key] for key in jd["keys"] if key in by_key]
            if replies:
                last = replies[-1]
                vals = None if last.error else parse_scores(last.text, k - 1)
                if vals is not None:
                    jd["scores"] = vals
                    continue
                if len(replies) >= self.args.scoring_attempts:
                    jd["scores"] = False  # dropped
                    continue
            others = [(i, self._text(state, nodes[i]["key"])) for i in range(k) if i != j]
            user = goa_scoring_prompt(instruction, others, [r.text for r in replies])
            agent = ctx.agent(nodes[j]["agent"])
            c = Call(SCORE_ROLE, agent.id, self._request(
                ctx, agent, user, state, f"goa-score-{j}-{len(replies)}"))
            jd["keys"].append(c.request.key())
            calls.append(c)
        if calls:
            return calls
        d["graph"] = self._graph(judges, k)
        ranked = d["graph"]["ranked"]
        if len(ranked) == 1:  # one survivor: its first answer is final
            d["final_key"] = nodes[ranked[0]]["key"]
            state.done = True
            return []
        if not ranked:
            d["fallback"] = "pool_initial"
        d["stage"] = "mp" if ranked else "pool"
        d["mp"] = {"round": 1, "phase": "s2t"}
        return []

    def _graph(self, judges: dict[str, dict[str, Any]], k: int) -> dict[str, Any]:
        total = [0.0] * k
        judged = [0] * k
        dropped = []
        for j in range(k):
            vals = judges[str(j)]["scores"]
            if not vals:
                dropped.append(j)
                continue
            others = [i for i in range(k) if i != j]
            for i, v in zip(others, vals, strict=True):
                total[i] += v
                judged[i] += 1
        avg = [total[i] / judged[i] if judged[i] else 0.0 for i in range(k)]
        s = math.fsum(avg)
        scores = [v / s if s > 0 else v for v in avg]
        ranked = sorted(range(k), key=lambda i: -scores[i])  # stable: ties keep node order
        ranked = [i for i in ranked if scores[i] > self.threshold]
        return {"scores": scores, "ranked": ranked, "dropped_judges": dropped,
                "top": ranked[0] if ranked else None}

    def _node_call(self, ctx: MethodContext, state: SampleState, node: dict, role: str,
                   user: str, slot: str) -> Call:
        """A message-passing call of the graph node ``node`` (its agent answers ``user``)."""
        agent = ctx.agent(node["agent"])
        return Call(role, agent.id, self._request(ctx, agent, user, state, slot))

    def _stage_mp(self, state: SampleState, ctx: MethodContext) -> list[Call]:
        d = state.data
        nodes, graph, mp = d["nodes"], d["graph"], d["mp"]
        ranked, scores = graph["ranked"], graph["scores"]
        instruction = self._instruction(ctx, state)
        m = mp["round"]
        if mp["phase"] == "s2t":
            if "s2t" not in mp:
                mp["before"] = {str(i): nodes[i]["latest"] for i in ranked}
                calls = {}
                for pos, target in enumerate(ranked[1:], 1):
                    sources = ranked[:pos]
                    refs = _weighted(sources, scores, {s: self._text(state, mp["before"][str(s)])
                                                       for s in sources})
                    user = goa_source_to_target_prompt(
                        instruction, self._text(state, mp["before"][str(target)]), refs)
                    calls[target] = self._node_call(ctx, state, nodes[target], S2T_ROLE, user,
                                                    f"goa-s2t-{m}-{target}")
                mp["s2t"] = {str(n): c.request.key() for n, c in calls.items()}
                return list(calls.values())
            mp["phase"] = "t2s"
            return []
        if "t2s" not in mp:
            refined = mp["s2t"]
            sources = ranked[:-1] if self.pooling == "mean" else ranked[:1]
            final_prompt = self._final_prompt(ctx) if self.pooling == "max" else ""
            calls = {}
            for source in sources:
                targets = ranked[ranked.index(source) + 1:]
                shown = {t: self._text(state, refined[str(t)] if self.args.t2s_reads == "refined"
                                       else mp["before"][str(t)]) for t in targets}
                refs = _weighted(targets, scores, shown)
                user = goa_target_to_source_prompt(
                    instruction, self._text(state, mp["before"][str(source)]), refs,
                    final_prompt)
                calls[source] = self._node_call(ctx, state, nodes[source], T2S_ROLE, user,
                                                f"goa-t2s-{m}-{source}")
            mp["t2s"] = {str(n): c.request.key() for n, c in calls.items()}
            return list(calls.values())
        for i, key in {**mp["s2t"], **mp["t2s"]}.items():
            nodes[int(i)]["latest"] = key
        if m < self.mp_rounds:
            d["mp"] = {"round": m + 1, "phase": "s2t"}
            return []
        d["stage"] = "pool"
        return []

    def _stage_pool(self, state: SampleState, ctx: MethodContext) -> list[Call]:
        d = state.data
        nodes, graph = d["nodes"], d["graph"]
        if "pool_key" in d:
            d["final_key"] = d["pool_key"]
            state.done = True
            return []
        if graph["ranked"] and self.pooling == "max":
            d["final_key"] = nodes[graph["top"]]["latest"]
            state.done = True
            return []
        if graph["ranked"]:
            refs = [(i, graph["scores"][i], self._text(state, nodes[i]["latest"]))
                    for i in graph["ranked"]]
            slot = "goa-pool"
        else:  # every node pruned: the first answers, unlabelled (the reference's fallback)
            refs = [(i, None, self._text(state, nd["key"])) for i, nd in enumerate(nodes)]
            slot = "goa-pool-initial"
        user = goa_pooling_prompt(self._instruction(ctx, state), refs, self._final_prompt(ctx))
        meta, req = self._meta_request(ctx, state, user, slot)
        d["pool_key"] = req.key()
        return [Call(POOL_ROLE, meta.id, req)]

    # ------------------------------------------------------------------ outcome

    def finish(self, state: SampleState, ctx: MethodContext) -> Outcome:
        d = state.data
        nodes = d.get("nodes") or []
        initial = [self._first_answer(ctx, state, nd)[0] for nd in nodes if "key" in nd]
        extra: dict[str, Any] = {"pooling": self.pooling,
                                 "nodes": [nd["agent"] for nd in nodes],
                                 "replaced": {str(j): nd["replaced"] for j, nd in enumerate(nodes)
                                              if "replaced" in nd},
                                 "confidences": [nd.get("confidence") for nd in nodes]}
        for key in ("selection_attempts", "selection_fallback", "graph", "fallback"):
            if key in d:
                extra[key] = d[key]
        final = None
        rec = self._by_key(state).get(d.get("final_key", ""))
        if rec is not None and not rec.error:
            if rec.role in (AGENT_ROLE, INITIAL_ROLE, REPLACE_ROLE):
                final = self._read_first(rec, ctx, state)[0]
            else:
                final = parse_record(rec, ctx, state)
            final = final if final.valid else None
            if final is None and self.args.invalid_final == "reference":
                seed = derive_seed(0, state.sample.id, "goa-final", ctx.run_seed)
                final = reference_choice(rec.text, ctx.task.parse_spec(state.sample), seed,
                                         rec.agent)
                extra["final_fallback"] = final.rule if final is not None else None
        return Outcome(final=final, agent_observations=initial, extra=extra,
                       columns={"goa_tokens": goa_counted_tokens(state)})

    def max_calls_per_sample(self, ctx: MethodContext) -> int:
        a = self.args
        k = self._k(ctx)
        select = 0 if self.top_k is None else a.selection_attempts
        if k == 1:
            return select + 1
        per_round = 2 * k - 2 if self.pooling == "mean" else k
        return select + 2 * k + a.scoring_attempts * k + self.mp_rounds * per_round + 1


def reference_choice(text: str, spec, seed: int, agent: str) -> Observation | None:
    """GoA's last resort for a multiple-choice final answer (``main.py`` after
    ``get_alphabet_choice``): the last option letter followed by ")" in the text, else the last
    option letter anywhere, else a random letter (drawn from ``seed``). None for a kind whose
    answers are not option letters (``AnswerWords.letters``; GoA's MATH rule scores an
    unreadable answer as 0, which is wrong for every problem whose answer is not 0)."""
    shown = answer_words(spec).letters
    if not shown:
        return None
    letters = "".join(re.escape(c) for c in shown)
    found = re.findall(f"([{letters}])\\)", text or "") or re.findall(f"([{letters}])",
                                                                      text or "")
    if found:
        return Observation(agent=agent, answer=found[-1], confidence=0.5, valid=True,
                           quality=0.0, raw=text, extracted=found[-1], rule="goa_letter")
    fb = fallback_answer(spec, seed, agent=agent)
    return None if fb is None else replace(fb, raw=text, rule="goa_random")


def without_confidence(text: str) -> str:
    """``text`` without df_ray's confidence instruction (GoA's prompts ask for none)."""
    return "\n".join(line for line in text.split("\n")
                     if line.strip() != CONFIDENCE_INSTRUCTION).rstrip()


def goa_counted_tokens(state: SampleState) -> int:
    """A sample's prompt + completion tokens as GoA's ``process_fn`` adds them up: every
    call, except that edge sampling contributes only its last call (the last judge's last
    attempt: ``edge_sampling`` returns the counts of the last ``generate_vllm`` it made), and
    nothing when it returned no graph (a single survivor, or every node pruned)."""
    d = state.data
    judges = d.get("judges") or {}
    kept: set[str] = set()
    graph = d.get("graph") or {}
    if judges and len(graph.get("ranked") or ()) >= 2:
        last = judges[str(max(int(j) for j in judges))]["keys"]
        if last:
            kept.add(last[-1])
    return sum(r.prompt_tokens + r.completion_tokens for r in state.calls
               if r.role != SCORE_ROLE or r.key in kept)


def model_card(agent: AgentView) -> str:
    """What the meta-LLM reads about a candidate node: its model card as it is (GoA's
    ``node_sampling_model_card`` shows ``model_card`` alone), else its model id."""
    if agent.description:
        return agent.description
    return f"{agent.model} (no description)"


def _weighted(names: list[int], scores: list[float], texts: dict[int, str]
              ) -> list[tuple[int, float, str]]:
    """(node, score normalised over ``names``, text): GoA's relevance weights of references."""
    total = math.fsum(scores[a] for a in names)
    return [(a, (scores[a] / total if total > 0 else 1.0 / len(names)), texts[a])
            for a in names]


class GoAMean(GraphOfAgents):
    name = "goa_mean"
    pooling = "mean"


class GoAMax(GraphOfAgents):
    name = "goa_max"
    pooling = "max"
