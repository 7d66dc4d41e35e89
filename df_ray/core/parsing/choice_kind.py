"""Multiple-choice answers (MMLU-Pro A-J, GPQA A-D): the key is the uppercase letter.

The cascade starts with the official MMLU-Pro extraction (TIGER-AI-Lab/MMLU-Pro,
``evaluate_from_api.py``: ``extract_answer`` -> ``extract_again``), so that df_ray reads the same
letter whenever those regexes find one, then adds what they miss. Rules, in order (the first
that finds a letter wins; ``rule`` is recorded on the observation):

1. ``answer_is`` (1.0): the FIRST ``answer is \\(?([A-J])\\)?`` (case-sensitive, as the official
   regex and lm-evaluation-harness's ``mmlu_pro`` ``custom-extract`` filter), the letter not
   followed by another letter or digit (``the answer is Approximately`` is not ``A``).
2. ``answer_colon`` (1.0): the official second regex ``.*[aA]nswer:\\s*([A-J])``: the first line
   that has ``answer:`` followed by a letter, its last such letter (same guard).
3. ``marker`` / ``boxed`` / ``option_correct`` (1.0): what the official regexes miss: a colon
   after the verb (``The answer is: B``, ``The final answer is: (C)``), lower-case letters
   (``(c)`` = ``C``), markdown (``**Answer:** D``), ``\boxed{C}``, ``option C is correct``,
   ``the correct option is D``, ``my final choice is (B)``. Among these the LAST one in the
   text wins.
4. ``bold_letter`` (0.8): a line that is just a bold letter ``**C**`` (not ``**(B)** is
   wrong`` in an option-by-option analysis); ``letter_line`` (0.6): a line that is just a
   letter such as ``(C)`` / ``C.``; an option list (``C. Paris``) is not an answer. An output
   that is nothing but one letter in either case (``c``, ``(c)``, ``c.``) is that letter
   (``letter_line``, 0.6), as DESIGN's canonicalization says (``(C)``, ``C.``, ``c``).

The official script ends with a last-resort guess, the last standalone capital A-J anywhere in
the text (often the article "A"); df_ray does not guess: without one of the rules above the
output is invalid. A letter beyond ``n_options`` makes the output invalid (no fallback to
another rule). A lowercase ``a`` followed by a word, or ``A good approach``, is an article.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from df_ray.core.parsing._text import (
    anchored_finditer,
    boxed_spans,
    squeeze,
    strip_confidence_lines,
)
from df_ray.core.parsing.kinds import AnswerWords, Found, Invalid, option, options_of
from df_ray.core.types import ParseSpec

LETTERS = "ABCDEFGHIJ"
#: The longest box content read as a letter answer (``\\boxed{C. the option's text}``).
MAX_LETTER_BOX_CHARS = 300

# A letter token after a marker: "(C)", "[C]", "C", "C.", "C)", "c" ... with a guard after it.
_LETTER_TOKEN = r"[(\[{]?\s*([A-Ja-j])(?:\s*[)\]}])?"
_AFTER_OK = re.compile(
    r"^(?:\s*$|\s*[.):\],;!*\-–—]|\s+(?:[A-Z0-9(\"'$\\\-–—:]|because\b|since\b|as\b|is\b|was\b|"
    r"would\b|seems\b|appears\b|which\b|and\b|or\b|for\b))"
)
_MARKER_RE = re.compile(
    r"(?i)(?:\b(?:final|correct|best|right)\s+)?\banswer\b\s*(?:choice|option)?\s*[*_]*\s*"
    r"(?:(?:is|would\s+be|will\s+be|should\s+be|must\s+be)\s*[*_]*\s*[:：]?|:|=|：|-)\s*"
    r"(?:is\s+)?(?:therefore\s+|thus\s+)?(?:option\s+|choice\s+|letter\s+)?[*_]*\s*"
    + _LETTER_TOKEN
)
# The official MMLU-Pro regexes (evaluate_from_api.py), with df_ray's guard after the letter.
_OFFICIAL_IS_RE = re.compile(r"answer is \(?([A-J])\)?(?![A-Za-z0-9])")
_OFFICIAL_COLON_RE = re.compile(r"[aA]nswer:\s*([A-J])(?![A-Za-z0-9])")
_OPTION_CORRECT_RE = re.compile(
    r"(?i)\b(?:option|choice)\s+" + _LETTER_TOKEN + r"\s+(?:is|seems|appears)\s+(?:the\s+)?"
    r"(?:correct|right|best|answer)"
)
_CHOICE_IS_RE = re.compile(
    r"(?i)\b(?:my\s+)?(?:final\s+)?(?:choice|selection)\s+is\s*[:：]?\s*[*_]*\s*" + _LETTER_TOKEN
)
_CORRECT_OPTION_RE = re.compile(
    r"(?i)\b(?:correct|right|best)\s+(?:option|choice)\s*(?:is|:|would\s+be)\s*[*_]*\s*" + _LETTER_TOKEN
)
# A bold letter that is the whole line ("**C**", "**(C).**"), not "**(B)** is wrong" in an
# option-by-option analysis.
_BOLD_RE = re.compile(r"(?m)^[^\S\n]*\*\*\s*[(\[]?([A-J])[)\]]?\s*[.:)]?\s*\*\*[^\S\n]*[.!]?[^\S\n]*$")
_LINE_RE = re.compile(r"(?m)^[^\S\n]*[*_]*[(\[]?([A-J])[)\].:]?[*_]*[^\S\n]*$")
#: The explicit rules after the official two, each with the words its every match starts with.
_EXPLICIT = ((_MARKER_RE, "marker", ("final", "correct", "best", "right", "answer")),
             (_OPTION_CORRECT_RE, "option_correct", ("option", "choice")),
             (_CORRECT_OPTION_RE, "option_correct", ("correct", "right", "best")),
             (_CHOICE_IS_RE, "marker", ("my", "final", "choice", "selection")))
_BARE_RE = re.compile(r"^\s*[*_]*[(\[]?([A-Ja-j])[)\]]?\.?[*_]*\s*$")


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


_TEXT_WRAPPER_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_LEADING_LETTER_RE = re.compile(r"^[(\[{]?\s*([A-Ja-j])\s*[)\]}]?(?:$|[.:)\s,]\s*)")


def letter_from_answer(ans: str) -> str | None:
    """The letter a bare answer names (``C``, ``(c)``, ``C. text``, ``\\boxed{C}``), else None."""
    s = squeeze(ans).strip()
    boxes = boxed_spans(s)
    if boxes:
        s = boxes[-1][1].strip()
    if "\\" in s:  # a LaTeX text wrapper
        s = _TEXT_WRAPPER_RE.sub(r"\1", s)
    s = s.strip().strip("$*_ ").strip()
    m = _LEADING_LETTER_RE.match(s)
    if not m:
        return None
    rest = s[m.end() :]
    if m.group(1).islower() and rest and rest[:1].isalpha() and " " in s[: m.end() + 1]:
        return None
    return m.group(1).upper()


def _official_colon(text: str) -> str | None:
    """MMLU-Pro's ``re.search(r'.*[aA]nswer:\\s*([A-J])', text)``: the first line holding a
    match (``\\s*`` may cross newlines), and on it the last match (greedy ``.*``)."""
    m = _OFFICIAL_COLON_RE.search(text)
    if m is None:
        return None
    line_end = text.find("\n", m.start())
    last = m
    for m2 in _OFFICIAL_COLON_RE.finditer(text, m.end()):
        if line_end >= 0 and m2.start() > line_end:
            break
        last = m2
    return last.group(1)


def extract_choice_rule(text: str) -> tuple[str, float, str] | None:
    """``(letter, quality, rule)`` of the chosen option, or None when no answer is found."""
    body = strip_confidence_lines(squeeze(text))
    m = _OFFICIAL_IS_RE.search(body)
    if m:
        return m.group(1), 1.0, "answer_is"
    letter = _official_colon(body)
    if letter:
        return letter, 1.0, "answer_colon"
    explicit: list[tuple[int, str, str]] = []
    # a box that names a letter is short; longer (nested, runaway) boxes are not read
    for start, content in boxed_spans(body, max_chars=MAX_LETTER_BOX_CHARS):
        letter = letter_from_answer(content)
        if letter:
            explicit.append((start, letter, "boxed"))
    low = body.lower() if body.isascii() else None
    for pat, rule, anchors in _EXPLICIT:
        for m in anchored_finditer(pat, body, anchors, low):
            if _letter_ok(body, m):
                explicit.append((m.start(), m.group(1).upper(), rule))
    if explicit:
        _, letter, rule = max(explicit, key=lambda c: c[0])
        return letter, 1.0, rule
    bold = list(_BOLD_RE.finditer(body))
    if bold:
        return bold[-1].group(1), 0.8, "bold_letter"
    lines = list(_LINE_RE.finditer(body))
    if lines:
        # Only a line that is nothing but a letter ("(C)", "C."): a listed option has text.
        return lines[-1].group(1), 0.6, "letter_line"
    m = _BARE_RE.match(body)
    if m:  # the whole output is one letter, any case: "c", "(c)", "c." (DESIGN: c is C)
        return m.group(1).upper(), 0.6, "letter_line"
    return None


def extract_choice(text: str) -> tuple[str, float] | None:
    """``(letter, quality)`` of the chosen option, or None when no answer is found."""
    found = extract_choice_rule(text)
    return None if found is None else (found[0], found[1])


def valid_letter(letter: str, n_options: int | None) -> bool:
    n = 10 if n_options is None else max(0, min(int(n_options), len(LETTERS)))
    return letter in LETTERS[:n]


# ----------------------------------------------------------------------------- the kind


@dataclass(frozen=True)
class Options:
    """What a choice answer's spec says of its question."""

    n_options: int | None = option(None, "how many options (4: A-D; None: A-J)")


