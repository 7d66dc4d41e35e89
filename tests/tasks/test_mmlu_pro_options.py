"""MMLU-Pro's inlined options (GoA's schema) are counted up to MMLU-Pro's 10 (A-J)."""

from __future__ import annotations

from df_ray.tasks.mmlu_pro import MAX_OPTIONS, count_inline_options


def test_inline_options_are_capped_at_ten():
    ten = " ".join(f"({chr(65 + i)}) option {i}" for i in range(10))
    assert count_inline_options(f"Which one? The options are: {ten}") == 10 == MAX_OPTIONS
    # a question whose own text goes on to "(K) ..." still has 10 options
    assert count_inline_options(f"Which one? {ten} (K) see footnote (L) more") == 10
    assert count_inline_options("Pick: (A) one (B) two (C) three") == 3
