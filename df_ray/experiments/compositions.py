"""Per-benchmark agent compositions: our reading of the paper's Tables 3 and 4.

The paper runs three heterogeneous 7B/8B agents per benchmark, drawn from the
Graph-of-Agents pool (:mod:`df_ray.experiments.pool`), plus one coordinator. Its Table 3
(backbones) and Table 4 (the composition per benchmark) are not in our sources, so the
compositions below are *ours*, chosen by one rule the paper's description implies: the
benchmark's domain specialist(s) first, then general models, preferring a second model
family where the choice is otherwise even (heterogeneous agents make less-correlated errors,
which is what the belief's independence discount rewards). The coordinator is always the
general Qwen2.5-7B-Instruct, GoA's meta-LLM. Every backbone is a pool model: no composition
needs one from outside.

Reasoning, per benchmark:

- ``math``: Mathstral-7B (the math specialist); Qwen2.5-7B (general, strong at MATH);
  Qwen2.5-Coder-7B (a program-minded solver; the pool's next best at arithmetic-heavy
  derivations).
- ``humaneval``: Qwen2.5-Coder-7B (the code specialist); Qwen2.5-7B (general, also codes);
  Mathstral-7B (a Mistral-family model with precise stepwise reasoning; the only other
  pool model that writes reliable Python).
- ``mmlu_pro``: fourteen subject categories, STEM-heavy: Qwen2.5-7B (general knowledge);
  Mathstral-7B (math, physics, chemistry, engineering); Bio-Medical-Llama-3-8B (biology,
  health, psychology).
- ``gpqa``: graduate biology, physics and chemistry: Qwen2.5-7B; Mathstral-7B (physics,
  chemistry); Bio-Medical-Llama-3-8B (biology).
- ``finqa``: finance-Llama3-8B (the finance specialist: reports and tables); Qwen2.5-7B
  (general); Qwen2.5-Coder-7B (the answer is a program in FinQA's DSL).
- ``legalbench``: Saul-7B (the legal specialist); Qwen2.5-7B (general); finance-Llama3-8B
  (a Llama-3 model trained on filings and contracts-adjacent text: the closest second
  domain, and a third model family).

FinQA scaling (Table 10 / Figure 8), 3 -> 4 -> 5 backbones: the FinQA composition grows in
the order of :data:`FINQA_GROWTH`: first Mathstral-7B (numerical reasoning, the skill FinQA
tests after reading the table), then Saul-7B (regulatory and contractual language, the
nearest remaining domain to financial reports; Bio-Medical-Llama-3-8B is the one pool model
left out). Composition names: ``finqa`` (3), ``finqa-4``, ``finqa-5``.

``pool`` is the whole six-model pool: Graph-of-Agents runs on it, its meta-LLM choosing
``top_k`` = 3 nodes per question from the model cards, as GoA does.

Self-Consistency (Table 1's row) draws ``SELF_CONSISTENCY_SAMPLES`` answers from one model,
:data:`SELF_CONSISTENCY_AGENT` per benchmark. The paper names neither; we read them off its
evidence:

- *The model.* The row must be reachable. On MATH the paper reports 71.80. Mathstral-7B's own
  card reports MATH 56.6 greedy and 68.4 with a 64-sample majority vote, so no sample count
  our token budget allows takes it to 71.80; Qwen2.5-7B-Instruct's card reports MATH 75.5, and
  a majority of its samples at temperature 0.7 (a little below its greedy score each) lands
  where the paper's row is. Qwen2.5-7B-Instruct is also the pool's general model, GoA's
  meta-LLM and our coordinator, and its card reports MMLU-Pro 56.3 (the paper's
  Self-Consistency row: 53.00) and GPQA 36.4 (40.40). So every benchmark draws from it except
  HumanEval, where the pool's code specialist Qwen2.5-Coder-7B-Instruct (card: HumanEval 88.4
  against 84.8) is the obvious model; the paper has no HumanEval Self-Consistency row.
- *The count.* The paper's MATH tokens give Self-Consistency 11.8k per sample against
  DarkForest's 4.7k (2.5x). DarkForest spends three independent agent calls and one
  coordinator call, whose prompt adds the question and a ~150-token belief summary: about
  (4.7k - 0.15k) / 4 = 1.14k tokens per independent call, so 11.8k is about 10.4 calls of one
  model (8-11 for the spread of completion lengths across the three models). We take 10.

Sampling: agents at GoA's temperature 0.7 (the paper's is not in our sources); the
coordinator at temperature 0.2 (ours: it decides, it does not explore). ``max_tokens`` 800
(GoA's) is only the fallback of a composition used outside the paper's sweeps: those give
each benchmark its own budget (``df_ray/experiments/budgets.py``, ``RunConfig.max_tokens``).
"""

