"""Statistics against hand computations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from df_ray.reporting import PAPER, bootstrap_ci, discordant, mcnemar, paired_bootstrap


def test_mcnemar_matches_binomial_arithmetic():
    # 12 samples. a right / b wrong on 6 of them, a wrong / b right on 1, 5 concordant.
    a = np.array([1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 0, 1], bool)
    b = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 1], bool)
    assert discordant(a, b) == (6, 1)
    # Exact McNemar: X ~ Bin(7, 1/2), two-sided p = 2 * P(X <= 1)
    #   = 2 * (C(7,0) + C(7,1)) / 2^7 = 2 * (1 + 7) / 128 = 16 / 128 = 0.125
    assert mcnemar(a, b) == pytest.approx(0.125)
    assert mcnemar(b, a) == pytest.approx(0.125)
    # 8 discordant pairs all one way: p = 2 * (1/2)^8 = 0.0078125 < 0.05
    c = np.ones(8, bool)
    assert mcnemar(c, ~c) == pytest.approx(2 / 256)
    # no discordant pair: no evidence, p = 1
    assert mcnemar(a, a) == 1.0


def test_mcnemar_matches_on_sample_ids():
    a = pd.Series([True, True, False], index=["s1", "s2", "s3"])
    # same outcomes, another order, plus a sample the other run does not have
    b = pd.Series([False, True, True, False], index=["s3", "s2", "s1", "s9"])
    assert discordant(a, b) == (0, 0)
    assert mcnemar(a, b) == 1.0
    with pytest.raises(ValueError):
        mcnemar(np.ones(3, bool), np.ones(4, bool))


def test_bootstrap_ci():
    x = np.array([1] * 70 + [0] * 30)
    lo, hi = bootstrap_ci(x, n_boot=2000, seed=0)
    assert lo < 0.7 < hi
    # roughly +-1.96 * sqrt(.7 * .3 / 100) = +-0.09
    assert 0.58 < lo < 0.64 and 0.76 < hi < 0.82
    assert bootstrap_ci(x) == bootstrap_ci(x)  # seeded: reproducible
    assert bootstrap_ci(np.ones(5)) == (1.0, 1.0)
    # the same outcomes in another order (another finishing order of the samples), and with
    # another seed: the same interval
    rng = np.random.default_rng(3)
    assert bootstrap_ci(rng.permutation(x), seed=7) == bootstrap_ci(x)
    # the exact interval is the resampled one's limit
    idx = np.random.default_rng(0).integers(0, 100, size=(20000, 100))
    q = np.quantile(x[idx].mean(axis=1), [0.025, 0.975])
    assert abs(lo - q[0]) <= 0.011 and abs(hi - q[1]) <= 0.011
    # 29 of 50 (a run of this size): 58% [44, 72]
    assert bootstrap_ci([1] * 29 + [0] * 21) == (0.44, 0.72)
    # values that are not 0/1 are resampled, in an order-independent way
    y = np.linspace(0, 1, 40)
    assert bootstrap_ci(y[::-1], seed=1) == bootstrap_ci(y, seed=1)
    lo, hi = bootstrap_ci([])
    assert np.isnan(lo) and np.isnan(hi)


def test_paired_bootstrap():
    a = np.array([1] * 60 + [0] * 40, bool)
    b = np.array([1] * 40 + [0] * 60, bool)
    r = paired_bootstrap(a, b, n_boot=2000, seed=0)
    assert r.diff == pytest.approx(0.2) and r.n == 100
    assert 0 < r.lo < 0.2 < r.hi
    assert r.p < 0.05
    same = paired_bootstrap(a, a)
    assert same.diff == 0 and same.p == 1.0


def test_paper_numbers_from_design():
    assert PAPER["math"]["darkforest"] == {"accuracy": 76.80, "tokens": 4700}
    assert PAPER["finqa"]["darkforest"]["prog_acc"] == 11.33
    assert PAPER["gpqa"]["self_consistency"]["accuracy"] == 40.40
    assert PAPER["legalbench"]["goa_mean"]["tokens"] == 8700
