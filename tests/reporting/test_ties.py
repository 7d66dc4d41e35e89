"""The report's tie rules over recorded samples: a vote whose answers are all distinct is
scored 1/m per correct answer under ``expected``, by a seeded pick under ``random``, as it
ran under ``first``; the belief-only decision likewise; rows that are no vote keep their
outcome; the pooled data and the accuracy table carry the tie counts."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from df_ray.core.voting import random_pick
from df_ray.reporting.inference import accuracy_table, pooled
from df_ray.reporting.ties import tie_outcome


def _detail(answers: dict[str, str | None], right: dict[str, bool], **extra) -> dict:
    obs = [{"agent": a, "answer": z, "valid": z is not None} for a, z in answers.items()]
    return {"observations": obs, "agent_correct": right, "extra": extra}


DISTINCT = _detail({"qwen-a": "x", "qwen-b": "y", "smol": "z"},
                   {"qwen-a": True, "qwen-b": False, "smol": False},
                   votes={"x": 1, "y": 1, "z": 1}, weights=None, voting="majority")


def test_a_vote_of_distinct_answers_is_its_tie_rule():
    e = tie_outcome(DISTINCT, "weighted_vote", True, "expected", 0, "HumanEval/1")
    assert e.credit == pytest.approx(1 / 3) and e.tied == 3 and e.matters
    assert tie_outcome(DISTINCT, "weighted_vote", True, "first", 0, "HumanEval/1").credit == 1
    r = tie_outcome(DISTINCT, "weighted_vote", True, "random", 4, "HumanEval/1")
    assert r.credit == float(random_pick(["x", "y", "z"], 4, "HumanEval/1") == "x")


def test_a_weighted_vote_ties_only_on_equal_weight():
    d = dict(DISTINCT, extra={"weights": {"qwen-a": 0.55, "qwen-b": 0.4, "smol": 0.03},
                              "voting": "alpha"})
    e = tie_outcome(d, "weighted_vote", True, "expected", 0, "s")
    assert (e.credit, e.tied, e.matters) == (1.0, 1, False)


def test_the_belief_only_decision_and_darkforest():
    clusters = [{"answer": "x", "support": ["qwen-a"], "posterior": 0.4},
                {"answer": "y", "support": ["qwen-b"], "posterior": 0.4},
                {"answer": "z", "support": ["smol"], "posterior": 0.2}]
    d = _detail({"qwen-a": "x", "qwen-b": "y", "smol": "z"},
                {"qwen-a": False, "qwen-b": True, "smol": False},
                belief={"clusters": clusters, "top": "x"})
    only = tie_outcome(d, "darkforest", False, "expected", 0, "s",
                       {"decision_source": "belief"})
    assert (only.credit, only.tied, only.matters) == (0.5, 2, True)
    # the coordinator decided: the outcome stays, the tie of z* is still counted
    coord = tie_outcome(d, "darkforest", True, "expected", 0, "s",
                        {"decision_source": "coordinator"})
    assert (coord.credit, coord.tied, coord.matters) == (1.0, 2, False)


def test_rows_that_are_no_vote_keep_their_outcome():
    d = _detail({"qwen-a": "x"}, {"qwen-a": True})
    for rule in ("first", "random", "expected"):
        assert tie_outcome(d, "single", True, rule, 0, "s") == (1.0, 0, False, False)
    with pytest.raises(ValueError, match="unknown tie rule"):
        tie_outcome(d, "single", True, "coin", 0, "s")


def test_pooled_scores_votes_under_the_rule_and_counts_ties():
    table = pd.DataFrame([{"run_id": "r1", "benchmark": "humaneval", "group": "majority_vote",
                           "method": "weighted_vote", "seed": 0, "reference": False}])
    unanimous = _detail({"qwen-a": "x", "qwen-b": "x", "smol": "z"},
                        {"qwen-a": True, "qwen-b": True, "smol": False}, voting="majority")
    samples = {"r1": pd.DataFrame({"sample_id": ["a", "b"], "correct": [True, True],
                                   "detail": [json.dumps(DISTINCT), json.dumps(unanimous)]})}
    data = pooled(table, samples)  # expected, the default
    assert list(data["correct"]) == pytest.approx([1 / 3, 1.0])
    assert list(data["correct_run"]) == [True, True] and list(data["tied"]) == [3, 1]
    acc = accuracy_table(data).iloc[0]
    assert acc["accuracy"] == pytest.approx(100 * (1 / 3 + 1) / 2)
    assert (acc["ties"], acc["ties_matter"]) == (1, 1)
    assert pd.isna(acc["exact_lo"])  # an expected credit has no binomial interval
    first = accuracy_table(pooled(table, samples, "first")).iloc[0]
    assert first["accuracy"] == 100.0 and first["exact_lo"] > 0
