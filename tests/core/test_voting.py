"""Majority and weighted votes (baselines) and ReConcile's confidence recalibration."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from df_ray.core.types import Observation
from df_ray.core.voting import (
    TIE_RULES,
    first_sample_vote,
    majority_vote,
    random_pick,
    recalibrate_reconcile,
    tie_credit,
    tied_answers,
    vote_credit,
    weighted_vote,
)

Obs = Observation


def test_majority_basic_and_invalid():
    assert majority_vote([]) is None
    assert majority_vote([Obs.invalid("a"), Obs("b", None)]) is None
    assert majority_vote([Obs("a", "1"), Obs("b", "2"), Obs("c", "2"), Obs.invalid("d")]) == "2"


def test_majority_counts_repeated_agent():
    # Self-Consistency: k samples from one model share its id and all count
    obs = [Obs("m", "3"), Obs("m", "4"), Obs("m", "4")]
    assert majority_vote(obs) == "4"


def test_majority_tie_break_agent_index_then_key():
    obs = [Obs("b", "1"), Obs("a", "2")]
    assert majority_vote(obs) == "2"  # a has the lower index (sorted ids)
    assert majority_vote(obs, agent_order=["b", "a"]) == "1"
    assert majority_vote([Obs("m", "9"), Obs("m", "3")]) == "3"  # same agent: smaller key
    assert majority_vote([Obs("zz", "1"), Obs("b", "2")], agent_order=["b"]) == "2"  # unknown last


def test_weighted_vote():
    obs = [Obs("a", "1"), Obs("b", "2"), Obs("c", "2")]
    assert weighted_vote(obs, {"a": 0.9, "b": 0.3, "c": 0.4}) == "1"
    assert weighted_vote(obs, {"a": 0.5, "b": 0.3, "c": 0.4}) == "2"
    # equal weight: larger support wins, then agent index
    assert weighted_vote(obs, {"a": 0.6, "b": 0.3, "c": 0.3}) == "2"
    assert weighted_vote([Obs("a", "1"), Obs("b", "2")], {"a": 0.5, "b": 0.5}) == "1"
    assert weighted_vote([Obs("a", "1"), Obs("b", "2")], {"a": 0.5, "b": 0.5}, ["b", "a"]) == "2"
    assert weighted_vote([], {}) is None


def test_weighted_vote_missing_weight():
    with pytest.raises(KeyError, match="'c'"):
        weighted_vote([Obs("c", "1")], {"a": 1.0})
    assert weighted_vote([Obs("c", "1"), Obs("a", "2")], {"a": 0.4}, default=0.5) == "1"


@pytest.mark.parametrize(("conf", "expected"), [
    (0.0, 0.1), (0.6, 0.1), (0.61, 0.3), (0.79, 0.3), (0.8, 0.5), (0.89, 0.5), (0.9, 0.8),
    (0.99, 0.8), (1.0, 1.0), (1.5, 1.0), (float("nan"), 0.1),
])
def test_recalibrate_reconcile(conf, expected):
    assert recalibrate_reconcile(conf) == expected


@settings(max_examples=200, deadline=None)
@given(obs=st.lists(st.builds(Obs, agent=st.sampled_from("abcd"),
                              answer=st.one_of(st.none(), st.sampled_from("123")),
                              valid=st.booleans()), max_size=8),
       perm=st.randoms(use_true_random=False))
def test_votes_independent_of_order(obs, perm):
    shuffled = list(obs)
    perm.shuffle(shuffled)
    weights = {"a": 0.1, "b": 0.7, "c": 0.35, "d": 0.35}
    assert majority_vote(obs) == majority_vote(shuffled)
    assert weighted_vote(obs, weights) == weighted_vote(shuffled, weights)
    winner = majority_vote(obs)
    valid = [o.answer for o in obs if o.valid and o.answer is not None]
    if valid:
        assert valid.count(winner) == max(valid.count(v) for v in valid)
    else:
        assert winner is None


def test_first_sample_vote_breaks_ties_by_the_first_sample():
    def o(ans, valid=True):
        return Observation(agent="a", answer=ans, confidence=0.5, valid=valid)
    assert first_sample_vote([o("z"), o("a"), o("a"), o("z")]) == "z"
    assert first_sample_vote([o("a"), o("z"), o("z")]) == "z"  # a plurality still wins
    assert first_sample_vote([o("z", valid=False), o("b"), o("z"), o("b"), o("z")]) == "b"
    assert first_sample_vote([o("q", valid=False)]) is None
    assert first_sample_vote([]) is None


# ----------------------------------------------------------------------------- tie rules


def test_every_vote_takes_a_named_tie_rule():
    assert TIE_RULES == ("first", "random", "expected")
    distinct = [Obs("qwen-a", "x"), Obs("qwen-b", "y"), Obs("smol", "z")]
    # first: the lowest agent index, as the reference code keeps the first answer it sees
    assert majority_vote(distinct, agent_order=["qwen-a", "qwen-b", "smol"]) == "x"
    assert majority_vote(distinct, agent_order=["smol", "qwen-b", "qwen-a"]) == "z"
    # random: the same pick for the same run seed and sample, whatever the order
    pick = majority_vote(distinct, ties="random", run_seed=1, sample_id="HumanEval/3")
    assert pick == majority_vote(distinct[::-1], ties="random", run_seed=1,
                                 sample_id="HumanEval/3")
    assert pick == weighted_vote(distinct, {"qwen-a": 0.5, "qwen-b": 0.5, "smol": 0.5},
                                 ties="random", run_seed=1, sample_id="HumanEval/3")
    assert pick == first_sample_vote(distinct, ties="random", run_seed=1,
                                     sample_id="HumanEval/3")
    # expected is a score, never an answer
    with pytest.raises(ValueError, match="a score, not an answer"):
        majority_vote(distinct, ties="expected")
    with pytest.raises(ValueError, match="unknown tie rule 'last'"):
        vote_credit(distinct, {}, "last")


def test_random_ties_are_uniform_over_samples_and_seeds():
    tied = ["a", "b", "c"]
    picks = [random_pick(tied, seed, f"s{i}") for seed in range(3) for i in range(600)]
    for a in tied:  # 1,800 seeded picks; each answer's share within 5 points of a third
        assert abs(picks.count(a) / len(picks) - 1 / 3) < 0.05
    assert len({random_pick(tied, 0, f"s{i}") for i in range(20)}) == 3


def test_expected_credit_is_one_over_m_per_correct_tied_answer():
    distinct = [Obs("a1", "x"), Obs("a2", "y"), Obs("a3", "z")]
    assert vote_credit(distinct, {"x": True}) == pytest.approx(1 / 3)
    assert vote_credit(distinct, {"y": True}) == pytest.approx(1 / 3)
    assert vote_credit(distinct, {"x": True, "z": True}) == pytest.approx(2 / 3)
    # no tie: the winner's grade under every rule
    two = [Obs("a1", "x"), Obs("a2", "y"), Obs("a3", "y")]
    for rule in TIE_RULES:
        assert vote_credit(two, {"y": True}, rule) == 1.0
        assert vote_credit(two, {"x": True}, rule) == 0.0
    # first: the run's own winner (the lower agent index)
    assert vote_credit(distinct, {"x": True}, "first") == 1.0
    assert vote_credit(distinct, {"y": True}, "first") == 0.0
    # weighted: a tie is equal total weight and support
    w = {"a1": 0.6, "a2": 0.3, "a3": 0.3}
    assert tied_answers(distinct, w) == ["x"]
    assert tied_answers(distinct, {"a1": 0.3, "a2": 0.3, "a3": 0.3}) == ["x", "y", "z"]
    assert vote_credit(distinct, {"y": True}, weights=w) == 0.0
    assert tie_credit([], {}) == 0.0 and vote_credit([], {"x": True}) == 0.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["p", "q", "r", None]), min_size=1, max_size=7),
       st.dictionaries(st.sampled_from(["p", "q", "r"]), st.booleans()))
def test_expected_credit_is_the_mean_of_the_random_rule_over_the_tied(answers, correct):
    obs = [Obs(f"a{i}", a) if a is not None else Obs.invalid(f"a{i}")
           for i, a in enumerate(answers)]
    tied = tied_answers(obs)
    if not tied:
        assert vote_credit(obs, correct) == 0.0
        return
    # every pick of the random rule is one of the tied answers; their mean grade is the credit
    assert random_pick(tied, 0, "x") in tied
    mean = sum(bool(correct.get(a)) for a in tied) / len(tied)
    assert vote_credit(obs, correct) == pytest.approx(mean)
    assert majority_vote(obs) in tied
