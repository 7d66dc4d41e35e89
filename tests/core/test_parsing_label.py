"""Label answers: normalized labels, matched against the task's label set."""

from __future__ import annotations

import pytest

from df_ray.core.parsing import canonicalize, parse
from df_ray.core.types import ParseSpec

YN = ParseSpec("label", labels=("Yes", "No"))
MULTI = ParseSpec("label", labels=("Not mentioned", "Mentioned", "Not relevant", "Relevant"))
FREE = ParseSpec("label")

CASES = [
    (YN, "Answer: Yes", "yes", 1.0),
    (YN, "Answer: yes.", "yes", 1.0),
    (YN, "**Answer:** No", "no", 1.0),
    (YN, "Label: \"No\"", "no", 1.0),
    (YN, "The clause restricts transfer.\nAnswer: Yes, because it restricts assignment.", "yes", 1.0),
    (YN, "Final answer: NO", "no", 1.0),
    (YN, "The answer is yes.", "yes", 1.0),
    (YN, "Answer: No\nAnswer: Yes", "yes", 1.0),
    (YN, "Reasoning about the statute...\n\nYes.", "yes", 0.6),
    (YN, "Yes", "yes", 0.6),
    (YN, "No\n\nExplanation: the contract is silent on this point.", "no", 0.4),
    (YN, "\\boxed{Yes}", "yes", 1.0),
    (YN, "Answer: Yes\nConfidence: 0.8", "yes", 1.0),
    (YN, "Answer:\n\n**No**", "no", 1.0),
    (MULTI, "Answer: Not mentioned", "not mentioned", 1.0),
    (MULTI, "Answer: Mentioned", "mentioned", 1.0),
    (MULTI, "Answer: not relevant.", "not relevant", 1.0),
    (MULTI, "Answer: `Relevant`", "relevant", 1.0),
    (FREE, "Answer: Breach of Contract.", "breach of contract", 1.0),
    (FREE, "The category is\n'Tort'", "tort", 0.6),
]


@pytest.mark.parametrize(("spec", "text", "key", "quality"), CASES)
def test_labels(spec: ParseSpec, text: str, key: str, quality: float) -> None:
    obs = parse(text, spec)
    assert obs.valid, obs
    assert obs.answer == key
    assert obs.quality == pytest.approx(quality)


@pytest.mark.parametrize(
    "text",
    ["", "Answer: Maybe", "I cannot determine this.", "Answer: Yesterday", "Answer: ***",
     "Answer: N/A"],
)
def test_invalid_labels(text: str) -> None:
    assert not parse(text, YN).valid


@pytest.mark.parametrize(
    ("answer", "key"),
    [("Yes", "yes"), ("yes", "yes"), (" YES. ", "yes"), ("No", "no"), ("Maybe", None), ("", None)],
)
def test_canonicalize_label(answer: str, key: str | None) -> None:
    assert canonicalize(answer, YN) == key


def test_free_labels_normalize() -> None:
    assert canonicalize("**Tort**", FREE) == canonicalize("tort.", FREE) == "tort"
