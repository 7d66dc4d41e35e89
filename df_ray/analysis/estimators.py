"""Unbiased estimators over the n answers a cache holds for one problem.

- :func:`pass_at_k`: the probability that at least one of k answers drawn without
  replacement from the n cached ones is correct, ``1 - C(n-c, k) / C(n, k)`` with c correct
  (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1). Averaged
  over problems it is the unbiased estimate of pass@k.
- :func:`maj_at_k`: the probability that the plurality vote over k answers drawn without
  replacement from the n cached ones is correct: the average over all C(n, k) subsets,
  computed exactly by counting, not by drawing. Invalid answers do not vote, a subset with
  no valid answer has no answer (wrong), and a tie is broken uniformly at random: a subset
  whose plurality is shared by m answers counts 1/m for each of them that is correct (the
  ``expected`` tie rule of ``df_ray.core.voting``), so no order of the answers or their keys
  decides it.

maj@k by counting: for a correct answer j held by t of the k drawn answers, every other
answer i holds at most t of them, and r of the others exactly t (a tie among r + 1
answers, credit 1 / (r + 1)); the invalid answers any number. The number of subsets with a
given r is C(c_j, t) times the coefficient of z^(k-t) w^r in prod_i (sum_{x < t} C(c_i, x)
z^x + C(c_i, t) z^t w), in exact integers; the credit is summed as a fraction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
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


def _poly_mul(a: list[list[int]], b: list[list[int]], deg: int) -> list[list[int]]:
    """The product of two polynomials in z and w (``p[z_degree][w_degree]``), truncated
    above z^deg."""
    out = [[0] * (len(a[0]) + len(b[0]) - 1) for _ in range(min(len(a) + len(b) - 1, deg + 1))]
    for i, row_a in enumerate(a[:deg + 1]):
        for j, row_b in enumerate(b[:deg + 1 - i]):
            for u, x in enumerate(row_a):
                if x:
                    for v, y in enumerate(row_b):
                        out[i + j][u + v] += x * y
    return out


def maj_at_k(answers: Sequence[str | None], correct: Mapping[str, bool], k: int) -> float:
    """The expected correctness of the plurality vote over a random k-subset of ``answers``,
    ties broken uniformly at random (a tie among m answers counts 1/m for each correct one).

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
    inv_poly = [[comb(invalid, x)] for x in range(min(invalid, k) + 1)]
    credit = Fraction(0)
    for j, cj in counts.items():
        if not correct.get(j, False):
            continue
        for t in range(1, min(cj, k) + 1):
            poly = inv_poly
            for i, ci in counts.items():
                if i != j:
                    factor = [[comb(ci, x), 0] for x in range(min(ci, t) + 1)]
                    if ci >= t:
                        factor[t] = [0, comb(ci, t)]
                    poly = _poly_mul(poly, factor, k - t)
            if k - t < len(poly):
                for r, ways in enumerate(poly[k - t]):
                    credit += Fraction(comb(cj, t) * ways, r + 1)
    return float(credit / comb(n, k))
