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

Paired tests match outcomes on sample ids when given pandas Series indexed by sample id (see
:func:`paired`); plain arrays must already be aligned.
"""

from __future__ import annotations

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