from __future__ import annotations

from typing import Any

from df_ray.errors import UnknownNameError
from df_ray.experiments.pool import GENERAL, POOL, pool_model

#: GoA's sampling defaults, used for every agent.
AGENT_TEMPERATURE = 0.7
AGENT_MAX_TOKENS = 800
COORDINATOR_TEMPERATURE = 0.2
COORDINATOR_MAX_TOKENS = 800
COORDINATOR_ID = "coordinator"
COORDINATOR_SEED = 0

#: benchmark -> the three pool backbones of its agents, specialist first.
COMPOSITIONS: dict[str, tuple[str, ...]] = {
    "math": ("mathstral-7b", "qwen25-7b", "qwen25-coder-7b"),
    "humaneval": ("qwen25-coder-7b", "qwen25-7b", "mathstral-7b"),
    "mmlu_pro": ("qwen25-7b", "mathstral-7b", "biomed-llama3-8b"),
    "gpqa": ("qwen25-7b", "mathstral-7b", "biomed-llama3-8b"),
    "finqa": ("finance-llama3-8b", "qwen25-7b", "qwen25-coder-7b"),
    "legalbench": ("saul-7b", "qwen25-7b", "finance-llama3-8b"),
}

#: Self-Consistency: the model each benchmark draws from and the sample count (reasoned in the
#: module docstring from the paper's token ratio and the models' own reported scores).
SELF_CONSISTENCY_SAMPLES = 10
SELF_CONSISTENCY_AGENT: dict[str, str] = {
    "math": GENERAL, "humaneval": "qwen25-coder-7b", "mmlu_pro": GENERAL, "gpqa": GENERAL,
    "finqa": GENERAL, "legalbench": GENERAL,
}

#: The order in which FinQA's composition grows from 3 to 5 backbones.
FINQA_GROWTH: tuple[str, ...] = ("mathstral-7b", "saul-7b")

NAMED: dict[str, tuple[str, ...]] = {
    **COMPOSITIONS,
    "finqa-4": COMPOSITIONS["finqa"] + FINQA_GROWTH[:1],
    "finqa-5": COMPOSITIONS["finqa"] + FINQA_GROWTH[:2],
    "pool": tuple(POOL),
}


def agent(backbone: str) -> dict[str, Any]:
    """The agent on a pool backbone: its id is the pool name, its seed the pool's."""
    m = pool_model(backbone)
    return {"id": m.name, "backbone": m.name, "temperature": AGENT_TEMPERATURE,
            "max_tokens": AGENT_MAX_TOKENS, "seed": m.seed}


def coordinator(backbone: str = GENERAL) -> dict[str, Any]:
    pool_model(backbone)
    return {"id": COORDINATOR_ID, "backbone": backbone, "temperature": COORDINATOR_TEMPERATURE,
            "max_tokens": COORDINATOR_MAX_TOKENS, "seed": COORDINATOR_SEED}


class UnknownCompositionError(UnknownNameError):
    """No composition of that name; the message lists the known ones."""


def composition(name: str) -> dict[str, Any]:
    """``agents`` and ``coordinator`` of a named composition, as config mappings."""
    if name not in NAMED:
        raise UnknownCompositionError(f"unknown composition {name!r}; known: "
                                      f"{', '.join(NAMED)}")
    return {"agents": [agent(b) for b in NAMED[name]], "coordinator": coordinator()}
