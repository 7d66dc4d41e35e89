"""Majority and weighted votes (baselines) and ReConcile's confidence recalibration."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from df_ray.core.types import Observation
from df_ray.core.voting import (
    first_sample_vote,
    majority_vote,
    recalibrate_reconcile,
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
