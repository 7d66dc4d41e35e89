"""The calibrated belief: hand-computed worked examples, ablations, ties, properties."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from df_ray.core.belief import BeliefConfig, build_belief, phi, select_observations
from df_ray.core.calibration import AgentStats, Calibration, PairStats, PatternStats
from df_ray.core.types import Observation

Obs = Observation


def _cal(agent_stats=None, pattern_stats=None, pair_stats=None, agents=("a", "b", "c")):
    return Calibration(
        benchmark="toy", agents=agents, n_samples=10, fitted_at="2025-01-01T00:00:00+00:00",
        agent_stats=agent_stats or {}, pattern_stats=pattern_stats or {},
        pair_stats=pair_stats or {},
    )


def _post(belief):
    return {c.answer: c.posterior for c in belief.clusters}


# --- worked example 1: R_pi makes a minority answer win --------------------------------------
#
# alpha_a = alpha_b = alpha_c = (6 + 1) / (8 + 2) = 0.7
# R(a,b) = (0 + 1) / (8 + 2) = 0.1      (a and b agreeing has been wrong every time)
# R(c)   = (8 + 1) / (8 + 2) = 0.9      (c alone has been right every time)
# no pair counts: kappa = 1/2 -> delta = 1 - 0.5 * 0.5 = 0.75 for everyone
# q = 1, c = 0.5 -> phi = 1
# s("1") = 0.1 * (0.7*1*0.75*1 + 0.7*1*0.75*1) = 0.1 * 1.05 = 0.105
# s("2") = 0.9 * (0.7*1*0.75*1)                = 0.9 * 0.525 = 0.4725
# P("2") = 0.4725 / 0.5775 = 9/11 = 0.818181...; P("1") = 2/11; margin = 7/11

CAL_PATTERN = _cal(
    agent_stats={a: AgentStats(8, 6) for a in "abc"},
    pattern_stats={("a", "b"): PatternStats(8, 0), ("c",): PatternStats(8, 8)},
)
OBS_PATTERN = [Obs("a", "1"), Obs("b", "1"), Obs("c", "2")]


def test_pattern_reliability_lets_minority_win():
    b = build_belief(OBS_PATTERN, CAL_PATTERN)
    assert b.top.answer == "2"
    assert b.top.score == pytest.approx(0.4725)
    assert b.runner_up.score == pytest.approx(0.105)
    assert b.top.posterior == pytest.approx(9 / 11)
    assert b.runner_up.posterior == pytest.approx(2 / 11)
    assert b.margin == pytest.approx(7 / 11)
    assert b.top.support == ("c",) and b.top.pattern == ("c",)
    assert b.runner_up.support == ("a", "b")


def test_agent_only_ablation_ignores_pattern():
    # R = 1: s("1") = 1.05, s("2") = 0.525 -> P("1") = 2/3
    b = build_belief(OBS_PATTERN, CAL_PATTERN, BeliefConfig.ablation("agent_only"))
    assert b.top.answer == "1"
    assert b.top.posterior == pytest.approx(2 / 3)
    assert b.top.score == pytest.approx(1.05)


# --- worked example 2: delta changes the ranking ---------------------------------------------
#
# no agent or pattern counts: alpha = 1/2, R = 1/2
# kappa_ab = (8 + 1) / (8 + 2) = 0.9 (a and b share their mistakes); kappa_ac = kappa_bc = 1/2
# gamma = 1: delta_a = delta_b = 1 - 0.9 = 0.1, delta_c = 1 - 0.5 = 0.5
# s("x") = 0.5 * (0.5*1*0.1*1 + 0.5*1*0.1*1) = 0.05
# s("y") = 0.5 * (0.5*1*0.5*1)               = 0.125
# P("y") = 0.125 / 0.175 = 5/7; P("x") = 2/7
# no_independence: s("x") = 0.5 * 1.0 = 0.5, s("y") = 0.25 -> P("x") = 2/3
# gamma = 0.5: delta_a = delta_b = 0.55, delta_c = 0.75
#   s("x") = 0.5 * (2 * 0.5 * 0.55) = 0.275, s("y") = 0.5 * 0.5 * 0.75 = 0.1875 -> "x" wins

CAL_KAPPA = _cal(pair_stats={("a", "b"): PairStats(8, 8)})
OBS_KAPPA = [Obs("a", "x"), Obs("b", "x"), Obs("c", "y")]


def test_independence_discount_changes_ranking():
    b = build_belief(OBS_KAPPA, CAL_KAPPA, BeliefConfig(gamma=1.0))
    assert b.top.answer == "y"
    assert _post(b) == pytest.approx({"y": 5 / 7, "x": 2 / 7})
    assert b.top.score == pytest.approx(0.125)
    assert b.runner_up.score == pytest.approx(0.05)


def test_no_independence_restores_majority():
    b = build_belief(OBS_KAPPA, CAL_KAPPA, BeliefConfig.ablation("no_independence", gamma=1.0))
    assert b.top.answer == "x"
    assert b.top.posterior == pytest.approx(2 / 3)


def test_config_gamma_not_calibration_gamma():
    assert CAL_KAPPA.gamma == 0.5
    b = build_belief(OBS_KAPPA, CAL_KAPPA, BeliefConfig(gamma=0.5))
    assert b.top.answer == "x"
    assert _post(b) == pytest.approx({"x": 0.275 / 0.4625, "y": 0.1875 / 0.4625})


# --- worked example 3: an invalid observation, no calibration --------------------------------
#
# no calibration: alpha = R = 1/2; pool {a, b, c} -> delta = 1 - 0.5 * 1/2 = 0.75
# a: "7", c = 0.9 (phi 1.4), q = 1.0;   b: invalid (dropped);   c: "8", c = 0.3 (phi 0.8), q = 0.5
# s("7") = 0.5 * (0.5 * 1.0 * 0.75 * 1.4) = 0.2625
# s("8") = 0.5 * (0.5 * 0.5 * 0.75 * 0.8) = 0.075
# P("7") = 0.2625 / 0.3375 = 7/9; P("8") = 2/9; margin = 5/9


def test_invalid_observation_dropped():
    obs = [Obs("a", "7", confidence=0.9, quality=1.0), Obs.invalid("b", raw="no idea"),
           Obs("c", "8", confidence=0.3, quality=0.5)]
    b = build_belief(obs)
    assert [c.answer for c in b.clusters] == ["7", "8"]
    assert b.top.score == pytest.approx(0.2625)
    assert b.runner_up.score == pytest.approx(0.075)
    assert b.top.posterior == pytest.approx(7 / 9)
    assert b.margin == pytest.approx(5 / 9)
    assert all("b" not in c.support for c in b.clusters)


def test_valid_flag_with_none_answer_is_dropped():
    b = build_belief([Obs("a", None), Obs("b", "1", valid=False), Obs("c", "2")])
    assert [c.answer for c in b.clusters] == ["2"]


# --- ablation presets ------------------------------------------------------------------------


def test_ablation_presets():
    assert BeliefConfig.ablation("full") == BeliefConfig()
    nc = BeliefConfig.ablation("no_calibration")
    assert (nc.use_alpha, nc.use_pattern, nc.use_independence, nc.use_confidence) == (
        False, False, False, True)
    ao = BeliefConfig.ablation("agent_only")
    assert (ao.use_alpha, ao.use_pattern, ao.use_independence) == (True, False, True)
    assert BeliefConfig.ablation("no_independence").use_independence is False
    assert BeliefConfig.ablation("no_confidence").use_confidence is False
    with pytest.raises(ValueError, match="no_confidence"):
        BeliefConfig.ablation("nonsense")
    with pytest.raises(ValueError):
        BeliefConfig(gamma=1.5)


def test_no_calibration_is_quality_confidence_vote():
    # alpha = R = delta = 1: s = sum q * phi(c): "1": 1.0*1.5 = 1.5; "2": 1.0 + 1.0 = 2.0
    obs = [Obs("a", "1", confidence=1.0), Obs("b", "2"), Obs("c", "2")]
    b = build_belief(obs, CAL_PATTERN, BeliefConfig.ablation("no_calibration"))
    assert _post(b) == pytest.approx({"2": 2 / 3.5, "1": 1.5 / 3.5})
    assert b.top.score == pytest.approx(2.0)


def test_no_confidence_sets_phi_to_one():
    # phi = 1: "1" (a, c=1.0) vs "2" (b, c=0.0) tie in score; tie -> lower agent index (a)
    obs = [Obs("a", "1", confidence=1.0), Obs("b", "2", confidence=0.0)]
    b = build_belief(obs, config=BeliefConfig.ablation("no_confidence"))
    assert _post(b) == pytest.approx({"1": 0.5, "2": 0.5})
    assert b.top.answer == "1"
    # with confidence: 1.5 vs 0.5
    b2 = build_belief(obs)
    assert _post(b2) == pytest.approx({"1": 0.75, "2": 0.25})


def test_phi_bounded():
    assert phi(0.0) == 0.5 and phi(1.0) == 1.5 and phi(0.3) == pytest.approx(0.8)
    assert phi(2.0) == 1.5 and phi(-1.0) == 0.5 and phi(float("nan")) == 1.0


# --- structure, margins, ties ----------------------------------------------------------------


def test_empty_belief():
    b = build_belief([Obs.invalid("a"), Obs.invalid("b")])
    assert b.clusters == () and b.top is None and b.runner_up is None and b.margin == 0.0
    assert b.empty
    assert build_belief([]).empty


def test_single_cluster_margin_is_posterior():
    b = build_belief([Obs("a", "5"), Obs("b", "5")])
    assert b.runner_up is None
    assert b.top.posterior == pytest.approx(1.0)
    assert b.margin == pytest.approx(1.0)


def test_all_zero_scores_fall_back_to_uniform():
    b = build_belief([Obs("a", "1", quality=0.0), Obs("b", "2", quality=0.0),
                      Obs("c", "3", quality=0.0)])
    assert [c.posterior for c in b.clusters] == pytest.approx([1 / 3] * 3)
    assert [c.answer for c in b.clusters] == ["1", "2", "3"]  # agent index a < b < c
    assert b.margin == pytest.approx(0.0)


def test_tie_prefers_larger_support():
    # "1": a with c=1.0 -> 0.5*0.5*0.75*1.5 = 0.28125; "2": b, c with c=0.25 -> 2 * 0.5*0.5*0.75*0.75
    # = 0.28125 as well (both times R = 1/2): equal posteriors, "2" has larger support.
    obs = [Obs("a", "1", confidence=1.0), Obs("b", "2", confidence=0.25),
           Obs("c", "2", confidence=0.25)]
    b = build_belief(obs)
    assert b.clusters[0].posterior == pytest.approx(b.clusters[1].posterior)
    assert b.top.answer == "2"


def test_tie_prefers_lower_agent_index():
    obs = [Obs("a", "1"), Obs("b", "2")]
    assert build_belief(obs).top.answer == "1"
    assert build_belief(obs, agent_order=["b", "a"]).top.answer == "2"
    # default order is the calibration's agent list
    cal = _cal(agents=("b", "a"))
    assert build_belief(obs, cal).top.answer == "2"
    # unknown agents come after known ones
    assert build_belief([Obs("zz", "1"), Obs("b", "2")], agent_order=["b"]).top.answer == "2"


def test_support_in_agent_order_pattern_sorted():
    b = build_belief([Obs("a", "1"), Obs("b", "1")], agent_order=["b", "a"])
    assert b.top.support == ("b", "a")
    assert b.top.pattern == ("a", "b")


def test_unknown_agent_gets_priors():
    # "d" is not in the calibration: alpha = 1/2, delta = 1 - 0.5 * max kappa(d, .) = 0.75
    cal = _cal(agent_stats={"a": AgentStats(8, 8)})  # alpha_a = 0.9
    b = build_belief([Obs("d", "1")], cal)
    assert b.top.score == pytest.approx(0.5 * 0.5 * 0.75)


def test_duplicate_agent_keeps_best_observation():
    # a appears twice: the higher-quality observation ("2") is kept, whatever the order
    first = [Obs("a", "1", quality=0.5), Obs("a", "2", quality=1.0), Obs("b", "1")]
    for obs in (first, list(reversed(first))):
        b = build_belief(obs)
        assert {c.answer: c.support for c in b.clusters} == {"1": ("b",), "2": ("a",)}
    # equal quality: higher confidence; then smaller answer key
    assert [o.answer for o in select_observations(
        [Obs("a", "1", confidence=0.2), Obs("a", "2", confidence=0.9)])] == ["2"]
    assert [o.answer for o in select_observations([Obs("a", "9"), Obs("a", "3")])] == ["3"]
    # a valid observation wins over an invalid one
    assert [o.answer for o in select_observations([Obs.invalid("a"), Obs("a", "4")])] == ["4"]


# --- properties ------------------------------------------------------------------------------

AGENTS = ["a", "b", "c", "d", "e"]

observation_st = st.builds(
    Obs,
    agent=st.sampled_from(AGENTS),
    answer=st.one_of(st.none(), st.sampled_from(["1", "2", "3", "4"])),
    confidence=st.floats(0.0, 1.0),
    valid=st.booleans(),
    quality=st.floats(0.0, 1.0),
)


@st.composite
def calibrations(draw):
    agents = tuple(AGENTS)

    def counts(kind):
        n = draw(st.integers(0, 20))
        return kind(n, draw(st.integers(0, n)))

    patterns = draw(st.lists(st.lists(st.sampled_from(agents), min_size=1, max_size=3,
                                      unique=True), max_size=6))
    pairs = [(i, j) for k, i in enumerate(agents) for j in agents[k + 1:]]
    return Calibration(
        benchmark="prop", agents=agents, n_samples=20, fitted_at="x",
        agent_stats={a: counts(AgentStats) for a in agents},
        pattern_stats={tuple(sorted(p)): counts(PatternStats) for p in patterns},
        pair_stats={p: counts(PairStats) for p in pairs},
    )


def test_a_zero_posterior_never_ranks_above_a_positive_one():
    # the example hypothesis found: [1.0, 0.0, 1.5e-202] (a q = 0 pair above a q = 1e-202
    # single, both 0.0 to 12 decimals, the pair winning on support); now 1e-202 ranks first
    obs = [Observation("a1", "x", 0.5, True, 1.0), Observation("a2", "y", 0.5, True, 0.0),
           Observation("a3", "y", 0.5, True, 0.0), Observation("a4", "z", 0.5, True, 1e-202)]
    b = build_belief(obs)
    assert [c.answer for c in b.clusters] == ["x", "z", "y"]
    assert b.clusters[1].posterior > 0.0 == b.clusters[2].posterior


def test_posteriors_equal_to_12_decimals_tie_on_support():
    obs = [Observation("a1", "x", 0.5, True, 0.5), Observation("a2", "y", 0.5, True, 0.25),
           Observation("a3", "y", 0.5, True, 0.25 + 1e-15)]
    b = build_belief(obs)
    # x: 0.5, y: 0.5 + 1e-15 -> equal to 12 decimals: the larger support (y) ranks first
    assert [c.answer for c in b.clusters] == ["y", "x"]


@settings(max_examples=200, deadline=None)
@given(obs=st.lists(observation_st, max_size=8), cal=st.one_of(st.none(), calibrations()),
       gamma=st.floats(0.0, 1.0), perm=st.randoms(use_true_random=False))
def test_posterior_properties(obs, cal, gamma, perm):
    cfg = BeliefConfig(gamma=gamma)
    b = build_belief(obs, cal, cfg)
    posts = [c.posterior for c in b.clusters]
    assert all(p >= 0.0 for p in posts)
    if posts:
        assert sum(posts) == pytest.approx(1.0)
        assert b.top is b.clusters[0]
        assert b.margin >= -1e-12
        # the tie rule (docs in df_ray/core/belief.py): posteriors equal to 12 decimals tie,
        # except that a positive one ranks before a zero one
        rounded = [round(p, 12) for p in posts]
        assert rounded == sorted(rounded, reverse=True)
        assert not any(a == 0.0 < b for a, b in itertools.pairwise(posts))
    else:
        assert b.top is None and b.margin == 0.0
    shuffled = list(obs)
    perm.shuffle(shuffled)
    assert build_belief(shuffled, cal, cfg) == b


@settings(max_examples=100, deadline=None)
@given(obs=st.lists(observation_st, min_size=1, max_size=8))
def test_clusters_partition_valid_agents(obs):
    b = build_belief(obs)
    agents = [a for c in b.clusters for a in c.support]
    assert len(agents) == len(set(agents))
    assert set(agents) == {o.agent for o in obs if o.valid and o.answer is not None}
