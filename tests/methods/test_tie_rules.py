"""Every run-time vote names its tie rule (``method_args.tie_rule``): majority and weighted
vote, Self-Consistency and DarkForest's argmax (belief only, and z* before the coordinator).
``first`` is what every run did before the setting existed (same answers, same
fingerprint); ``random`` is a uniform pick seeded by the run seed and the sample id, the same
pick on every rerun; a bad name is refused with the allowed ones before anything runs."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from df_ray.config import ConfigError, RunConfig
from df_ray.core import build_belief
from df_ray.core.types import Observation
from df_ray.core.voting import belief_tied, break_belief_tie, random_pick
from df_ray.methods import MethodArgsError, get_method
from tests.helpers import AGENTS, Script, answer, driver_config, make_sample

SAMPLES = [make_sample(f"q{i}") for i in range(12)]
DISTINCT = {("a1", "independent"): answer("A", 0.8), ("a2", "independent"): answer("B", 0.8),
            ("a3", "independent"): answer("C", 0.8)}
#: method, method_args: each vote of the three agents' independent answers
VOTES = [("weighted_vote", {"majority": True}), ("weighted_vote", {}),
         ("darkforest", {"belief_only": True})]


def finals(run_method, method, args, table=DISTINCT, seed=0, samples=SAMPLES, **kw):
    cfg = driver_config(method=method, seed=seed, method_args=args)
    run = run_method(method, Script(table), args, samples=samples, cfg=cfg, **kw)
    return [o.final.answer if o.final is not None else None for o in run.outcomes]


@pytest.mark.parametrize(("method", "args"), VOTES)
def test_a_three_way_tie_goes_to_the_first_agent_or_to_the_seeded_pick(run_method, method,
                                                                       args):
    assert finals(run_method, method, {**args, "tie_rule": "first"}) == ["A"] * len(SAMPLES)
    assert finals(run_method, method, args) == ["A"] * len(SAMPLES)  # the default
    for seed in (0, 3):
        got = finals(run_method, method, {**args, "tie_rule": "random"}, seed=seed)
        # by hand: the pick of the run seed and the sample id, whatever the agents' order
        assert got == [random_pick(["C", "A", "B"], seed, s.id) for s in SAMPLES]
        assert got == finals(run_method, method, {**args, "tie_rule": "random"}, seed=seed)
        assert set(got) == {"A", "B", "C"}  # not the config order's answer every time
    # a vote that is no tie is the same under both rules
    two = {**DISTINCT, ("a3", "independent"): answer("B", 0.8)}
    assert finals(run_method, method, {**args, "tie_rule": "random"}, two) == ["B"] * 12


def test_self_consistency_breaks_its_ties_by_the_first_sample_or_the_seeded_pick(run_method):
    order = ["B", "A", "C", "A", "B"]  # each sample's five draws, in sampling order
    seen: Counter = Counter()

    def draws(request):
        sid = request.messages[-1].content.split("]")[0]  # "[q3] ..." -> one count per sample
        seen[sid] += 1
        return answer(order[seen[sid] - 1])

    table = {("a1", "independent"): draws}
    args = {"agent": "a1", "samples": 5}
    assert finals(run_method, "self_consistency", args, table) == ["B"] * 12  # sampled first
    seen.clear()
    got = finals(run_method, "self_consistency", {**args, "tie_rule": "random"}, table, seed=2)
    assert got == [random_pick(["A", "B"], 2, s.id) for s in SAMPLES]  # C has one vote
    assert set(got) == {"A", "B"}


def test_darkforest_s_z_star_under_random_is_the_pick_the_coordinator_is_shown(run_method):
    args = {"tie_rule": "random"}
    cfg = driver_config(method="darkforest", seed=1, method_args=args)
    table = {**DISTINCT, ("coord", "coordinator"): answer("D")}
    run = run_method("darkforest", Script(table), args, samples=SAMPLES[:6], cfg=cfg)
    for s, o in zip(SAMPLES[:6], run.outcomes, strict=True):
        pick = random_pick(["A", "B", "C"], 1, s.id)
        assert o.columns["top_answer"] == pick and o.columns["top_margin"] == 0.0
        assert o.extra["belief"]["clusters"][0]["answer"] == pick
        assert o.final.answer == "D"  # a tie is never trusted: the coordinator decides


def _obs(*answers: str) -> list[Observation]:
    return [Observation(agent=a, answer=x, confidence=0.5, quality=1.0)
            for a, x in zip(AGENTS, answers, strict=False)]


def test_break_belief_tie_against_every_order_of_the_observations():
    """Brute force: over every order of the input, ``first`` keeps build_belief's z*, and
    ``random`` picks the same candidate; only the tied candidates can be picked, each of
    them by some sample id."""
    obs = _obs("x", "y", "z")
    picks = Counter()
    for sid in (f"s{i}" for i in range(60)):
        got = {break_belief_tie(build_belief(list(p), agent_order=AGENTS), "random", 5,
                                sid).top.answer for p in itertools.permutations(obs)}
        assert len(got) == 1
        picks[got.pop()] += 1
    assert set(picks) == {"x", "y", "z"}
    b = build_belief(obs, agent_order=AGENTS)
    assert break_belief_tie(b, "first", 5, "s0") is b and b.top.answer == "x"
    # support breaks the tie before the rule: y (two agents) is no tie with x or z
    two = build_belief(_obs("x", "y", "y"), agent_order=AGENTS)
    assert belief_tied(two) == ["y"]
    assert break_belief_tie(two, "random", 0, "s") is two
    with pytest.raises(ValueError, match="is a score, not an answer"):
        break_belief_tie(b, "expected")


@pytest.mark.parametrize("method", ["weighted_vote", "self_consistency", "darkforest"])
def test_a_bad_tie_rule_is_refused_naming_the_allowed_ones(method):
    with pytest.raises(MethodArgsError, match=r"tie_rule.*'first', 'random'"):
        get_method(method, tie_rule="last")
    with pytest.raises(MethodArgsError, match="'expected' is a score, not an answer"):
        get_method(method, tie_rule="expected")
    with pytest.raises((ConfigError, ValueError), match="tie_rule"):  # the config, unrun
        RunConfig.model_validate({**driver_config(method=method).model_dump(mode="json"),
                                  "method_args": {"tie_rule": "last"}})


@pytest.mark.parametrize(("method", "args"), [*VOTES, ("self_consistency", {})])
def test_first_keeps_the_fingerprint_random_changes_it(method, args):
    def fp(extra):
        return driver_config(method=method, method_args={**args, **extra}).fingerprint()

    assert fp({"tie_rule": "first"}) == fp({}) != fp({"tie_rule": "random"})
