"""The guardrail fitted on held-out data (Learn-then-Test), checked against scipy.stats."""

from __future__ import annotations

import pytest

stats = pytest.importorskip("scipy.stats")

from df_ray.core import Observation, build_belief, decide  # noqa: E402
from df_ray.core.guardrail_fit import (  # noqa: E402
    GuardrailSetting,
    HeldOutRecord,
    binomial_p_value,
    default_grid,
    fit_from_dict,
    fit_guardrail,
    split_held_out,
    upper_bound,
)


def _mixed(coordinator_correct: bool | None) -> list[HeldOutRecord]:
    """Confident and unconfident beliefs, right and wrong; one right z* with support 1 and a
    low posterior, so that only "always" trusts every right z*."""
    out = []
    for i in range(60):
        strong = i % 3 != 0
        top_correct = i % 5 != 0 if strong else i % 2 == 0
        out.append(HeldOutRecord(top_correct=top_correct, support=3 if strong else 2,
                                 posterior=0.9 if strong else 0.55,
                                 margin=0.8 if strong else 0.1,
                                 coordinator_correct=coordinator_correct))
    out.append(HeldOutRecord(True, 1, 0.4, 0.05, coordinator_correct))
    return out


def test_coordinator_always_wrong_chooses_belief_only():
    fit = fit_guardrail(_mixed(False), max_wrong_override=0.05, delta=0.1)
    assert fit.chosen.setting == GuardrailSetting.always()
    assert fit.chosen.wrong_overrides == 0
    assert fit.chosen.accuracy == pytest.approx(
        sum(r.top_correct for r in _mixed(False)) / 61)


def test_coordinator_always_right_chooses_never_trust():
    fit = fit_guardrail(_mixed(True), max_wrong_override=0.05, delta=0.1)
    assert fit.chosen.setting == GuardrailSetting.never()
    assert fit.chosen.accuracy == 1.0
    assert fit.bound == 0.0


def test_accuracy_trusted_and_wrong_override_rates_follow_decide():
    """The fit's per-setting figures are what the core's own ``decide`` gives."""
    cases = []
    # (agents' answers, gold, coordinator answer)
    for answers, gold, coord in [
        (["1", "1", "2"], "1", "2"), (["1", "1", "1"], "2", "2"), (["1", "2", "3"], "3", "1"),
        (["1", "1", "2"], "2", None), (["5", "6", "6"], "6", "6"), ([], "1", "1"),
    ]:
        obs = [Observation(a, z) for a, z in zip("abc", answers, strict=False)]
        belief = build_belief(obs)
        cases.append((belief, gold, coord))
    records = [HeldOutRecord(
        top_correct=b.top is not None and b.top.answer == g,
        support=len(b.top.support) if b.top else 0,
        posterior=b.top.posterior if b.top else 0.0, margin=b.margin,
        coordinator_correct=None if c is None else c == g) for b, g, c in cases]
    fit = fit_guardrail(records, max_wrong_override=0.5, delta=0.2)
    for res in fit.results:
        cfg = res.setting.config()
        decisions = [decide(b, c, cfg) for b, _, c in cases]
        acc = sum(d.final == g for d, (_, g, _) in zip(decisions, cases, strict=True)) / 6
        assert res.accuracy == pytest.approx(acc), res.setting.name
        assert res.trusted_rate == pytest.approx(sum(d.trusted for d in decisions) / 6)
        wrong = sum(d.trusted and d.final != g and c == g
                    for d, (_, g, c) in zip(decisions, cases, strict=True))
        assert res.wrong_overrides == wrong, res.setting.name


@pytest.mark.parametrize("x,n,alpha", [(0, 50, 0.05), (3, 50, 0.05), (1, 120, 0.02),
                                       (10, 40, 0.3), (7, 7, 0.5)])
def test_p_value_is_the_binomial_tail(x, n, alpha):
    assert binomial_p_value(x, n, alpha) == pytest.approx(stats.binom.cdf(x, n, alpha))
    assert binomial_p_value(x, n, alpha) == pytest.approx(
        stats.binomtest(x, n, alpha, alternative="less").pvalue)


@pytest.mark.parametrize("x,n,level", [(0, 50, 0.1), (3, 50, 0.05 / 61), (12, 80, 0.01)])
def test_bound_is_the_one_sided_clopper_pearson_bound(x, n, level):
    u = upper_bound(x, n, level)
    # scipy's exact two-sided interval at 1 - 2*level has this one-sided upper end
    ci = stats.binomtest(x, n, 0.5).proportion_ci(confidence_level=1 - 2 * level,
                                                  method="exact")
    assert u == pytest.approx(ci.high, rel=1e-9)
    # and it is the risk at which the binomial p-value equals the level
    assert stats.binom.cdf(x, n, u) == pytest.approx(level, rel=1e-6)
    assert upper_bound(n, n, level) == 1.0


