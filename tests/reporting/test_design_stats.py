"""The design-shaped statistics against statsmodels, scipy, sklearn and hand computations:
Clopper-Pearson and Wilson intervals, standard errors clustered by question across seeds,
Holm's adjustment, the McNemar test, the power line, and a belief's calibration."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom, binomtest
from scipy.stats import t as student_t

from df_ray.statistics import (
    brier,
    clustered_mean,
    ece,
    exact_mcnemar_power,
    holm,
    mcnemar,
    min_detectable_difference,
    min_mcnemar_p,
    paired_difference,
    power_line,
    proportion_interval,
    reliability,
    risk_coverage,
    tost,
)


def test_proportion_intervals_are_statsmodels():
    from statsmodels.stats.proportion import proportion_confint

    for k, n in [(0, 50), (23, 50), (29, 50), (50, 50), (1, 3)]:
        for method in ("beta", "wilson"):
            assert proportion_interval(k, n, method) == pytest.approx(
                proportion_confint(k, n, alpha=0.05, method=method))
    # Clopper-Pearson by hand: the beta quantiles; 0 of n has lower bound 0
    from scipy.stats import beta

    lo, hi = proportion_interval(23, 50)
    assert lo == pytest.approx(beta.ppf(0.025, 23, 28)) and hi == pytest.approx(
        beta.ppf(0.975, 24, 27))
    assert proportion_interval(0, 50)[0] == 0.0
    # Wilson by hand: (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
    z, p, n = 1.959963984540054, 23 / 50, 50
    mid, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert proportion_interval(23, 50, "wilson") == pytest.approx(
        ((mid - half) / (1 + z * z / n), (mid + half) / (1 + z * z / n)))
    assert all(math.isnan(v) for v in proportion_interval(0, 0))
    with pytest.raises(ValueError, match="allowed"):
        proportion_interval(1, 2, "normal-ish")


def _toy():
    # 5 questions x 3 seeds, 0/1 outcomes; question q3 always right, q5 never
    y = [1, 0, 1,  0, 0, 1,  1, 1, 1,  0, 1, 0,  0, 0, 0]
    q = [f"q{i}" for i in range(1, 6) for _ in range(3)]
    return np.array(y, float), np.array(q)


def test_clustered_mean_by_hand():
    y, q = _toy()
    r = clustered_mean(y, q)
    # mean 7/15; residual sums per question: q1 2-3*7/15 = 0.6, q2 1-1.4 = -0.4, q3 1.6,
    # q4 -0.4, q5 -1.4; sum of squares 0.36+0.16+2.56+0.16+1.96 = 5.2
    # se^2 = G/(G-1) * 5.2 / N^2 = 5/4 * 5.2 / 225
    assert r.mean == pytest.approx(7 / 15)
    assert r.se == pytest.approx(math.sqrt(5 / 4 * 5.2 / 225))
    assert (r.n, r.clusters) == (15, 5)
    q975 = student_t.ppf(0.975, 4)
    assert (r.lo, r.hi) == pytest.approx((r.mean - q975 * r.se, r.mean + q975 * r.se))
    # one value per cluster: the usual s / sqrt(n)
    one = clustered_mean(y, np.arange(15))
    assert one.se == pytest.approx(np.std(y, ddof=1) / math.sqrt(15))
    single = clustered_mean(y, ["all"] * 15)
    assert single.clusters == 1 and math.isnan(single.se)
    with pytest.raises(ValueError, match="cluster labels"):
        clustered_mean(y, q[:3])


def test_clustered_mean_is_statsmodels_ols_with_cluster_errors():
    import statsmodels.api as sm

    y, q = _toy()
    codes = pd.factorize(q)[0]
    fit = sm.OLS(y, np.ones((len(y), 1))).fit(cov_type="cluster", cov_kwds={"groups": codes},
                                                use_t=True)
    r = clustered_mean(y, q)
    assert r.mean == pytest.approx(fit.params[0])
    assert r.se == pytest.approx(fit.bse[0])
    lo, hi = fit.conf_int(alpha=0.05)[0]
    assert (r.lo, r.hi) == pytest.approx((lo, hi))  # t with G - 1 df (use_t)
    assert fit.df_resid_inference == 4
    assert r.p == pytest.approx(fit.pvalues[0])
    # unbalanced clusters (LegalBench tasks of several sizes)
    rng = np.random.default_rng(0)
    g = rng.integers(0, 7, size=60)
    v = (rng.random(60) < 0.4 + 0.05 * g).astype(float)
    fit = sm.OLS(v, np.ones((60, 1))).fit(cov_type="cluster", cov_kwds={"groups": g},
                                        use_t=True)
    r = clustered_mean(v, g)
    assert r.se == pytest.approx(fit.bse[0]) and r.p == pytest.approx(fit.pvalues[0])


def test_paired_difference_single_seed_is_the_paired_t_test():
    from scipy.stats import ttest_rel

    rng = np.random.default_rng(1)
    a = rng.random(50) < 0.6
    b = rng.random(50) < 0.45
    r = paired_difference(a, b, [f"q{i}" for i in range(50)])
    assert r.diff == pytest.approx(a.mean() - b.mean())
    assert r.p_clustered == pytest.approx(ttest_rel(a.astype(float), b.astype(float)).pvalue)
    assert (r.b, r.c) == (int(np.sum(a & ~b)), int(np.sum(~a & b)))
    assert r.p_mcnemar == mcnemar(a, b)


def test_mcnemar_is_statsmodels_exact():
    from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

    rng = np.random.default_rng(2)
    for _ in range(5):
        a, b = rng.random(40) < 0.5, rng.random(40) < 0.4
        table = [[np.sum(a & b), np.sum(a & ~b)], [np.sum(~a & b), np.sum(~a & ~b)]]
        assert mcnemar(a, b) == pytest.approx(sm_mcnemar(table, exact=True).pvalue)


def test_holm_is_statsmodels_and_keeps_missing_tests():
    from statsmodels.stats.multitest import multipletests

    p = [0.016, 0.07, 0.549, 1.0, 0.18, 0.001, 0.03]
    assert holm(p) == pytest.approx(multipletests(p, method="holm")[1])
    # by hand, the smallest: min(1, 7 * 0.001); the second 6 * 0.016
    assert holm(p)[5] == pytest.approx(0.007) and holm(p)[0] == pytest.approx(0.096)
    out = holm([0.01, math.nan, 0.04])
    assert math.isnan(out[1]) and out[[0, 2]] == pytest.approx([0.02, 0.04])


def _exact_mcnemar_power(n: int, psi: float, delta: float, alpha: float = 0.05) -> float:
    """The power of the exact McNemar test, no simulation: D ~ Bin(n, psi) discordant pairs,
    of them b ~ Bin(D, (psi + delta) / (2 psi)) one way; rejected where the exact p <= alpha."""
    q = (psi + delta) / (2 * psi)
    total = 0.0
    for d in range(1, n + 1):
        k = np.arange(d + 1)
        reject = _exact_p(k, d) <= alpha
        total += binom.pmf(d, n, psi) * binom.pmf(k[reject], d, q).sum()
    return total


def _exact_p(k: np.ndarray, d: int) -> np.ndarray:
    """The two-sided exact binomial p of k in d at 1/2 (symmetric: twice the smaller tail)."""
    return np.minimum(1.0, 2 * np.minimum(binom.cdf(k, d, 0.5), binom.sf(k - 1, d, 0.5)))


def test_min_detectable_difference_has_the_power_it_says():
    # the vectorised exact p is scipy's binomtest
    for d in (1, 7, 20):
        assert _exact_p(np.arange(d + 1), d) == pytest.approx(
            [binomtest(k, d, 0.5).pvalue for k in range(d + 1)])
    # Connor's equation holds at the answer
    n, psi = 400, 0.3
    d = min_detectable_difference(n, psi)
    za, zb = 1.959963984540054, 0.8416212335729143
    assert math.sqrt(n) * d == pytest.approx(za * math.sqrt(psi) + zb * math.sqrt(psi - d * d))
    # the exact test's power at that difference is 80%, up to the binomial's discreteness
    assert _exact_mcnemar_power(n, psi, d) == pytest.approx(0.8, abs=0.03)
    # 50 problems (HumanEval), a third discordant: the smallest detectable difference
    d50 = min_detectable_difference(50, 1 / 3)
    assert 0.15 < d50 < 0.25
    assert _exact_mcnemar_power(50, 1 / 3, d50) == pytest.approx(0.8, abs=0.08)
    # the z-test of a paired mean with the variance under the alternative: statsmodels'
    # NormalIndPower agrees when both variances are the alternative's (Connor with psi - d^2
    # in both places)
    from statsmodels.stats.power import NormalIndPower

    v = psi - d * d
    pw = NormalIndPower().power(effect_size=d / math.sqrt(v), nobs1=n, alpha=0.05, ratio=0)
    assert 0.8 < pw < 0.86  # Connor's null variance psi > psi - d^2: a little more than 80%
    # fewer questions detect less; nothing detectable with too few
    assert min_detectable_difference(200, psi) > d
    assert math.isnan(min_detectable_difference(3, 0.3))
    assert math.isnan(min_detectable_difference(50, 0.0))


def test_exact_power_is_the_exact_mcnemar_power():
    for n, psi in ((50, 1 / 3), (140, 0.14), (400, 0.3)):
        d = min_detectable_difference(n, psi)
        assert exact_mcnemar_power(n, psi, d) == pytest.approx(_exact_mcnemar_power(n, psi, d),
                                                               abs=1e-12)
    line = power_line(50, 3, 0.14, rho=0.04, rows=["majority vote", "qwen-a"])
    assert line.exact_power == pytest.approx(
        _exact_mcnemar_power(round(line.n_effective), 0.14, line.mde), abs=1e-12)
    assert line.exact_power < 0.8 and line.rows == ("majority vote", "qwen-a")
    assert math.isnan(exact_mcnemar_power(50, 0.1, 0.2))  # a difference above psi


def test_min_mcnemar_p_is_the_one_sided_extreme_of_the_exact_test():
    from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

    for d in range(1, 9):
        assert min_mcnemar_p(d) == pytest.approx(sm_mcnemar([[0, d], [0, 0]],
                                                            exact=True).pvalue)
    # 4 discordant pairs can never give p < 0.05; 6 can
    assert min_mcnemar_p(4) == 0.125 and min_mcnemar_p(6) < 0.05 and min_mcnemar_p(0) == 1.0


def test_tost_is_statsmodels_ttost_paired_with_one_seed():
    from statsmodels.stats.weightstats import ttost_paired

    rng = np.random.default_rng(5)
    for margin in (0.05, 0.1, 0.2):
        a = (rng.random(50) < 0.55).astype(float)
        b = (rng.random(50) < 0.5).astype(float)
        ids = [f"q{i}" for i in range(50)]
        eq = tost(a - b, ids, margin)
        p_sm = ttost_paired(a, b, -margin, margin)[0]
        assert eq.p == pytest.approx(p_sm)
        # the 90% interval is the clustered one at level 0.90
        cm = clustered_mean(a - b, ids, 0.90)
        assert (eq.lo, eq.hi) == pytest.approx((cm.lo, cm.hi))
        assert (eq.verdict == "equivalent") == (p_sm < 0.05) == (-margin < cm.lo
                                                                   and cm.hi < margin)


def test_tost_verdicts_and_clusters():
    ids = [f"q{i % 50}" for i in range(150)]
    same = np.zeros(150)
    same[:6], same[6:12] = 1.0, -1.0
    assert tost(same, ids, 0.05).verdict == "equivalent"
    far = np.r_[np.ones(60), np.zeros(90)]
    assert tost(far, ids, 0.05).verdict == "different"
    wide = np.r_[np.ones(20), -np.ones(14), np.zeros(116)]
    assert tost(wide, ids, 0.05).verdict == "inconclusive"


def test_paired_difference_of_expected_credits():
    a = np.array([1 / 3, 1.0, 0.0, 0.5])
    b = np.array([0.0, 1.0, 1.0, 0.5])
    r = paired_difference(a, b, ["q0", "q1", "q2", "q3"])
    assert r.diff == pytest.approx(np.mean(a - b))
    assert (r.b, r.c) == (1, 1) and math.isnan(r.p_mcnemar)


def test_power_line_counts_seeds_by_their_correlation():
    one = power_line(50, 1, 0.3)
    fully = power_line(50, 3, 0.3, rho=1.0)
    indep = power_line(50, 3, 0.3, rho=0.0)
    assert fully.mde == pytest.approx(one.mde)  # correlated seeds add nothing
    assert indep.n_effective == 150 and indep.mde == pytest.approx(
        min_detectable_difference(150, 0.3))
    assert power_line(50, 3, 0.3, rho=0.5).n_effective == pytest.approx(75)
    held = power_line(50, 1, 0.3, comparisons=12)
    assert held.mde_holm == pytest.approx(min_detectable_difference(50, 0.3, alpha=0.05 / 12))
    assumed = power_line(50, 3)
    assert assumed.assumed and assumed.rho == 1.0


def test_calibration_of_a_constructed_belief():
    # a belief calibrated by construction: 100 samples at 0.8 of which 80 right, 100 at 0.3
    # of which 30 right: ECE 0; Brier by hand 0.8*0.04 + 0.2*0.64 = 0.16 and 0.21 at 0.3
    p = np.array([0.8] * 100 + [0.3] * 100)
    y = np.array([1] * 80 + [0] * 20 + [1] * 30 + [0] * 70)
    assert ece(p, y) == pytest.approx(0.0, abs=1e-12)
    assert brier(p, y) == pytest.approx((100 * 0.16 + 100 * 0.21) / 200)
    from sklearn.metrics import brier_score_loss

    assert brier(p, y) == pytest.approx(brier_score_loss(y, p))
    # overconfident by 0.2 everywhere: 0.9 with 70% right, 0.6 with 40%: ECE 0.2 (hand)
    p2 = np.array([0.9] * 10 + [0.6] * 10)
    y2 = np.array([1] * 7 + [0] * 3 + [1] * 4 + [0] * 6)
    assert ece(p2, y2) == pytest.approx(0.2)
    t = reliability(p2, y2)
    assert t["n"].tolist() == [10, 10] and t["accuracy"].tolist() == [0.4, 0.7]
    assert t["confidence"].tolist() == pytest.approx([0.6, 0.9])
    # a probability of exactly 1 falls in the last bin, 0 in the first
    assert reliability([0.0, 1.0], [0, 1])["hi"].tolist() == [0.1, 1.0]
    # risk-coverage: answering only at >= 0.9 covers half, 70% right; everything: 55%
    rc = risk_coverage(p2, y2)
    assert rc.to_dict("records") == [
        {"threshold": 0.9, "coverage": 0.5, "accuracy": 0.7},
        {"threshold": 0.6, "coverage": 1.0, "accuracy": 0.55}]
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        brier([1.2], [1])


def test_validate_prints_the_power_line_of_a_sweep(capsys):
    """Before any run: the committed HumanEval sweep's 50 problems, its run seeds and its
    comparisons at the assumed discordance, as `df-ray validate` prints it."""
    from df_ray.cli import main
    from df_ray.config import load_config
    from df_ray.reporting.inference import sweep_power
    from df_ray.reporting.tables import seedless_name
    from df_ray.statistics import ASSUMED_DISCORDANCE
    from tests.helpers import REPO

    path = REPO / "jobs" / "configs" / "cpu_humaneval.yaml"
    assert main(["validate", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    configs = load_config(path).expand()
    seeds = len({c.seed for c in configs})
    m = len({seedless_name(c.name) for c in configs}) - 1
    want = power_line(50, seeds, comparisons=m)
    assert want.assumed and want.discordance == ASSUMED_DISCORDANCE
    assert "power humaneval: 50 questions" in out
    assert f"is {100 * want.mde:.1f} points" in out
    assert f"at alpha/{m} (Holm's first step over {m} comparisons)" in out
    assert "(assumed)" in out
    # a limit counts; a benchmark without a known size says how to count it
    small = [c.model_copy(update={"limit": 100}) for c in configs]
    assert f"is {100 * power_line(100, seeds, comparisons=m).mde:.1f} points" in "\n".join(
        sweep_power(small))
    # 20 problems at that discordance: no difference reaches 80% power
    tiny = [c.model_copy(update={"limit": 20}) for c in configs]
    assert "is none reachable" in sweep_power(tiny)[0]
    odd = [c.model_copy(update={"benchmark": "toy"}) for c in configs[:1]]
    assert "size unknown" in sweep_power(odd)[0]
