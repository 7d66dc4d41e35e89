"""Tie rules in the report's tables (``df_ray.core.voting``'s ``first``, ``random`` and
``expected``).

A vote over answers that are all distinct is decided by its tie rule alone, so a vote
baseline's accuracy can owe itself to the order of the agents in a config (``first`` gives a
tie to the lowest agent index). The report re-scores every sample whose final answer is a
vote or the belief's argmax from what the run recorded (its observations, their grades, the
vote's weights, the belief's clusters), with no call and no grading again:

- majority and weighted vote (``weighted_vote``): the tied answers of the vote;
- DarkForest with ``belief_only``: the clusters level on posterior and support;
- every other row (DarkForest's coordinator decides, the single agents, MoA, Debate, ...)
  keeps its own outcome; DarkForest's rows still count how often its z* was a tie.

``first`` is the run's own outcome; ``random`` a uniform pick seeded by the run seed and
the sample id (``df_ray.core.voting.random_pick``); ``expected`` its exact expectation (a
tie among m answers counts 1/m for each correct one), the tables' default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import pandas as pd

from df_ray.core.types import Observation
from df_ray.core.voting import TIE_RULES, check_tie_rule, random_pick, tie_credit, tied_answers

__all__ = ["DEFAULT_TIE_RULE", "TIE_RULES", "TieOutcome", "rescore_seed_summary",
           "tie_outcome"]

#: The rule the report's tables use unless told otherwise.
DEFAULT_TIE_RULE = "expected"


class TieOutcome(NamedTuple):
    credit: float  # the sample's outcome under the rule
    tied: int  # answers level at the top of its vote or belief (0: the row is no vote)
    matters: bool  # the tied answers are not all equally right: the rule can change it
    vote: bool = False  # the row's final answer is the vote or the belief's argmax


def _observations(detail: Mapping[str, Any]) -> list[Observation]:
    out = []
    for o in detail.get("observations") or []:
        if o.get("valid") and o.get("answer") is not None:
            out.append(Observation(agent=str(o["agent"]), answer=str(o["answer"])))
    return out


def _answer_grades(detail: Mapping[str, Any]) -> dict[str, bool]:
    right = detail.get("agent_correct") or {}
    grades: dict[str, bool] = {}
    for o in detail.get("observations") or []:
        if o.get("valid") and o.get("answer") is not None and o.get("agent") in right:
            grades[str(o["answer"])] = bool(right[o["agent"]])
    return grades


def _belief_tie(belief: Mapping[str, Any]) -> list[str]:
    clusters = belief.get("clusters") or []
    if not clusters:
        return []

    def score(c: Mapping[str, Any]) -> tuple[float, int]:
        return (round(float(c.get("posterior") or 0.0), 12), len(c.get("support") or ()))

    best = max(score(c) for c in clusters)
    return [str(c["answer"]) for c in clusters if score(c) == best]


def tie_outcome(detail: Mapping[str, Any], method: str, correct: bool, rule: str,
                run_seed: int, sample_id: str,
                columns: Mapping[str, Any] | None = None) -> TieOutcome:
    """One sample's credit under ``rule`` (``correct``: the run's own outcome, which
    ``first`` keeps and every row that is no vote keeps), the number of answers tied at the
    top of its vote or belief (0: no vote), and whether the rule can change it (the tied
    answers are not all equally right)."""
    check_tie_rule(rule)
    extra = detail.get("extra") or {}
    belief = extra.get("belief")
    grades = _answer_grades(detail)
    decides = True
    if method == "weighted_vote":
        weights = extra.get("weights") if extra.get("voting") == "alpha" else None
        tied = tied_answers(_observations(detail), weights, default=0.5)
    elif isinstance(belief, Mapping):
        tied = _belief_tie(belief)
        decides = (columns or {}).get("decision_source") == "belief"
    else:
        return TieOutcome(float(correct), 0, False)
    matters = len(tied) > 1 and len({grades.get(a, False) for a in tied}) > 1
    if not decides or rule == "first" or len(tied) < 2:
        return TieOutcome(float(correct), len(tied), matters and decides, decides)
    if rule == "random":
        return TieOutcome(float(grades.get(random_pick(tied, run_seed, sample_id), False)),
                          len(tied), matters, True)
    return TieOutcome(tie_credit(tied, grades), len(tied), matters, True)


def is_fractional(values) -> bool:
    """Whether any outcome is strictly between 0 and 1 (an ``expected`` credit)."""
    return any(0.0 < float(v) < 1.0 for v in values if not math.isnan(float(v)))


def rescore_seed_summary(summary: pd.DataFrame, data: pd.DataFrame, rule: str) -> pd.DataFrame:
    """The seed summary (``tables.seed_summary``) with each vote row's accuracies under
    ``rule`` (from ``inference.pooled``'s ``data``), and for every row ``tie_rule`` (the
    rule for a vote, ``run`` for a row that is no vote) and ``ties`` (problems, over its
    seeds, whose vote or belief had answers level at the top)."""
    import numpy as np

    if summary.empty:
        return summary
    out = summary.copy()
    out["tie_rule"], out["ties"] = "run", 0
    if data.empty or "tied" not in data:
        return out
    for i, r in out.iterrows():
        d = data[(data["benchmark"] == r["benchmark"]) & (data["group"] == r["configuration"])]
        if d.empty:
            continue
        out.at[i, "ties"] = int((d["tied"] > 1).sum())
        if "vote" not in d or not d["vote"].astype(bool).any():
            continue
        per_seed = d.groupby("seed")["correct"].mean().sort_index() * 100
        acc = per_seed.to_numpy(dtype=float)
        out.at[i, "tie_rule"] = rule
        out.at[i, "accuracy_mean"] = float(np.mean(acc))
        out.at[i, "accuracy_se_over_seeds"] = float(np.std(acc, ddof=1) / math.sqrt(len(acc)))
        out.at[i, "per_seed"] = " / ".join(f"{s}: {a:.2f}" for s, a in per_seed.items())
    return out