def test_certified_settings_are_bonferroni_rejections():
    records = _mixed(True)[:30] + _mixed(False)[30:]
    fit = fit_guardrail(records, max_wrong_override=0.1, delta=0.1, testing="bonferroni")
    m = len(default_grid()) - 1
    assert fit.tested == m
    for r in fit.results:
        if r.setting.mode == "never":
            assert r.certified and r.wrong_overrides == 0
            continue
        p = stats.binom.cdf(r.wrong_overrides, len(records), 0.1)
        assert r.p_value == pytest.approx(p)
        assert r.certified == (p <= 0.1 / m)
        # certified exactly when the bound at the Bonferroni level is within the target
        assert r.certified == (r.bound <= 0.1 + 1e-9)
    assert fit.chosen.certified
    assert fit.chosen.accuracy == max(r.accuracy for r in fit.results if r.certified)


def test_fixed_sequence_stops_at_first_failure():
    records = _mixed(True)
    grid = [GuardrailSetting("thresholds", 3, 0.9, 0.8), GuardrailSetting.always(),
            GuardrailSetting("thresholds", 3, 0.95, 0.9)]
    fit = fit_guardrail(records, grid, max_wrong_override=0.05, delta=0.1,
                        testing="fixed_sequence")
    by_name = {r.setting.name: r for r in fit.results}
    assert by_name["always"].wrong_overrides > 0 and not by_name["always"].certified
    # the third setting trusts nothing (posterior 0.9 < 0.95): 0 losses, yet not certified
    third = by_name["k=3,tau_p=0.95,tau_m=0.9"]
    assert third.wrong_overrides == 0 and third.p_value <= 0.1 and not third.certified
    assert by_name["k=3,tau_p=0.9,tau_m=0.8"].certified == (
        stats.binom.cdf(by_name["k=3,tau_p=0.9,tau_m=0.8"].wrong_overrides, 61, 0.05) <= 0.1)


def test_fixed_sequence_counts_what_it_tested_and_certified():
    records = _mixed(True)
    grid = [GuardrailSetting("thresholds", 3, 0.9, 0.8), GuardrailSetting.always(),
            GuardrailSetting("thresholds", 3, 0.95, 0.9)]
    fit = fit_guardrail(records, grid, max_wrong_override=0.05, delta=0.1)
    first = fit.results[1]  # after "never"
    # the sequence tests up to and including its first non-rejection, and stops there
    assert fit.grid_size == 3
    assert fit.tested == (2 if first.certified else 1)
    assert fit.certified == int(first.certified)
    assert fit.to_dict()["tested"] == fit.tested
    # the chosen setting's bound at delta / grid size holds over the whole grid
    c = fit.chosen
    assert fit.simultaneous_bound == pytest.approx(upper_bound(c.wrong_overrides, fit.n,
                                                               0.1 / 3))


def test_split_held_out_is_a_fixed_half_by_id_hash():
    ids = [f"HumanEval/{i}" for i in range(100)]
    fit, certify = split_held_out(ids)
    assert len(fit) == len(certify) == 50 and not set(fit) & set(certify)
    assert set(fit) | set(certify) == set(ids)
    # fixed before any data: the same in any order, and each part keeps the given order
    again_fit, again_cert = split_held_out(ids[::-1])
    assert set(again_fit) == set(fit) and again_cert == certify[::-1]
    assert fit == sorted(fit, key=ids.index)
    assert len(split_held_out(ids, 0.3)[0]) == 30
    with pytest.raises(ValueError, match="cannot be divided"):
        split_held_out(["only"])
    with pytest.raises(ValueError, match="fit_share"):
        split_held_out(ids, 1.0)


def test_default_grid_puts_every_setting_after_its_subsets():
    grid = default_grid()
    assert grid[0] == GuardrailSetting.never() and grid[-1] == GuardrailSetting.always()
    assert GuardrailSetting("thresholds", 2, 0.66, 0.3) in grid
    inner = grid[1:-1]
    assert len(inner) == len(set(inner)) == 59
    for i, a in enumerate(inner):
        for b in inner[:i]:
            # nothing earlier trusts a strict superset of what a trusts
            assert not (b.k <= a.k and b.tau_p <= a.tau_p and b.tau_m <= a.tau_m), (a, b)


def test_bonferroni_needs_more_samples_than_fixed_sequence():
    """125 loss-free samples certify 5% at delta 0.1 under Bonferroni over the default grid's
    60 tested settings; 45 suffice in fixed sequence (0.95^45 <= 0.1)."""
    safe = HeldOutRecord(True, 3, 0.9, 0.8, False)
    for n, testing, certified in [(124, "bonferroni", False), (125, "bonferroni", True),
                                  (44, "fixed_sequence", False), (45, "fixed_sequence", True)]:
        fit = fit_guardrail([safe] * n, max_wrong_override=0.05, delta=0.1, testing=testing)
        assert (fit.chosen.setting != GuardrailSetting.never()) == certified, (n, testing)


def test_to_dict_round_trip_and_bad_input():
    fit = fit_guardrail(_mixed(False), max_wrong_override=0.05, delta=0.1)
    d = fit.to_dict()
    assert len(d["settings"]) == len(default_grid())
    setting, bound = fit_from_dict(d)
    assert setting == fit.chosen.setting and bound == fit.bound
    with pytest.raises(ValueError, match="no held-out records"):
        fit_guardrail([])
    with pytest.raises(ValueError, match="delta"):
        fit_guardrail(_mixed(False), delta=0.0)
    with pytest.raises(ValueError, match="support"):
        HeldOutRecord(True, -1, 0.5, 0.5, True)
