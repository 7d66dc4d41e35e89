"""Unbiased estimators over the n answers a cache holds for one problem.

- :func:`pass_at_k`: the probability that at least one of k answers drawn without
  replacement from the n cached ones is correct, ``1 - C(n-c, k) / C(n, k)`` with c correct
  (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1). Averaged
  over problems it is the unbiased estimate of pass@k.
- :func:`maj_at_k`: the probability that the plurality vote over k answers drawn without
  replacement from the n cached ones is correct: the average over all C(n, k) subsets,
  computed exactly by counting, not by drawing. The vote is the one Self-Consistency runs
  (``df_ray.core.majority_vote`` over one agent's samples): invalid answers do not vote, a
  subset with no valid answer has no answer (wrong), ties go to the larger support, then to
  the smaller answer key.

maj@k by counting: for a winning answer j held by t of the k drawn answers, every other
answer i may hold at most t - 1 of them when its key is smaller than j's (it would win the
tie) and at most t otherwise, and the invalid answers any number. The number of such
subsets is C(c_j, t) times the coefficient of z^(k-t) in prod_i sum_{x <= limit_i}
C(c_i, x) z^x, in exact integers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import comb

__all__ = ["maj_at_k", "pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one correct among k of n answers, c of them correct), drawn without
    replacement: ``1 - C(n-c, k) / C(n, k)``."""
    _check(n, k)
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: c must be in [0, n={n}], got {c}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def _check(n: int, k: int) -> None:
    if n < 1:
        raise ValueError(f"an estimator over cached answers needs n >= 1 answers, got {n}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")


def _poly_mul(a: list[int], b: list[int], deg: int) -> list[int]:
    out = [0] * (min(len(a) + len(b) - 1, deg + 1))
    for i, x in enumerate(a):
        if x == 0 or i > deg:
            continue
        for j, y in enumerate(b[:deg + 1 - i]):
            out[i + j] += x * y
    return out


def maj_at_k(answers: Sequence[str | None], correct: Mapping[str, bool], k: int) -> float:
    """P(the plurality vote over a random k-subset of ``answers`` is correct).

    ``answers``: the n cached answers' keys (None: invalid, no vote); ``correct``: whether
    each key is right (a key missing from it counts as wrong)."""
    n = len(answers)
    _check(n, k)
    counts: dict[str, int] = {}
    invalid = 0
    for a in answers:
        if a is None:
            invalid += 1
        else:
            counts[a] = counts.get(a, 0) + 1
    keys = sorted(counts)
    inv_poly = [comb(invalid, x) for x in range(min(invalid, k) + 1)]
    ways = 0
    for j in keys:
        if not correct.get(j, False):
            continue
        cj = counts[j]
        for t in range(1, min(cj, k) + 1):
            poly = inv_poly
            for i in keys:
                if i == j:
                    continue
                limit = min(counts[i], t - 1 if i < j else t, k)
                poly = _poly_mul(poly, [comb(counts[i], x) for x in range(limit + 1)], k - t)
            rest = k - t
            if rest < len(poly):
                ways += comb(cj, t) * poly[rest]
    return ways / comb(n, k)