def parse(text: str, spec: ParseSpec) -> Found | Invalid:
    n_options = options_of(spec, Options).n_options
    found = extract_choice_rule(text)
    if found is None:
        return Invalid("no answer found")
    letter, q, rule = found
    if not valid_letter(letter, n_options):
        return Invalid(f"letter {letter} is not one of the {n_options or 10} options", rule,
                       letter)
    return Found(letter, q, letter, rule)


def canonicalize(answer: str, spec: ParseSpec) -> str | None:
    n_options = options_of(spec, Options).n_options
    letter = letter_from_answer(answer)
    if letter is None:
        found = extract_choice(answer)
        letter = found[0] if found else None
    return letter if letter and valid_letter(letter, n_options) else None


_FIRST_LETTER = re.compile(r"([A-Z])")


def _first_letter(text: str) -> str | None:
    m = _FIRST_LETTER.search(text.upper())
    return m.group(1) if m else None


def words(spec: ParseSpec) -> AnswerWords:
    """What methods say about a multiple-choice answer (``AnswerWords``): the letters of the
    spec's options (A-D when it does not say, in a hint; A-J for a random answer)."""
    shown = [chr(65 + i) for i in range(spec.n_options or 4)]
    options = tuple(chr(65 + i) for i in range(spec.n_options or 10))
    return AnswerWords(
        feedback_examples=tuple(FEEDBACK_EXAMPLES),
        noun="one of the answer choices: " + ", ".join(shown),
        field_rule=f'Only place {",".join(shown)} representing your choice in the "answer" field.',
        options=options,
        letters=options,
        critique_focus=("Check every option against the question, not only the chosen one, "
                        "and make sure the chosen letter is the option the reasoning supports."),
        read_json=_first_letter)  # GoA's reading of a JSON answer: its first capital letter

