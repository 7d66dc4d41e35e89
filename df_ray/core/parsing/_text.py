"""Shared text helpers for the answer parsers: size limits, confidence, markers, fences, boxes.

Everything here is plain ``re``/``str`` work, written to stay linear-time on adversarial input
(no nested quantifiers over unbounded text) so that a parser never hangs on what a model said.
"""

from __future__ import annotations

import functools
import math
import re

#: Texts longer than this are treated as invalid outputs (no model answer is that long).
MAX_TEXT_CHARS = 200_000

_CONF_INLINE_RE = re.compile(
    r"(?i)\bconfidence(?:\s++(?:level|score))?[^\S\n]*+[*_]*+[^\S\n]*+[:=：][^\S\n]*+[*_]*+[^\S\n]*+([^\n]*)"
)
_NUM = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_CONF_NUM_RE = re.compile(
    r"^[\s$*_(\[]*(" + _NUM + r")\s*(?:(%|percent\b)|(?:/|\bout\s+of\b|\bin\b)\s*(" + _NUM + r"))?",
    re.I,
)


_CONF_FRAC_RE = re.compile(r"\\d?frac\s*\{\s*(" + _NUM + r")\s*\}\s*\{\s*(" + _NUM + r")\s*\}")
_CONF_WRAPPER_RE = re.compile(r"\\[()\[\]]|\\(?:boxed|text|mathrm|textbf)\s*\{|[{}$]")


def _unlatex_confidence(value: str) -> str:
    """A confidence value as written in LaTeX, as plain text: ``\\(\\boxed{0.9}\\)`` -> ``0.9``,
    ``\\(\\frac{4}{5}\\)`` -> ``4/5``, ``90\\%`` -> ``90%`` (real instruct models write them so)."""
    if "\\" not in value and "$" not in value:
        return value
    value = _CONF_FRAC_RE.sub(r"\1/\2", value.replace("\\%", "%"))
    return _CONF_WRAPPER_RE.sub("", value)


def extract_confidence(text: str) -> float:
    """The self-reported confidence in [0, 1] from the LAST confidence line; 0.5 when absent.

    The line is ``Confidence: <value>`` (also ``Confidence level``/``score``, ``=`` for ``:``,
    markdown such as ``**Confidence:** 0.7``). The value is read as:

    - a fraction: ``8/10`` -> 0.8, ``4 out of 5`` -> 0.8, ``3 in 4`` -> 0.75;
    - any of these in LaTeX: ``\\(\\boxed{0.9}\\)``, ``$\\frac{4}{5}$``, ``90\\%``;
    - a percentage: ``80%``, ``80 percent`` -> 0.8;
    - a plain number: in [0, 1] as is (``0.8``); in (1, 100] as a percentage (``85`` -> 0.85);
    - anything else (words such as ``high`` or ``very confident``, a missing value) -> 0.5,
      the same as no confidence line: a word is not a calibrated number.

    Values are clamped to [0, 1]; a fraction with a zero denominator gives 0.5.
    """
    try:
        if not isinstance(text, str) or ("onfidence" not in text and "ONFIDENCE" not in text):
            return 0.5
        if len(text) > MAX_TEXT_CHARS:
            text = text[-MAX_TEXT_CHARS:]
        matches = list(anchored_finditer(_CONF_INLINE_RE, squeeze(text), ("confidence",)))
        if not matches:
            return 0.5
        value_text = _unlatex_confidence(matches[-1].group(1)[:200])
        m = _CONF_NUM_RE.match(value_text)
        if not m:
            return 0.5
        value = float(m.group(1))
        if m.group(3) is not None:
            den = float(m.group(3))
            if den <= 0 or not math.isfinite(den):
                return 0.5
            value /= den
        elif m.group(2) or 1.0 < value <= 100.0:
            value /= 100.0
        if not math.isfinite(value):
            return 0.5
        return float(min(1.0, max(0.0, value)))
    except Exception:  # never let a malformed confidence break parsing
        return 0.5


_CONF_LINE_RE = re.compile(r"(?i)^[\s#>*_\-]*+(?:self[- ]?reported\s+)?confidence\b.*$")
#: A confidence reported after the answer on the same line ("... is \\(\\boxed{5}\\).
#: Confidence: \\(\\boxed{0.9}\\)."): ``Confidence:`` right after a sentence's or a formula's
#: end, read to the end of the line.
_CONF_CLAUSE_RE = re.compile(
    r"(?i)(?<=[.!?;)\]$])[^\S\n]*+[*_]*+confidence(?:[^\S\n]++(?:level|score))?[*_]*+"
    r"[^\S\n]*+[:=：]"
)


