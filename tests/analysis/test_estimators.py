"""maj@k and pass@k against brute force over every k-subset of the cached answers."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from fractions import Fraction

import pytest

from df_ray.analysis.estimators import maj_at_k, pass_at_k
from df_ray.core import Observation
from df_ray.core.voting import vote_credit


def brute_maj(answers, correct, k):
    """The mean over every k-subset of the vote's expected correctness with ties broken
    uniformly at random (core ``vote_credit``, rule ``expected``)."""
    hits = []
    for subset in itertools.combinations(range(len(answers)), k):
        obs = [Observation("sc", answers[i]) if answers[i] is not None
               else Observation.invalid("sc") for i in subset]
        hits.append(vote_credit(obs, correct, "expected"))
    return sum(hits) / len(hits)


def enumerate_uniform(answers, correct, k):
    """The same by hand, with no df_ray code: every k-subset, its plurality, 1/m per tie."""
    total = Fraction(0)
    subsets = list(itertools.combinations(range(len(answers)), k))
    for subset in subsets:
        counts = Counter(answers[i] for i in subset if answers[i] is not None)
        if counts:
            top = max(counts.values())
            tied = [a for a, c in counts.items() if c == top]
            total += Fraction(sum(bool(correct.get(a)) for a in tied), len(tied))
    return float(total / len(subsets))


def brute_pass(flags, k):
    subsets = list(itertools.combinations(flags, k))
    return sum(any(s) for s in subsets) / len(subsets)


CASES = [
    (["a", "a", "b"], {"a": True}),
    (["a", "b"], {"b": True}),                       # a 1-1 tie: half of it
    (["b", "a", "b", "a", None], {"b": True}),
    ([None, None, "c"], {"c": True}),                # subsets of invalid answers only
    (["x", "y", "z", "x", "y", "z", "x"], {"y": True, "z": True}),
]


@pytest.mark.parametrize(("answers", "correct"), CASES)
def test_maj_at_k_equals_the_vote_over_every_k_subset(answers, correct):
    for k in range(1, len(answers) + 1):
        assert maj_at_k(answers, correct, k) == pytest.approx(brute_maj(answers, correct, k),
                                                              abs=1e-12), k


def test_maj_at_k_on_random_inputs_against_brute_force():
    rng = random.Random(7)
    for _ in range(60):
        n = rng.randint(1, 9)
        pool = ["p", "q", "r", "s", None]
        answers = [rng.choice(pool) for _ in range(n)]
        correct = {a: rng.random() < 0.4 for a in pool if a is not None}
        for k in range(1, n + 1):
            got = maj_at_k(answers, correct, k)
            assert got == pytest.approx(brute_maj(answers, correct, k), abs=1e-12)
            assert got == pytest.approx(enumerate_uniform(answers, correct, k), abs=1e-12)


def test_maj_at_n_splits_a_tie_evenly_whatever_the_keys():
    answers = ["b", "a", "a", "b", "c"]
    assert maj_at_k(answers, {"a": True}, 5) == 0.5   # 2-2 tie: half of it
    assert maj_at_k(answers, {"b": True}, 5) == 0.5
    # every answer distinct: 1/3 whichever key is right (not the smaller key's 1 or 0)
    assert maj_at_k(["a", "b", "c"], {"a": True}, 3) == pytest.approx(1 / 3)
    assert maj_at_k(["a", "b", "c"], {"b": True}, 3) == pytest.approx(1 / 3)


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_pass_at_k_against_brute_force(n):
    rng = random.Random(n)
    for _ in range(10):
        flags = [rng.random() < 0.3 for _ in range(n)]
        for k in range(1, n + 1):
            assert pass_at_k(n, sum(flags), k) == pytest.approx(brute_pass(flags, k),
                                                                abs=1e-12)


def test_bad_k_is_refused_with_the_range():
    with pytest.raises(ValueError, match=r"k must be in \[1, n=3\]"):
        maj_at_k(["a", "b", "c"], {}, 4)
    with pytest.raises(ValueError, match="n >= 1"):
        pass_at_k(0, 0, 1)
