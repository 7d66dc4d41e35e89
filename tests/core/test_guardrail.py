"""Trusted(z*), decide() and the lazy-coordinator equivalence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from df_ray.core.belief import build_belief
from df_ray.core.guardrail import GuardrailConfig, decide, is_trusted, needs_coordinator
from df_ray.core.types import Belief, Cluster, Observation

Obs = Observation
CFG = GuardrailConfig()


def _belief(top_support: int, p_top: float, p_second: float | None, margin: float | None = None):
    agents = tuple(f"a{i}" for i in range(top_support))
    top = Cluster("z", agents, agents, p_top, p_top)
    clusters = [top]
    runner = None
    if p_second is not None:
        runner = Cluster("y", ("b0",), ("b0",), p_second, p_second)
        clusters.append(runner)
    if margin is None:
        margin = p_top - (p_second or 0.0)
    return Belief(tuple(clusters), top, runner, margin)


def test_defaults_and_validation():
    assert (CFG.k, CFG.tau_p, CFG.tau_m, CFG.enabled) == (2, 0.66, 0.30, True)
    for bad in ({"k": 0}, {"k": 1.5}, {"k": True}, {"tau_p": 1.2}, {"tau_p": -0.1},
                {"tau_m": 2}, {"tau_p": "0.7"}, {"enabled": 1}):
        with pytest.raises(ValueError, match="GuardrailConfig"):
            GuardrailConfig(**bad)


def test_exactly_at_thresholds_is_trusted():
    # |S| = k = 2, P = tau_p = 0.66, margin = tau_m = 0.30: all inclusive
    assert is_trusted(_belief(2, 0.66, 0.36, margin=0.30), CFG)
    # margins computed in floats land a hair on either side of 0.30: both count as 0.30
    assert 0.96 - 0.66 < 0.30 and 0.66 - 0.36 > 0.30
    assert is_trusted(_belief(2, 0.96, 0.66), CFG)  # margin 0.29999999999999993
    assert is_trusted(_belief(2, 0.66, 0.36), CFG)  # margin 0.30000000000000004
    # exactly at k with k = 3, tau_p = tau_m = 1.0 (one cluster, P = 1)
    assert is_trusted(_belief(3, 1.0, None), GuardrailConfig(k=3, tau_p=1.0, tau_m=1.0))
    assert not is_trusted(_belief(2, 1.0, None), GuardrailConfig(k=3, tau_p=1.0, tau_m=1.0))


def test_just_below_each_threshold_is_not_trusted():
    assert not is_trusted(_belief(1, 0.9, 0.1), CFG)                     # |S| = 1 < k
    assert not is_trusted(_belief(2, 0.659, 0.1), CFG)                   # P < tau_p
    assert not is_trusted(_belief(2, 0.66, 0.361, margin=0.299), CFG)    # margin < tau_m
    assert not is_trusted(_belief(2, 0.66 - 1e-9, 0.0), CFG)


def test_single_cluster():
    b = build_belief([Obs("a", "5"), Obs("b", "5")])
    assert b.margin == pytest.approx(1.0)
    assert is_trusted(b, CFG)
    lone = build_belief([Obs("a", "5")])  # P = 1, margin = 1, but |S| = 1 < k
    assert not is_trusted(lone, CFG)
    assert is_trusted(lone, GuardrailConfig(k=1))


def test_disabled_never_trusts():
    b = build_belief([Obs("a", "5"), Obs("b", "5"), Obs("c", "5")])
    off = GuardrailConfig(enabled=False)
    assert not is_trusted(b, off)
    assert needs_coordinator(b, off)
    d = decide(b, "4", off)
    assert (d.final, d.source, d.trusted, d.overridden) == ("4", "coordinator", False, False)


def test_trusted_overrides_disagreeing_coordinator():
    b = build_belief([Obs("a", "5"), Obs("b", "5"), Obs("c", "4")])
    assert is_trusted(b, CFG)
    d = decide(b, "4", CFG)
    assert (d.final, d.source, d.trusted, d.overridden, d.coordinator_answer) == (
        "5", "guardrail", True, True, "4")
    agree = decide(b, "5", CFG)
    assert (agree.final, agree.source, agree.overridden) == ("5", "guardrail", False)
    invalid = decide(b, None, CFG)
    assert (invalid.final, invalid.source, invalid.overridden) == ("5", "guardrail", False)


def test_untrusted_follows_valid_coordinator_else_belief():
    b = build_belief([Obs("a", "5"), Obs("b", "4"), Obs("c", "3")])
    assert not is_trusted(b, CFG) and needs_coordinator(b, CFG)
    d = decide(b, "7", CFG)
    assert (d.final, d.source, d.trusted, d.overridden, d.coordinator_answer) == (
        "7", "coordinator", False, False, "7")
    d = decide(b, None, CFG)  # coordinator invalid -> z*
    assert (d.final, d.source, d.coordinator_answer) == (b.top.answer, "belief", None)


def test_no_valid_observation_coordinator_alone():
    b = build_belief([Obs.invalid("a"), Obs.invalid("b")])
    d = decide(b, "9", CFG)
    assert (d.final, d.source, d.trusted, d.overridden) == ("9", "coordinator", False, False)
    d = decide(b, None, CFG)  # coordinator invalid too: no answer
    assert (d.final, d.source, d.trusted) == (None, "coordinator", False)
    assert not is_trusted(b, CFG) and needs_coordinator(b, CFG)


@settings(max_examples=200, deadline=None)
@given(
    answers=st.lists(st.one_of(st.none(), st.sampled_from("12345")), min_size=0, max_size=5),
    confs=st.lists(st.floats(0, 1), min_size=5, max_size=5),
    coord=st.one_of(st.none(), st.sampled_from("123456")),
    k=st.integers(1, 4), tau_p=st.floats(0, 1), tau_m=st.floats(0, 1),
)
def test_lazy_equivalence(answers, confs, coord, k, tau_p, tau_m):
    obs = [Obs(f"m{i}", a, confidence=c) if a is not None else Obs.invalid(f"m{i}")
           for i, (a, c) in enumerate(zip(answers, confs, strict=False))]
    b = build_belief(obs)
    cfg = GuardrailConfig(k=k, tau_p=tau_p, tau_m=tau_m)
    eager = decide(b, coord, cfg)
    if not needs_coordinator(b, cfg):
        lazy = decide(b, None, cfg)  # the call was skipped
        assert lazy.final == eager.final and lazy.source == eager.source == "guardrail"
        assert eager.final == b.top.answer
    assert eager.trusted == (not needs_coordinator(b, cfg))