#: A blank run other than one space: two or more blanks (not newlines), or one that is not a
#: space.
_BLANKS_RE = re.compile(r"[^\S\n]{2,}+|[^\S\n ]")
#: What a blank run holds beyond a single space, in ASCII (``\s`` there is these and " ").
_ASCII_ODD_BLANKS = ("  ", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f")
_NEWLINE_RUN_RE = re.compile(r"\n[ \n]*+")
_STARS_RE = re.compile(r"[*_]{3,}+")


def anchored_finditer(pattern: re.Pattern[str], text: str, anchors: tuple[str, ...],
                      low: str | None = None) -> list[re.Match[str]]:
    """``list(pattern.finditer(text))``, the same matches, for a case-insensitive pattern
    whose every match starts with one of ``anchors`` (lowercase words): in ASCII text the
    pattern is tried only where an anchor is, not at every character (under ``(?i)``, or
    with an optional first group, the regex engine has no literal prefix to skip ahead
    with). Text that is not ASCII (where ``(?i)`` folds more than ``str.lower``) is scanned
    whole. ``low``: ``text.lower()``, when the caller has it."""
    if not text.isascii():
        return list(pattern.finditer(text))
    if low is None:
        low = text.lower()
    starts = []
    for a in anchors:
        k = low.find(a)
        while k >= 0:
            starts.append(k)
            k = low.find(a, k + 1)
    out = []
    look = 0
    for i in sorted(starts):
        if i < look:
            continue
        m = pattern.match(text, i)
        if m is not None:
            out.append(m)
            look = max(m.end(), i + 1)
    return out


@functools.lru_cache(maxsize=16)
def squeeze(text: str) -> str:
    """Whitespace runs -> one space (one newline if the run had one); ``***..`` -> ``**``.

    The marker regexes run on squeezed text so that no quantifier ever faces a long run of
    blanks or stars (adversarial input cannot make them backtrack quadratically).

    Every answer is squeezed more than once, so this is three passes of the C regex engine
    with fixed replacements (no Python call per run), each skipped when a plain substring
    test shows it has nothing to do: blank runs other than newlines -> one space; then a
    newline and the blanks after it -> one newline, and the space left before one dropped.
    The last few results are kept: the confidence and the answer rules squeeze the same text.
    """
    if (any(b in text for b in _ASCII_ODD_BLANKS) if text.isascii()
            else _BLANKS_RE.search(text) is not None):
        text = _BLANKS_RE.sub(" ", text)
    if "\n " in text or "\n\n" in text:
        text = _NEWLINE_RUN_RE.sub("\n", text)
    if " \n" in text:
        text = text.replace(" \n", "\n")
    if "**" in text or "__" in text or "*_" in text or "_*" in text:
        text = _STARS_RE.sub("**", text)
    return text


def strip_confidence_lines(text: str) -> str:
    """The text without the confidence it reports, whole lines and clauses after an answer on
    its line (so their digits and boxes are not answers)."""
    if "onfidence" not in text and "ONFIDENCE" not in text:
        return text
    out = []
    plain = text.isascii()  # then a line without the word has neither (see anchored_finditer)
    for line in text.split("\n"):
        if plain and "confidence" not in line.lower():
            out.append(line)
            continue
        if _CONF_LINE_RE.match(line):
            continue
        clause = _CONF_CLAUSE_RE.search(line)
        out.append(line[:clause.start()] if clause else line)
    return "\n".join(out)


_BRACE_RE = re.compile(r"[{}]")


def brace_matches(text: str) -> dict[int, int]:
    """Map of the index of each ``{`` to the index of its matching ``}`` (one linear pass).

    Escaped braces (``\\{`` and ``\\}``) are literal characters and do not count.
    """
    matches: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_RE.finditer(text):
        i = m.start()
        if i > 0 and text[i - 1] == "\\" and not (i > 1 and text[i - 2] == "\\"):
            continue
        if text[i] == "{":
            stack.append(i)
        elif stack:
            matches[stack.pop()] = i
    return matches


def balanced(text: str) -> bool:
    """Whether every ``{`` has its ``}`` and no ``}`` comes unopened (escaped ones are text)."""
    depth = 0
    for m in _BRACE_RE.finditer(text):
        i = m.start()
        if i > 0 and text[i - 1] == "\\" and not (i > 1 and text[i - 2] == "\\"):
            continue
        depth += 1 if text[i] == "{" else -1
        if depth < 0:
            return False
    return depth == 0


_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?:\s*(\{)|\s+(?=[^\s{]))")

#: A box holding more than this many characters is no answer (only nested or runaway boxes
#: do): it is left out of ``boxed_spans``, which keeps the work linear in the input.
MAX_BOX_CHARS = 4_000


def box_positions(text: str) -> list[tuple[int, int, int]]:
    """``(start, content start, content end)`` of every complete ``\\boxed{...}`` /
    ``\\fbox{...}`` / ``\\boxed 5`` in text order; one linear pass, nothing sliced."""
    if "\\boxed" not in text and "\\fbox" not in text:
        return []
    matches = brace_matches(text)
    out: list[tuple[int, int, int]] = []
    for m in _BOX_RE.finditer(text):
        if m.group(1):
            close_i = matches.get(m.end() - 1)
            if close_i is not None:
                out.append((m.start(), m.end(), close_i))
        else:
            tok = re.match(r"[^\s$]+", text[m.end() : m.end() + 200])
            if tok:
                out.append((m.start(), m.end(), m.end() + tok.end()))
    return out


def boxed_spans(text: str, max_chars: int = MAX_BOX_CHARS) -> list[tuple[int, str]]:
    """``(start, content)`` of every complete ``\\boxed{...}`` / ``\\fbox{...}`` in text order
    whose content is at most ``max_chars`` long (see ``MAX_BOX_CHARS``).

    ``\\boxed 5`` (no braces) yields the next token. Unbalanced (truncated) boxes are skipped.
    """
    return [(start, text[a:b]) for start, a, b in box_positions(text) if b - a <= max_chars]


_FENCE_RE = re.compile(r"(?m)^[^\S\n]*+(`{3,}+|~{3,}+)[^\S\n]*+([\w+#.-]*+)[^\n]*+\n")


def fenced_blocks(text: str) -> list[tuple[str, str, bool]]:
    """``(language, body, closed)`` for each fenced block (```` ``` ```` or ``~~~``) in order.

    A final fence that was never closed (a truncated output) runs to the end of the text and
    is reported with ``closed=False``.
    """
    blocks: list[tuple[str, str, bool]] = []
    pos = 0
    while True:
        m = _FENCE_RE.search(text, pos)
        if not m:
            break
        fence = m.group(1)
        lang = m.group(2).lower()
        close = re.compile(r"(?m)^[^\S\n]*+" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}+[^\S\n]*+$")
        c = close.search(text, m.end())
        if c is None:
            blocks.append((lang, text[m.end() :], False))
            break
        blocks.append((lang, text[m.end() : c.start()], True))
        pos = c.end()
    return blocks


_MATH_DELIMS = (
    re.compile(r"\$\$(.+?)\$\$", re.S),
    re.compile(r"\\\[(.+?)\\\]", re.S),
    re.compile(r"\\\((.+?)\\\)", re.S),
    re.compile(r"(?<!\\)\$(.+?)(?<!\\)\$", re.S),
)


def first_math_segment(text: str) -> str | None:
    """Content of the first ``$..$``, ``$$..$$``, ``\\(..\\)`` or ``\\[..\\]`` in text, if any."""
    best: tuple[int, str] | None = None
    for pat in _MATH_DELIMS:
        m = pat.search(text)
        if m and m.group(1).strip() and (best is None or m.start() < best[0]):
            best = (m.start(), m.group(1))
    return None if best is None else best[1]


def strip_markdown(s: str) -> str:
    """Drop bold/italic/code markers and heading/quote prefixes."""
    s = re.sub(r"[*`]+", "", s)
    s = re.sub(r"(?<!\w)_+|_+(?!\w)", "", s)
    return re.sub(r"^[\s#>]+", "", s)


def next_nonempty_line(text: str, pos: int) -> str:
    """The first non-blank line at or after ``pos`` (bounded), stripped; '' if none."""
    for line in text[pos : pos + 2000].split("\n"):
        if line.strip():
            return line.strip()
    return ""
