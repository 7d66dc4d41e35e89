"""Completion budgets per benchmark: every agent's and the coordinator's ``max_tokens`` in
the paper's sweeps, except GoA's calls, which run at GoA's own 800 (its ``max_tokens``
argument, ``df_ray.methods.goa``) (``max_tokens:`` in each sweep file, checked against this table by the
tests and rendered into docs/experiments.md).

GoA's cap of 800 tokens goes with GoA's brief answers ("2-3 key sentences"); df_ray's agents
reason step by step, so a chain-of-thought benchmark gets room to finish. The paper's
tokens per sample bound what a call spends on average: DarkForest makes 4 calls per sample
(3 agents and the coordinator), so the paper's figure over 4 is a call's prompt plus
completion. A budget well above that mean leaves the long tail room; whether it still cuts
answers off is measured, not assumed: every run logs its truncation rate per agent and per
configuration (``truncation_rate``), and the report shows it.
"""

from __future__ import annotations

#: benchmark -> (max_tokens, why)
MAX_TOKENS: dict[str, tuple[int, str]] = {
    "math": (2048, "step-by-step competition solutions; the paper's 4.7k tokens per sample "
                   "is ~1.2k a call with its prompt, a mean that 800 already binds on the "
                   "long chains"),
    "humaneval": (1024, "one function and a short explanation; the paper's 1.5k tokens per "
                        "sample is ~375 a call, prompt included"),
    "mmlu_pro": (2048, "chain of thought over 10 options; the paper's 5.9k tokens per sample "
                       "is ~1.5k a call, out of reach under a cap of 800"),
    "gpqa": (2048, "graduate-level science reasoning; the paper's 3.2k tokens per sample "
                   "(~0.8k a call) is a mean, and the long tail needs room to finish"),
    "finqa": (1024, "a short program over the table; the paper's 4.5k tokens per sample is "
                    "mostly the table in the prompts"),
    "legalbench": (1024, "a label after brief reasoning; the paper's 1.9k tokens per sample "
                         "is ~475 a call, prompt included (the zero-shot prompt: the few-shot "
                         "one is ~970 tokens alone)"),
}