#: Self-Refine's few-shot feedback examples for this kind (df_ray.methods.self_refine_fewshot:
#: (question, solution, [(step, review)], the fixed solution or None when it is right)),
#: written for this kind's answer format; what ``words`` gives as feedback_examples.
FEEDBACK_EXAMPLES = [
    ("Answer the following multiple-choice question (options A-D).\n\nWhich gas makes up "
     "most of Earth's atmosphere?\n(A) Oxygen\n(B) Carbon dioxide\n(C) Nitrogen\n(D) Argon",
     "Living things breathe oxygen, so it must be the most abundant gas.\nAnswer: A",
     [("Living things breathe oxygen, so it must be the most abundant gas.",
       "wrong! Being needed for breathing says nothing about abundance. Dry air is about 78% "
       "nitrogen and 21% oxygen; argon is under 1% and carbon dioxide far less."),
      ("Answer: A", "wrong! The most abundant gas is nitrogen, option C.")],
     "Dry air is about 78% nitrogen, 21% oxygen, under 1% argon and far less carbon dioxide, "
     "so nitrogen makes up most of it.\nAnswer: C"),
    ("Answer the following multiple-choice question (options A-D).\n\nWhat is the SI unit of "
     "force?\n(A) Joule\n(B) Newton\n(C) Watt\n(D) Pascal",
     "Force is measured in newtons (1 N = 1 kg m/s^2); the joule is energy, the watt power "
     "and the pascal pressure.\nAnswer: B",
     [("Force is measured in newtons (1 N = 1 kg m/s^2).", "looks good"),
      ("The joule is energy, the watt power and the pascal pressure.", "looks good"),
      ("Answer: B", "looks good")],
     None),
]
