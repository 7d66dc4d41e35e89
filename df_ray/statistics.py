"""Statistics for comparing configurations on the same samples.

- :func:`bootstrap_ci`: 95% percentile bootstrap interval of an accuracy. For 0/1 outcomes
  the bootstrap distribution of the mean is exactly Binomial(n, k/n) / n, so the interval is
  its quantiles, with no resampling: it depends only on k and n, never on the order in
  which a run's samples finished or on a seed.
- :func:`mcnemar`: exact McNemar test of two configurations' per-sample outcomes: under the null
  the discordant pairs split 50/50, so the p-value is a two-sided binomial test of
  ``b = #(a right, b wrong)`` out of ``b + c`` discordant pairs (``scipy.stats.binomtest``).
- :func:`paired_bootstrap`: the accuracy difference a - b with a paired bootstrap interval and
  p-value (samples resampled jointly, so the pairing is kept).
- :func:`proportion_interval`: the Clopper-Pearson (exact) or Wilson interval of k in n
  (``statsmodels.stats.proportion.proportion_confint``).
- :func:`clustered_mean`: a mean with its standard error clustered by question (or by a
  benchmark's cluster: a LegalBench task, a FinQA report) across run seeds, and a
  small-sample t interval with (clusters - 1) degrees of freedom: statsmodels' OLS on a
  constant with ``cov_type="cluster"`` (CR1), written out. :func:`paired_difference` is the
  same over per-sample differences a - b, with the exact McNemar p beside it.
- :func:`tost`: two one-sided t tests of equivalence within +-margin on the clustered paired
  difference, with its 90% interval (statsmodels' ``ttost_paired`` for one seed); the
  verdict: equivalent, different, or neither (:func:`equivalence_verdict`).
- :func:`min_mcnemar_p`: the smallest exact McNemar p that d discordant pairs can give
  (all of them one way): where it is above alpha, no outcome of those pairs is significant.
- :func:`holm`: Holm-adjusted p-values over the comparisons of one table
  (``statsmodels.stats.multitest.multipletests``).
- :func:`min_detectable_difference`: the smallest paired difference a McNemar test detects at
  80% power and two-sided alpha 0.05 for n questions and a discordance rate (Connor 1987),
  with run seeds counted through their within-question correlation (:func:`power_line`);
  :func:`exact_mcnemar_power`: the exact test's power at that difference.
- :func:`brier`, :func:`reliability`, :func:`ece`, :func:`risk_coverage`: how well a
  posterior (DarkForest's P(z*|O)) is calibrated against whether its answer was right.

Paired tests match outcomes on sample ids when given pandas Series indexed by sample id (see
:func:`paired`); plain arrays must already be aligned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd


def _as_bool(x) -> np.ndarray:
    return np.asarray(x, dtype=bool).reshape(-1)


def bootstrap_ci(correct, n_boot: int = 2000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval (default 95%) of the mean of ``correct``.

    0/1 outcomes get the exact interval (the quantiles of Binomial(n, mean) / n: the limit
    of ``n_boot`` resamples, independent of order and seed). Other values are resampled
    ``n_boot`` times with ``seed``, in sorted order, so the interval depends only on the
    values and not on the order they come in."""
    x = np.asarray(correct, dtype=float).reshape(-1)
    n = len(x)
    if n == 0:
        return (float("nan"), float("nan"))
    alpha = (1 - level) / 2
    if np.all((x == 0) | (x == 1)):
        from scipy.stats import binom

        k = int(x.sum())
        lo, hi = binom.ppf([alpha, 1 - alpha], n, k / n) / n
        return (float(lo), float(hi))
    x = np.sort(x)
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    step = max(1, 2_000_000 // max(n, 1))  # bound memory: resample in chunks
    for start in range(0, n_boot, step):
        stop = min(n_boot, start + step)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = x[idx].mean(axis=1)
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return (float(lo), float(hi))


def paired(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Align two outcome vectors. Series (indexed by sample id) are matched on the ids they
    share; arrays must have equal length and are taken as already aligned."""
    if isinstance(a, pd.Series) and isinstance(b, pd.Series):
        if not a.index.is_unique or not b.index.is_unique:
            raise ValueError("paired outcomes: sample ids must be unique")
        common = a.index.intersection(b.index, sort=False)
        return _as_bool(a.loc[common].to_numpy()), _as_bool(b.loc[common].to_numpy())
    a, b = _as_bool(a), _as_bool(b)
    if len(a) != len(b):
        raise ValueError(f"paired outcomes need equal lengths, got {len(a)} and {len(b)}; "
                         "pass pandas Series indexed by sample id to match them")
    return a, b


def discordant(a, b) -> tuple[int, int]:
    """(#a right and b wrong, #a wrong and b right) over matched samples."""
    a, b = paired(a, b)
    return int(np.sum(a & ~b)), int(np.sum(~a & b))


def mcnemar(a, b) -> float:
    """Exact (binomial) two-sided McNemar p-value; 1.0 when there is no discordant pair."""
    from scipy.stats import binomtest

    n01, n10 = discordant(a, b)
    n = n01 + n10
    if n == 0:
        return 1.0
    return float(binomtest(n01, n, 0.5, alternative="two-sided").pvalue)


class PairedBootstrap(NamedTuple):
    diff: float  # mean(a) - mean(b)
    lo: float
    hi: float
    p: float  # two-sided bootstrap p-value of diff = 0
    n: int


def paired_bootstrap(a, b, n_boot: int = 2000, seed: int = 0,
                     level: float = 0.95) -> PairedBootstrap:
    """Paired bootstrap of the accuracy difference a - b over matched samples (the
    per-sample differences are resampled in sorted order, so the result depends on the
    pairs, not on the order in which they come)."""
    a, b = paired(a, b)
    n = len(a)
    if n == 0:
        nan = float("nan")
        return PairedBootstrap(nan, nan, nan, nan, 0)
    d = np.sort(a.astype(float) - b.astype(float))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    diffs = d[idx].mean(axis=1)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(diffs, [alpha, 1 - alpha])
    p = 2 * min(np.mean(diffs <= 0), np.mean(diffs >= 0))
    return PairedBootstrap(float(d.mean()), float(lo), float(hi), float(min(1.0, p)), n)


# ----------------------------------------------------------------------------- 0/1 intervals

#: ``proportion_interval`` methods, in statsmodels' names: "beta" is Clopper-Pearson.
INTERVALS = ("beta", "wilson")


def proportion_interval(k: int, n: int, method: str = "beta",
                        level: float = 0.95) -> tuple[float, float]:
    """The interval of a proportion of ``k`` successes in ``n`` (statsmodels'
    ``proportion_confint``): ``"beta"`` the exact Clopper-Pearson interval, ``"wilson"`` the
    Wilson score interval; (nan, nan) for n = 0."""
    if method not in INTERVALS:
        raise ValueError(f"proportion interval {method!r}: allowed {list(INTERVALS)}")
    if n <= 0:
        return (math.nan, math.nan)
    if not 0 <= k <= n:
        raise ValueError(f"proportion interval: {k} successes out of {n}")
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(int(k), int(n), alpha=1 - level, method=method)
    return (float(lo), float(hi))


# ----------------------------------------------------------------------------- clustered


class ClusteredMean(NamedTuple):
    mean: float
    se: float  # cluster-robust (CR1) standard error
    lo: float  # t interval, clusters - 1 degrees of freedom
    hi: float
    p: float  # two-sided t test of mean = 0
    n: int  # observations
    clusters: int


def clustered_mean(values, clusters, level: float = 0.95) -> ClusteredMean:
    """The mean of ``values`` with its standard error clustered by ``clusters`` (one label
    per value: the question, or a benchmark's coarser cluster), as statsmodels' OLS of the
    values on a constant with ``cov_type="cluster"`` computes it (CR1):

        se^2 = G / (G - 1) * sum_g (sum_{i in g} (y_i - mean))^2 / N^2

    over N values in G clusters (the (N - 1) / (N - K) factor is 1 for one regressor). With
    one value per cluster it is the usual s / sqrt(N). The interval and p use Student's t
    with G - 1 degrees of freedom (small-sample, as statsmodels does for clustered errors);
    se, lo, hi and p are NaN with fewer than 2 clusters."""
    y = np.asarray(values, dtype=float).reshape(-1)
    g = np.asarray(clusters, dtype=object).reshape(-1)
    if len(y) != len(g):
        raise ValueError(f"clustered mean: {len(y)} values but {len(g)} cluster labels")
    n = len(y)
    nan = math.nan
    if n == 0:
        return ClusteredMean(nan, nan, nan, nan, nan, 0, 0)
    mean = float(y.mean())
    codes, _ = pd.factorize(pd.Series(g, dtype=object).astype(str))
    n_g = int(codes.max()) + 1
    if n_g < 2:
        return ClusteredMean(mean, nan, nan, nan, nan, n, n_g)
    sums = np.bincount(codes, weights=y - mean, minlength=n_g)
    se = math.sqrt(n_g / (n_g - 1) * float(np.sum(sums ** 2)) / n ** 2)
    from scipy.stats import t as student_t

    q = float(student_t.ppf(1 - (1 - level) / 2, n_g - 1))
    if se > 0:
        p = float(2 * student_t.sf(abs(mean) / se, n_g - 1))
    else:  # every cluster the same: no spread
        p = 1.0 if mean == 0 else 0.0
    return ClusteredMean(mean, se, mean - q * se, mean + q * se, p, n, n_g)


class PairedDifference(NamedTuple):
    diff: float  # mean(a) - mean(b) over the matched pairs
    se: float  # clustered standard error
    lo: float
    hi: float
    p_clustered: float  # t test of the clustered difference (clusters - 1 df)
    p_mcnemar: float  # exact McNemar over the pairs
    b: int  # a right, b wrong
    c: int  # a wrong, b right
    n: int  # pairs
    clusters: int


def paired_difference(a, b, clusters, level: float = 0.95) -> PairedDifference:
    """The paired accuracy difference a - b over aligned outcomes (one pair per question
    and run seed) with its interval clustered by ``clusters`` (:func:`clustered_mean` of the
    per-pair differences) and the exact McNemar p of the discordant pairs. With one seed and
    question clusters the interval is the paired t interval. Outcomes may be credits in
    [0, 1] (a vote's expected correctness under uniform ties): then b and c count the pairs
    whose difference is positive and negative, and McNemar (a test of 0/1 pairs) is NaN."""
    fa = np.asarray(a, dtype=float).reshape(-1)
    fb = np.asarray(b, dtype=float).reshape(-1)
    binary = bool(np.all((fa == 0) | (fa == 1)) and np.all((fb == 0) | (fb == 1)))
    if binary or isinstance(a, pd.Series):
        a, b = paired(a, b)
        fa, fb = a.astype(float), b.astype(float)
    elif len(fa) != len(fb):
        raise ValueError(f"paired outcomes need equal lengths, got {len(fa)} and {len(fb)}")
    cm = clustered_mean(fa - fb, clusters, level)
    n01, n10 = int(np.sum(fa > fb)), int(np.sum(fa < fb))
    p = mcnemar(fa.astype(bool), fb.astype(bool)) if binary else math.nan
    return PairedDifference(cm.mean, cm.se, cm.lo, cm.hi, cm.p, p, n01, n10, cm.n,
                            cm.clusters)


class Equivalence(NamedTuple):
    lo: float  # the (1 - 2 * alpha) interval of the clustered difference: 90% at alpha 0.05
    hi: float
    p: float  # TOST p: the larger of the two one-sided p-values
    margin: float
    verdict: str  # "equivalent", "different", "inconclusive"


def tost(differences, clusters, margin: float, alpha: float = 0.05) -> Equivalence:
    """Two one-sided t tests that the mean paired difference lies within (-margin, +margin),
    with the standard error clustered by ``clusters`` and clusters - 1 degrees of freedom
    (with one pair per cluster: the paired t test, statsmodels' ``ttost_paired``). The
    verdict: ``equivalent`` when TOST rejects at ``alpha`` (the 1 - 2 alpha interval lies
    inside the margin), ``different`` when the two-sided 1 - alpha interval excludes 0,
    else ``inconclusive`` (both can hold: a small but real difference is ``equivalent``)."""
    from scipy.stats import t as student_t

    cm = clustered_mean(differences, clusters, 1 - 2 * alpha)
    nan = math.nan
    if math.isnan(cm.se):
        return Equivalence(nan, nan, nan, margin, "inconclusive")
    df = cm.clusters - 1
    if cm.se > 0:
        p_low = float(student_t.sf((cm.mean + margin) / cm.se, df))
        p_high = float(student_t.cdf((cm.mean - margin) / cm.se, df))
    else:
        p_low = 0.0 if cm.mean > -margin else 1.0
        p_high = 0.0 if cm.mean < margin else 1.0
    p = max(p_low, p_high)
    two_sided = clustered_mean(differences, clusters, 1 - alpha)
    if p < alpha:
        verdict = "equivalent"
    elif two_sided.lo > 0 or two_sided.hi < 0:
        verdict = "different"
    else:
        verdict = "inconclusive"
    return Equivalence(cm.lo, cm.hi, p, margin, verdict)


def min_mcnemar_p(discordant_pairs: int) -> float:
    """The smallest two-sided exact McNemar p that ``discordant_pairs`` pairs can give (all
    of them one way: 2 * 0.5^d, at most 1)."""
    d = int(discordant_pairs)
    return 1.0 if d <= 0 else min(1.0, 2.0 * 0.5 ** d)


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values (statsmodels ``multipletests(method="holm")``) over the
    comparisons of one table; a NaN (no test) stays NaN and is not counted."""
    p = np.asarray(pvalues, dtype=float).reshape(-1)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        from statsmodels.stats.multitest import multipletests

        out[ok] = multipletests(p[ok], method="holm")[1]
    return out


# ----------------------------------------------------------------------------- power

#: The assumed discordance rate of a power line before any run (the share of questions on
#: which two configurations' outcomes differ), stated as such wherever it is used.
ASSUMED_DISCORDANCE = 0.30


def min_detectable_difference(n: float, discordance: float, alpha: float = 0.05,
                              power: float = 0.8) -> float:
    """The smallest paired difference |p_a - p_b| a two-sided McNemar test at ``alpha``
    detects with ``power`` on ``n`` independent pairs whose discordance rate (pairs with one
    right and the other wrong) is ``discordance``: the delta that solves Connor's (1987)
    sample-size equation

        sqrt(n) * delta = z_{1-alpha/2} * sqrt(psi) + z_{power} * sqrt(psi - delta^2).

    NaN where no difference can reach that power (a delta above psi: too few pairs, or
    psi 0). The exact test is a little conservative: its power at this delta, computed
    exactly (tests/reporting/test_design_stats.py), is 76-78% for 50-400 pairs at psi 0.3."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    psi = float(discordance)
    if n <= 0 or not 0 < psi <= 1:
        return math.nan
    za, zb = norm.ppf(1 - alpha / 2), norm.ppf(power)

    def f(d: float) -> float:
        return math.sqrt(n) * d - za * math.sqrt(psi) - zb * math.sqrt(max(psi - d * d, 0.0))

    hi = math.sqrt(psi)
    if f(hi) < 0:
        return math.nan
    d = float(brentq(f, 0.0, hi, xtol=1e-12))
    return d if d <= psi else math.nan


def exact_mcnemar_power(n: int, discordance: float, delta: float,
                        alpha: float = 0.05) -> float:
    """The power of the two-sided exact McNemar test at ``alpha`` on ``n`` independent pairs
    whose discordance rate is ``discordance`` and whose paired difference is ``delta``,
    computed exactly: the discordant count is Binomial(n, psi), and given d of them the
    count one way is Binomial(d, (psi + delta) / (2 psi)); the test rejects where its exact
    p is at most alpha. NaN where the rates are impossible."""
    from scipy.stats import binom

    psi = float(discordance)
    n = int(n)
    if n <= 0 or not 0 < psi <= 1 or math.isnan(delta) or abs(delta) > psi:
        return math.nan
    q = (psi + delta) / (2 * psi)
    power = 0.0
    for d in range(1, n + 1):
        # the exact two-sided p of k <= d/2 is 2 * P(Bin(d, 1/2) <= k): reject k <= kl and,
        # by symmetry, k >= d - kl
        ks = np.arange(0, d // 2 + 1)
        ok = ks[2 * binom.cdf(ks, d, 0.5) <= alpha]
        if ok.size == 0:
            continue
        kl = int(ok.max())
        reject = float(binom.cdf(kl, d, q) + binom.sf(d - kl - 1, d, q))
        power += float(binom.pmf(d, n, psi)) * reject
    return power


class PowerLine(NamedTuple):
    n: int  # questions
    seeds: int
    discordance: float
    rho: float  # within-question correlation of a pair's difference across seeds
    n_effective: float
    mde: float  # at alpha
    mde_holm: float  # at alpha / comparisons (Holm's first, strictest step)
    comparisons: int
    alpha: float
    power: float
    assumed: bool  # discordance (and rho) assumed, not observed
    #: the exact McNemar test's power at ``mde`` on round(n_effective) pairs (below
    #: ``power``: the exact test is conservative)
    exact_power: float = math.nan
    #: the comparisons the line is for (their configurations), empty when assumed
    rows: tuple[str, ...] = ()


def power_line(n: int, seeds: int = 1, discordance: float | None = None,
               rho: float | None = None, comparisons: int = 1, alpha: float = 0.05,
               power: float = 0.8, rows: Sequence[str] = ()) -> PowerLine:
    """The minimum detectable paired difference of a table: ``n`` questions, each run under
    ``seeds`` run seeds. A question's seeds are correlated (rho); the pairs count as
    n * seeds / (1 + (seeds - 1) * rho) independent ones (the design effect of clustering by
    question). ``discordance`` and ``rho`` None: assumed (:data:`ASSUMED_DISCORDANCE`, and
    rho 1, the conservative case where more seeds add nothing)."""
    assumed = discordance is None
    psi = ASSUMED_DISCORDANCE if discordance is None else float(discordance)
    r = 1.0 if rho is None else min(1.0, max(0.0, float(rho)))
    s = max(int(seeds), 1)
    n_eff = n * s / (1 + (s - 1) * r) if n > 0 else 0.0
    m = max(int(comparisons), 1)
    mde = min_detectable_difference(n_eff, psi, alpha, power)
    return PowerLine(int(n), s, psi, r, n_eff, mde,
                     min_detectable_difference(n_eff, psi, alpha / m, power), m, alpha,
                     power, assumed, exact_mcnemar_power(round(n_eff), psi, mde, alpha),
                     tuple(rows))


def power_text(pl: PowerLine) -> str:
    """One line: what difference this table can detect."""
    def pts(x: float) -> str:
        return "none reachable" if math.isnan(x) else f"{100 * x:.1f} points"

    src = "assumed" if pl.assumed else "observed"
    seeds = (f" x {pl.seeds} run seeds (within-question correlation {pl.rho:.2f}: "
             f"{pl.n_effective:.0f} effective pairs)" if pl.seeds > 1 else "")
    line = (f"Power: {pl.n} questions{seeds}, discordance {pl.discordance:.2f} ({src}): the "
            f"smallest paired difference detectable at {100 * pl.power:.0f}% power, two-sided "
            f"alpha {pl.alpha:g}, is {pts(pl.mde)}")
    if not math.isnan(pl.exact_power):
        line += f" (the exact McNemar test's power there: {100 * pl.exact_power:.0f}%)"
    if pl.comparisons > 1:
        line += (f"; {pts(pl.mde_holm)} at alpha/{pl.comparisons} (Holm's first step over "
                 f"{pl.comparisons} comparisons)")
    if pl.rows:
        line += f". It applies to the comparisons of {', '.join(pl.rows)}"
    return line + "."


# ----------------------------------------------------------------------------- calibration


def _probs(p, y) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(p, dtype=float).reshape(-1)
    y = np.asarray(y, dtype=float).reshape(-1)
    if len(p) != len(y):
        raise ValueError(f"calibration: {len(p)} probabilities but {len(y)} outcomes")
    if np.any((p < 0) | (p > 1)):
        raise ValueError("calibration: probabilities must lie in [0, 1]")
    return p, y


def brier(p, y) -> float:
    """Brier score: the mean squared difference between the probability and the 0/1
    outcome (NaN when empty)."""
    p, y = _probs(p, y)
    return float(np.mean((p - y) ** 2)) if len(p) else math.nan


def reliability(p, y, bins: int = 10) -> pd.DataFrame:
    """The reliability diagram's table: ``bins`` equal-width bins of the probability over
    [0, 1] (the last one closed), each with its ``n``, mean probability ``confidence`` and
    share right ``accuracy``; empty bins are left out."""
    p, y = _probs(p, y)
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx = np.clip(np.digitize(p, edges[1:-1], right=False), 0, bins - 1)
    rows = []
    for b in range(bins):
        m = idx == b
        if m.any():
            rows.append({"lo": edges[b], "hi": edges[b + 1], "n": int(m.sum()),
                         "confidence": float(p[m].mean()), "accuracy": float(y[m].mean())})
    return pd.DataFrame(rows, columns=["lo", "hi", "n", "confidence", "accuracy"])


def ece(p, y, bins: int = 10) -> float:
    """Expected calibration error: sum over the equal-width bins of :func:`reliability` of
    (share of samples) * |accuracy - mean probability| (NaN when empty)."""
    t = reliability(p, y, bins)
    if t.empty:
        return math.nan
    return float(np.sum(t["n"] / t["n"].sum() * (t["accuracy"] - t["confidence"]).abs()))


def risk_coverage(p, y) -> pd.DataFrame:
    """Accuracy when answering only where the probability is at least a threshold, for
    every distinct probability as the threshold (highest first): ``threshold``, ``coverage``
    (share of samples answered) and ``accuracy`` among them."""
    p, y = _probs(p, y)
    rows = []
    for t in np.unique(p)[::-1]:
        m = p >= t
        rows.append({"threshold": float(t), "coverage": float(m.mean()),
                     "accuracy": float(y[m].mean())})
    return pd.DataFrame(rows, columns=["threshold", "coverage", "accuracy"])
