"""Self-reported confidence: last confidence line, percentages, clamping, 0.5 by default."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from df_ray.core.parsing import extract_confidence

CASES = [
    ("Confidence: 0.8", 0.8),
    ("confidence: 80%", 0.8),
    ("Confidence = 0.9", 0.9),
    ("**Confidence:** 0.7", 0.7),
    ("Confidence: 85", 0.85),
    ("Confidence: 100", 1.0),
    ("Confidence: 1", 1.0),
    ("Confidence: 0", 0.0),
    ("Confidence: 150", 1.0),
    ("Confidence: -0.3", 0.0),
    ("Confidence: 250%", 1.0),
    ("Confidence: high", 0.5),
    ("Confidence:", 0.5),
    ("No confidence given.", 0.5),
    ("", 0.5),
    ("Answer: B\nConfidence: 0.6\n...\nConfidence: 0.9", 0.9),
    ("Confidence: 0.9\nConfidence: unsure", 0.5),  # the LAST line counts
    ("CONFIDENCE: 0.4", 0.4),
    ("Confidence level: 75%", 0.75),
    ("Confidence score = .65", 0.65),
    ("- Confidence: 0.55", 0.55),
    ("Answer: 7 (Confidence: 0.3)", 0.3),
    ("Confidence: 7/10", 0.7),
    ("Confidence: 8/10", 0.8),
    ("Confidence: 8 / 10.", 0.8),
    ("**Confidence:** 4 out of 5", 0.8),
    ("Confidence: 3 in 4", 0.75),
    ("Confidence: 9/10 (very sure)", 0.9),
    ("Confidence: 12/10", 1.0),
    ("Confidence: 3/0", 0.5),
    ("Confidence: 80 percent", 0.8),
    ("Confidence: 60/100", 0.6),
    ("Confidence: very high", 0.5),
    ("Confidence: low", 0.5),
    ("Confidence: 95", 0.95),
    ("Confidence: 1.5", 0.015),  # in (1, 100]: a percentage
    ("Confidence: 0.95.", 0.95),
    ("Confidence: 1e309", 1.0),
    ("Confidence: nan", 0.5),
    # in LaTeX, as Qwen2.5-Coder-0.5B-Instruct writes it (tests/fixtures/reference_corpus)
    ("Confidence: \\(\\boxed{0.99}\\)", 0.99),
    ("is \\(\\boxed{12}\\). Confidence: \\(\\frac{4}{5}\\).", 0.8),
    ("Confidence: $\\dfrac{3}{4}$", 0.75),
    ("Confidence: 90\\%", 0.9),
    ("Confidence: \\[ 0.8 \\]", 0.8),
    ("Confidence: \\(\\frac{7}{2}\\)", 1.0),
    ("Confidence: \\(\\boxed{\\frac{\\pi}{2}}\\)", 0.5),  # an answer, not a number
]


@pytest.mark.parametrize(("text", "value"), CASES)
def test_extract_confidence(text: str, value: float) -> None:
    assert extract_confidence(text) == pytest.approx(value)


def test_huge_text() -> None:
    assert extract_confidence("x" * 5_000_000 + "\nConfidence: 0.2") == pytest.approx(0.2)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_confidence_in_unit_interval_on_any_text(text: str) -> None:
    c = extract_confidence(text)
    assert 0.0 <= c <= 1.0


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["Confidence", "confidence", "**Confidence:**", "Confidence level", "CONFIDENCE"]),
    st.sampled_from([":", "=", " :", ""]),
    st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(str), st.integers().map(str),
              st.text(max_size=10)),
    st.sampled_from(["", "%", " percent", "/100", "."]),
)
def test_confidence_near_misses(label: str, sep: str, value: str, suffix: str) -> None:
    c = extract_confidence(f"Answer: 3\n{label}{sep} {value}{suffix}")
    assert 0.0 <= c <= 1.0
