"""Label answers (LegalBench and other classification tasks): a normalized label string.

Extraction: the last ``Answer:`` / ``Label:`` / ``Final answer:`` / ``The answer is`` marker or
``\\boxed{}`` (quality 1.0), else the last non-empty line (0.6); with ``spec.labels`` set, an
earlier line that is exactly a label (0.4). Normalization: lowercase, no markdown, quotes or
surrounding punctuation, single spaces. With ``spec.labels`` the answer must match one label
(exactly, or as a prefix followed by a non-word character: ``Yes, because ...`` -> ``yes``;
the longest matching label wins) and anything else is invalid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from df_ray.core.parsing._text import boxed_spans, squeeze, strip_confidence_lines
from df_ray.core.parsing.kinds import AnswerWords, Found, Invalid, option, options_of
from df_ray.core.types import ParseSpec

_MARKER_RE = re.compile(
    r"(?i)(?:\b(?:final\s+)?(?:answer|label|classification|prediction)\b\s*[*_]*\s*(?::|=|：|-\s)"
    r"|\bthe\s+(?:final\s+|correct\s+)?(?:answer|label)\s+is\b)[*_]*"
)
_PUNCT = "\"'`“”‘’*_#.,;:!?()[]{}<>|~ \t\r\n-"


def normalize_label(s: str) -> str:
    """Lowercase, markdown/quotes/surrounding punctuation removed, whitespace collapsed."""
    t = re.sub(r"\\text(?:bf)?\{([^{}]*)\}", r"\1", s)
    t = re.sub(r"[*`\"“”]+", "", t)
    t = re.sub(r"\s+", " ", t).strip().lower()
    t = t.strip(_PUNCT)
    return t


def match_label(answer: str, labels: tuple[str, ...] | None) -> str | None:
    """The normalized label an answer names (any label when labels is None), else None."""
    a = normalize_label(answer)
    if not a:
        return None
    if labels is None:
        return a[:200]
    norm = sorted({normalize_label(lb) for lb in labels if normalize_label(lb)}, key=len, reverse=True)
    for lb in norm:
        if a == lb:
            return lb
    for lb in norm:
        if a.startswith(lb) and not (a[len(lb)].isalnum() or a[len(lb)] == "_"):
            return lb
    return None


def extract_label(text: str, labels: tuple[str, ...] | None) -> tuple[str, float] | None:
    """``(answer text, quality)`` of the label in a model output, or None."""
    body = strip_confidence_lines(squeeze(text))
    explicit: list[tuple[int, str]] = []
    for start, content in boxed_spans(body, max_chars=2000):  # a label is short
        explicit.append((start, content))
    markers = list(_MARKER_RE.finditer(body))
    if markers:
        m = markers[-1]
        line_end = body.find("\n", m.end())
        rest = body[m.end() : line_end if line_end >= 0 else len(body)]
        if not normalize_label(rest):
            after = body[(line_end + 1 if line_end >= 0 else len(body)):][:2000]
            rest = next((ln for ln in after.split("\n") if normalize_label(ln)), "")
        if normalize_label(rest):
            explicit.append((m.start(), rest))
    if explicit:
        return max(explicit, key=lambda c: c[0])[1], 1.0
    lines = [ln for ln in body.split("\n")[-5000:] if normalize_label(ln)]
    if not lines:
        return None
    if labels is None or match_label(lines[-1], labels) is not None:
        return lines[-1], 0.6
    for ln in reversed(lines[:-1]):
        if match_label(ln, labels) == normalize_label(ln):
            return ln, 0.4
    return lines[-1], 0.6


# ----------------------------------------------------------------------------- the kind


@dataclass(frozen=True)
class Options:
    """The labels a label answer is one of."""

    labels: tuple[str, ...] | None = option(None, "the label set (None: any label)")


def parse(text: str, spec: ParseSpec) -> Found | Invalid:
    labels = options_of(spec, Options).labels
    found = extract_label(text, labels)
    if found is None:
        return Invalid("no answer found")
    ans, q = found
    key = match_label(ans, labels)
    rule = "marker" if q >= 1.0 else "last_line" if q >= 0.6 else "label_line"
    if key is None:
        return Invalid("not one of the labels", rule, ans.strip())
    return Found(key, q, ans.strip(), rule)


def canonicalize(answer: str, spec: ParseSpec) -> str | None:
    return match_label(answer, options_of(spec, Options).labels)


def words(spec: ParseSpec) -> AnswerWords:
    """What methods say about a label answer (``AnswerWords``): one of the spec's labels."""
    labels = tuple(spec.labels or ())
    return AnswerWords(
        feedback_examples=tuple(FEEDBACK_EXAMPLES),
        noun="one of the labels: " + ", ".join(labels),
        field_rule=f'Only place one of {", ".join(labels)} in the "answer" field.',
        options=labels or None,
        critique_focus=("Check the answer against the task's instruction and definitions, and "
                        "that it is exactly one of the allowed labels."))

#: Self-Refine's few-shot feedback examples for this kind (df_ray.methods.self_refine_fewshot:
#: (question, solution, [(step, review)], the fixed solution or None when it is right)),
#: written for this kind's answer format; what ``words`` gives as feedback_examples.
FEEDBACK_EXAMPLES = [
    ("Classify whether the clause contains a non-compete obligation. Allowed labels: Yes, "
     "No.\n\nClause: \"The Supplier shall keep all Customer data confidential for five years "
     "after termination.\"",
     "The clause restricts the Supplier after termination, which is what a non-compete "
     "does.\nAnswer: Yes",
     [("The clause restricts the Supplier after termination.", "looks good"),
      ("which is what a non-compete does.",
       "wrong! It restricts disclosing data (confidentiality), not competing with the "
       "Customer. A non-compete forbids working for or becoming a competitor.")],
     "The clause is a confidentiality obligation: it restricts disclosing data, not "
     "competing.\nAnswer: No"),
    ("Classify whether the clause contains a non-compete obligation. Allowed labels: Yes, "
     "No.\n\nClause: \"During the term and for one year after, the Distributor shall not sell "
     "products that compete with the Products.\"",
     "The Distributor may not sell competing products during the term and for one year "
     "after: a non-compete obligation.\nAnswer: Yes",
     [("The Distributor may not sell competing products during the term and after.",
       "looks good"),
      ("Answer: Yes", "looks good: Yes is one of the allowed labels")],
     None),
]
