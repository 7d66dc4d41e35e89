"""Multiple-choice answers (MMLU-Pro A-J, GPQA A-D): the key is the uppercase letter.

Explicit markers (quality 1.0): ``\\boxed{C}``, ``Answer: C`` / ``answer is (C)`` / ``Final
answer: (B) text``, ``option C is correct``. The LAST explicit marker wins; if its letter is
beyond ``n_options`` the output is invalid (we do not fall back to an earlier marker). Without a
marker: a bold letter ``**C**`` (0.8) or a line that is just a letter such as ``(C)`` / ``C.``
(0.6); an option list (``C. Paris``) is not an answer. A lowercase ``a`` followed by a word, or ``A good approach``, is an article, not an answer.
"""

from __future__ import annotations

import re

from df_ray.core.parsing._text import boxed_spans, squeeze, strip_confidence_lines

LETTERS = "ABCDEFGHIJ"

# A letter token after a marker: "(C)", "[C]", "C", "C.", "C)", "c" ... with a guard after it.
_LETTER_TOKEN = r"[(\[{]?\s*([A-Ja-j])(?:\s*[)\]}])?"
_AFTER_OK = re.compile(
    r"^(?:\s*$|\s*[.):\],;!*\-–—]|\s+(?:[A-Z0-9(\"'$\\\-–—:]|because\b|since\b|as\b|is\b|was\b|"
    r"would\b|seems\b|appears\b|which\b|and\b|or\b|for\b))"
)
_MARKER_RE = re.compile(
    r"(?i)(?:\b(?:final|correct|best|right)\s+)?\banswer\b\s*(?:choice|option)?\s*"
    r"(?:is|would\s+be|will\s+be|should\s+be|must\s+be|:|=|：|-)\s*(?:is\s+)?(?:therefore\s+|thus\s+)?"
    r"(?:option\s+|choice\s+|letter\s+)?[*_]*\s*" + _LETTER_TOKEN
)
_OPTION_CORRECT_RE = re.compile(
    r"(?i)\b(?:option|choice)\s+" + _LETTER_TOKEN + r"\s+(?:is|seems|appears)\s+(?:the\s+)?"
    r"(?:correct|right|best|answer)"
)
_CORRECT_OPTION_RE = re.compile(
    r"(?i)\b(?:correct|right|best)\s+(?:option|choice)\s*(?:is|:|would\s+be)\s*[*_]*\s*" + _LETTER_TOKEN
)
_BOLD_RE = re.compile(r"\*\*\s*[(\[]?([A-J])[)\]]?\s*[.:)]?\s*\*\*")
_LINE_RE = re.compile(r"(?m)^[^\S\n]*[*_]*[(\[]?([A-J])[)\].:]?[*_]*[^\S\n]*$")


def _letter_ok(text: str, m: re.Match[str], group: int = 1) -> bool:
    letter = m.group(group)
    token = m.group(0)
    bracketed = token.rstrip()[-1:] in ")]}" and any(b in token for b in "([{")
    after = text[m.end() : m.end() + 40]
    if bracketed:
        return True
    if letter.islower():
        # "answer is a function of ..." -> article; "answer: c." / "answer: c" (end) -> letter.
        return bool(re.match(r"^(?:\s*$|\s*[.):\],;!*])", after))
    return bool(_AFTER_OK.match(after))


def letter_from_answer(ans: str) -> str | None:
    """The letter a bare answer names (``C``, ``(c)``, ``C. text``, ``\\boxed{C}``), else None."""
    s = squeeze(ans).strip()
    boxes = boxed_spans(s)
    if boxes:
        s = boxes[-1][1].strip()
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}", r"\1", s).strip().strip("$*_ ").strip()
    m = re.match(r"^[(\[{]?\s*([A-Ja-j])\s*[)\]}]?(?:$|[.:)\s,]\s*)", s)
    if not m:
        return None
    rest = s[m.end() :]
    if m.group(1).islower() and rest and rest[:1].isalpha() and " " in s[: m.end() + 1]:
        return None
    return m.group(1).upper()


def extract_choice(text: str) -> tuple[str, float] | None:
    """``(letter, quality)`` of the chosen option, or None when no answer is found."""
    body = strip_confidence_lines(squeeze(text))
    explicit: list[tuple[int, str]] = []
    for start, content in boxed_spans(body):
        letter = letter_from_answer(content)
        if letter:
            explicit.append((start, letter))
    for pat in (_MARKER_RE, _OPTION_CORRECT_RE, _CORRECT_OPTION_RE):
        for m in pat.finditer(body):
            if _letter_ok(body, m):
                explicit.append((m.start(), m.group(1).upper()))
    if explicit:
        return max(explicit, key=lambda c: c[0])[1], 1.0
    bold = list(_BOLD_RE.finditer(body))
    if bold:
        return bold[-1].group(1), 0.8
    lines = list(_LINE_RE.finditer(body))
    if lines:
        # Only a line that is nothing but a letter ("(C)", "C."): a listed option has text.
        return lines[-1].group(1), 0.6
    return None


def valid_letter(letter: str, n_options: int | None) -> bool:
    n = 10 if n_options is None else max(0, min(int(n_options), len(LETTERS)))
    return letter in LETTERS[:n]
