"""Math answers (MATH): find the final answer, then give equal answers one canonical key.

Reference: the MATH leaderboards (Open LLM Leaderboard, lighteval) read and grade answers with
math-verify (huggingface/Math-Verify): ``parse`` extracts the last ``\\boxed{}``, else a
"final answer is" phrase, else the last LaTeX/plain expression, and ``verify`` compares with
sympy. df_ray extracts the same final answer where an explicit marker exists and keys it so
that equal keys are math-verify-equal (property-tested against math-verify).

Extraction (``extract_math_answer``): math-verify's own extraction decides the answer text
whenever it finds one, so df_ray reads what the reference grader reads (a box anywhere wins
over a later "the answer is $x$"). Several boxes: only the last group of *adjacent* boxes
is read (``last_box_group``): boxes with nothing but separators between them (``\\boxed{2}
and \\boxed{3}``, ``\\boxed{1}\\boxed{2}``) are one deliberate multi-answer, read together as
math-verify reads them (the set ``{2, 3}``); a box followed by other text and a later box was
corrected, and the last box is the answer, as the MATH reference (``last_boxed_only_string``)
and lm-evaluation-harness's ``minerva_math`` read it.
df_ray's rules come first only to refuse malformed answers: text after a marker with
unbalanced braces, or a ``\\boxed{`` left open after the last candidate (a truncated output),
is invalid; and after it, where it finds nothing: an explicit ``Final answer:`` / ``Answer:``
line, else the last number in the text. ``rule`` on the observation names where the answer came
from: ``boxed`` (1.0), ``final_answer`` (1.0), ``answer_is`` (a softer "the answer is", 0.9),
``last_expression`` (math-verify's fallback, 0.5) or ``last_number`` (df_ray's, 0.5). Every
math-verify and sympy call is bounded by ``SYMPY_TIMEOUT_S`` on any thread (see
``_bounded``); an output that runs past it is invalid with reason ``timeout: ...``.

Canonicalization: a cheap normalization of the LaTeX (``\\left``/``\\right``, ``\\dfrac``,
``\\text{units}``, degrees, percent, currency, trailing dots), a fast exact path for plain
numbers (``0.5`` and ``1/2`` both give ``1/2``) and repeating decimals (``0.\\overline{3}`` and
``0.1\\overline{6}`` give ``1/3`` and ``1/6``; math-verify itself reads them as ``0`` and
``0.1*bar{6}``, so df_ray's grader rewrites them to fractions before calling it), then
math-verify to get a sympy expression that is simplified under guards and printed
(``(3, pi/2)``, ``2*sqrt(2)``, ``Interval.Ropen(1, 2)``, ``{1, 2}``, ``Matrix([[1], [2]])``).
When sympy cannot read the answer, the normalized string itself is the key (``\\text{Monday}``
-> ``monday``). ``10\\%`` keys as ``10`` (math-verify counts it equal to both ``10`` and
``0.1``); ``30^\\circ`` as ``30``; ``5\\text{ cm}`` as ``5``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from dataclasses import dataclass
from fractions import Fraction

from df_ray.core.parsing._bounded import ParseTimeout, call_bounded, preload
from df_ray.core.parsing._text import (
    balanced,
    box_positions,
    boxed_spans,
    first_math_segment,
    next_nonempty_line,
    squeeze,
    strip_confidence_lines,
    strip_markdown,
)
from df_ray.core.parsing.kinds import AnswerWords, Found, Invalid, options_of
from df_ray.core.types import ParseSpec

#: Answers longer than this are keyed by their normalized string only (no sympy).
MAX_SYMPY_CHARS = 400
#: Numbers longer than this are keyed by their string: Python refuses int() and str() of
#: integers over 4,300 digits, and no answer needs them.
MAX_NUMBER_CHARS = 1000
#: Keys longer than this are shortened to a prefix plus a hash.
MAX_KEY_CHARS = 120
#: Seconds allowed for one sympy canonicalization (any thread); env DF_RAY_PARSE_TIMEOUT_S.
SYMPY_TIMEOUT_S = float(os.environ.get("DF_RAY_PARSE_TIMEOUT_S", "5"))

# Bounded calls run in helper processes that import this module (and math-verify, sympy:
# ``warm``) before they take one.
preload(__name__)

_MARKER_RE = re.compile(
    r"(?i)(final\s+answer\s*(?:is|:|=|：)?|\banswer\s*(?::|=|：)|\bthe\s+(?:correct\s+)?answer\s+is\b)"
)

_UNIT_WORDS = (
    "dollars?|cents?|degrees?|units?|square\\s+units?|sq\\.?\\s*units?|inches|inch|feet|foot|ft|"
    "meters?|metres?|cm|mm|km|m|miles?|mph|hours?|hrs?|minutes?|mins?|seconds?|secs?|days?|"
    "weeks?|months?|years?|people|students|ways|points?|pounds?|lbs?|kg|grams?|g|liters?|"
    "litres?|ml|gallons?|ounces?|oz|percent|%|cubic\\s+\\w+|square\\s+\\w+"
)
_TRAILING_UNIT_RE = re.compile(r"(?i)(?<=[\d}\s])\s*(?:" + _UNIT_WORDS + r")\.?\s*$")
_TEXT_UNIT_RE = re.compile(r"\\(?:text|textbf|mbox|mathrm|textnormal)\{\s*(?:" + _UNIT_WORDS + r")\s*\}")
_NUMBER_RE = re.compile(
    r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][+-]?\d{1,3})?$|^[+-]?\.\d+(?:[eE][+-]?\d{1,3})?$"
)
_FRACTION_RE = re.compile(r"^([+-]?\d{1,60})\s*/\s*([+-]?\d{1,60})$")
_LAST_NUMBER_RE = re.compile(r"(?<![\w.])[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?")


def _fraction_key(fr: Fraction) -> str:
    return str(fr.numerator) if fr.denominator == 1 else f"{fr.numerator}/{fr.denominator}"


def normalize_latex(ans: str) -> str:
    """Cheap, sympy-free normalization of an answer string (also the fallback key)."""
    s = squeeze(ans).strip()
    # Peel wrappers: boxed, math delimiters.
    boxes = boxed_spans(s)
    if boxes:
        s = boxes[-1][1]
    seg = first_math_segment(s) if ("$" in s or "\\(" in s or "\\[" in s) else None
    if seg is not None:
        s = seg
    s = s.strip().strip("$").strip()
    s = re.sub(r"^\\[\[(]|\\[\])]$", "", s).strip()
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\:", "")
    s = s.replace("\\quad", " ").replace("\\qquad", " ").replace("~", " ")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = s.replace("\\displaystyle", "")
    s = re.sub(r"\^\s*\{?\s*\\circ\s*\}?", "", s)
    s = s.replace("°", "")
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace("\\$", "").replace("$", "")
    s = _TEXT_UNIT_RE.sub("", s)
    s = re.sub(r"\\(?:text|textbf|mbox|mathrm|textnormal|operatorname)\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\{,\}", ",", s)
    s = _TRAILING_UNIT_RE.sub("", s)
    s = re.sub(r"\s+", " ", s).strip()
    s = s.rstrip(".").strip()
    s = re.sub(r"^[a-zA-Z]\s*=\s*(?=[-+\d.\\(])", "", s) if s.count("=") == 1 else s
    return s


def _string_key(s: str) -> str:
    k = re.sub(r"\s+", " ", s).strip().lower()
    k = re.sub(r"\s*([^\w\s])\s*", r"\1", k)
    k = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", k)
    return _shorten(k)


def _shorten(key: str) -> str:
    if len(key) <= MAX_KEY_CHARS:
        return key
    digest = hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return key[: MAX_KEY_CHARS - 14] + "#" + digest


_REPEATING_RE = re.compile(
    r"^([+-]?)(\d*)\.(\d*)\\(?:overline|bar|dot)\s*\{?\s*(\d{1,30})\s*\}?$"
)


def repeating_decimal(s: str) -> Fraction | None:
    """``0.\\overline{3}`` -> 1/3, ``1.2\\overline{45}`` -> 1.2454545... as a fraction."""
    s = s.replace(" ", "")
    if len(s) > MAX_NUMBER_CHARS:
        return None
    m = _REPEATING_RE.match(s)
    if not m:
        return None
    sign, whole, fixed, rep = m.groups()
    base = Fraction(int(whole or "0")) + (Fraction(int(fixed), 10 ** len(fixed)) if fixed else 0)
    value = base + Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed))
    return -value if sign == "-" else value


_REPEATING_ANY_RE = re.compile(r"(?<![\d.])\d*\.\d*\\(?:overline|bar|dot)\s*\{\s*\d{1,30}\s*\}")


def rewrite_repeating(s: str) -> str:
    """Every repeating decimal in a LaTeX string replaced by its ``\\frac{p}{q}``."""
    if "\\overline" not in s and "\\bar" not in s and "\\dot" not in s:
        return s

    def sub(m: re.Match[str]) -> str:
        fr = repeating_decimal(m.group(0))
        return m.group(0) if fr is None else f"\\frac{{{fr.numerator}}}{{{fr.denominator}}}"

    return _REPEATING_ANY_RE.sub(sub, s)


def _exact_number(s: str) -> Fraction | None:
    t = s.replace(" ", "")
    if len(t) > MAX_NUMBER_CHARS:  # keyed by its string (Python's int-string limit)
        return None
    rep = repeating_decimal(t)
    if rep is not None:
        return rep
    if _NUMBER_RE.match(t):
        try:
            return Fraction(t.replace(",", ""))
        except (ValueError, ZeroDivisionError):
            return None
    m = _FRACTION_RE.match(t)
    if m and int(m.group(2)) != 0:
        return Fraction(int(m.group(1)), int(m.group(2)))
    m = re.match(r"^([+-]?)\\frac(?:\{(\d{1,60})\}\{(\d{1,60})\}|(\d)(\d))$", t)
    if m:
        num, den = (m.group(2), m.group(3)) if m.group(2) else (m.group(4), m.group(5))
        if int(den) != 0:
            fr = Fraction(int(num), int(den))
            return -fr if m.group(1) == "-" else fr
    return None


def _node_unsafe(node) -> bool:
    import sympy

    if isinstance(node, sympy.Pow):
        e = node.exp
        return bool((e.has(sympy.Pow) and not e.is_Rational) or (e.is_Number and abs(e) > 2000))
    if isinstance(node, sympy.Integer):
        return abs(int(node)) > 10**60
    if isinstance(node, sympy.factorial | sympy.gamma | sympy.binomial):
        return any(a.is_Number and abs(a) > 300 for a in node.args)
    return False


def _is_safe(expr) -> bool:
    """Whether simplifying expr is cheap enough: no huge powers, factorials or large trees."""
    import sympy

    try:
        if sympy.count_ops(expr, visual=False) > 60:
            return False
        return not any(_node_unsafe(n) for n in sympy.preorder_traversal(expr))
    except Exception:
        return False


def _canon_expr(expr):
    import sympy

    if isinstance(expr, sympy.Float):
        return sympy.Rational(str(expr))
    if isinstance(expr, sympy.Eq | sympy.core.relational.Equality):
        lhs, rhs = expr.lhs, expr.rhs
        if isinstance(lhs, sympy.Symbol) and not rhs.has(lhs):
            return _canon_expr(rhs)
        return sympy.Eq(_canon_expr(lhs), _canon_expr(rhs), evaluate=False)
    if isinstance(expr, sympy.Tuple):
        return sympy.Tuple(*[_canon_expr(a) for a in expr.args])
    if isinstance(expr, sympy.FiniteSet):
        return sympy.FiniteSet(*[_canon_expr(a) for a in expr.args])
    if isinstance(expr, sympy.Interval):
        return sympy.Interval(_canon_expr(expr.start), _canon_expr(expr.end),
                              expr.left_open, expr.right_open)
    if isinstance(expr, sympy.MatrixBase):
        return sympy.ImmutableMatrix(expr.applyfunc(_canon_expr))
    if not isinstance(expr, sympy.Expr):
        return expr
    floats = expr.atoms(sympy.Float)
    if floats:
        expr = expr.xreplace({f: sympy.Rational(str(f)) for f in floats})
    if not _is_safe(expr):
        return expr
    expr = expr.doit()
    simplified = sympy.simplify(expr)
    if simplified.free_symbols:
        try:
            if simplified.is_polynomial() or simplified.is_rational_function():
                cand = sympy.cancel(simplified)
                if simplified.is_polynomial():
                    cand = sympy.expand(cand)
                if sympy.count_ops(cand) <= 2 * sympy.count_ops(simplified) + 10:
                    simplified = cand
        except Exception:
            pass
    return simplified


def _sympy_key(s: str) -> str | None:
    import math_verify.parser as mv_parser
    from math_verify import ExprExtractionConfig, LatexExtractionConfig
    from math_verify import parse as mv_parse

    mv_parser.TIMEOUT_WARNING_SHOWN = True  # we run without its signal timeout on purpose

    parsed = mv_parse(
        "$" + s + "$",
        extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
        parsing_timeout=None,  # type: ignore[arg-type]  # we time-limit ourselves (signals)
    )
    import sympy

    exprs = [p for p in parsed if isinstance(p, sympy.Basic | sympy.MatrixBase)]
    if not exprs:
        return None
    expr = _canon_expr(exprs[0])
    key = str(expr)
    if "\n" in key:
        key = re.sub(r"\s+", " ", key)
    return _shorten(key)


@functools.lru_cache(maxsize=1)
def warm() -> bool:
    """Import math-verify and sympy and run one parse, outside any time bound (the first call
    pays seconds of imports and grammar loading that must not count as a slow answer)."""
    try:
        import math_verify.grader as mv_grader
        import math_verify.parser as mv_parser
        from math_verify import parse as mv_parse

        # df_ray bounds every call itself (call_bounded): silence the "timeout disabled" notice
        mv_parser.TIMEOUT_WARNING_SHOWN = True
        mv_grader.TIMEOUT_WARNING_SHOWN = True
        mv_parse("$\\frac{1}{2}$", parsing_timeout=None)  # type: ignore[arg-type]
        import sympy

        sympy.simplify(sympy.Symbol("x") + 1)
        return True
    except Exception:
        return False


@functools.lru_cache(maxsize=65536)
def math_key(answer: str) -> tuple[str | None, str]:
    """``(key, reason)`` of a bare math answer: the key, or None with why (empty, timeout)."""
    try:
        s = normalize_latex(answer)
    except Exception:
        return None, "unreadable answer"
    if not s:
        return None, "empty answer"
    s = rewrite_repeating(s)  # inside sets, tuples, intervals too (math-verify reads them as 0)
    fr = _exact_number(s)
    if fr is not None:
        return _fraction_key(fr), ""
    if len(s) <= MAX_SYMPY_CHARS and not _looks_like_prose(s):
        warm()
        try:
            key = call_bounded(_sympy_key, s, timeout_s=SYMPY_TIMEOUT_S)
        except ParseTimeout:
            return None, f"timeout: canonicalizing the answer took over {SYMPY_TIMEOUT_S:g}s"
        except Exception:  # math-verify/sympy failures fall back to the string key
            key = None
        if key:
            return key, ""
    return _string_key(s), ""


def canonical_math(answer: str) -> str | None:
    """Canonical key of a bare math answer (LaTeX or plain); None when empty/unreadable/timed out."""
    return math_key(answer)[0]


_FUNC_WORDS = frozenset(
    ["sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "pi", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "frac", "min", "max", "gcd", "lcm", "mod", "det"]
)


def _looks_like_prose(s: str) -> bool:
    """Words (``Monday``, ``no solution``): sympy would read them as products of symbols."""
    s = re.sub(r"\\(?:begin|end)\{[A-Za-z*]+\}", " ", s)  # \begin{pmatrix} is not prose
    words = [w for w in re.findall(r"(?<![\\\w])[A-Za-z]{3,}(?!\w)", s) if w.lower() not in _FUNC_WORDS]
    return bool(words)


def _clean_marker_text(rest: str) -> str:
    rest = rest.strip()
    boxes = boxed_spans(rest)
    if boxes:
        return boxes[-1][1]
    seg = first_math_segment(rest)
    if seg is not None:
        return seg
    rest = strip_markdown(rest)
    # Cut at the end of the first sentence ("5. I hope it is correct.").
    m = re.search(r"(?<!\d)\.\s+(?=[A-Z])|(?<=\d)\.\s+(?=[A-Za-z])|\.\s*$", rest)
    if m:
        rest = rest[: m.start()]
    return rest.strip()


class MathExtractError(ValueError):
    """No readable answer: the reason, and the rule and text df_ray's own rules found (if any)."""

    def __init__(self, reason: str, rule: str = "", extracted: str | None = None) -> None:
        super().__init__(reason)
        self.rule = rule
        self.extracted = extracted


_OPEN_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


def extract_math_rule(text: str) -> tuple[str, float, str] | None:
    """``(answer text, quality, rule)`` of the final answer in a model output, or None.

    Raises MathExtractError for a marker whose answer is malformed (unbalanced braces, an
    unclosed ``\\boxed{`` after the last candidate).
    """
    body = strip_confidence_lines(squeeze(text))
    candidates: list[tuple[int, str, float, str]] = []
    boxes = boxed_spans(body)
    if boxes:
        start, content = boxes[-1]
        candidates.append((start, content, 1.0, "boxed"))
    markers = list(_MARKER_RE.finditer(body))
    # Markers inside the last box's own line are covered by the box.
    for m in reversed(markers):
        line_end = body.find("\n", m.end())
        rest = body[m.end() : line_end if line_end >= 0 else len(body)]
        if not rest.strip() or rest.strip() in {"**", "*"}:
            rest = next_nonempty_line(body, (line_end if line_end >= 0 else len(body)) + 1)
        ans = _clean_marker_text(rest)
        if ans:
            soft = m.group(1).lower().startswith("the")
            candidates.append((m.start(), ans, 0.9 if soft else 1.0,
                               "answer_is" if soft else "final_answer"))
            break
    last_start = max((c[0] for c in candidates), default=-1)
    complete = {start for start, _, _ in box_positions(body)}
    for m in _OPEN_BOX_RE.finditer(body, max(0, last_start)):
        if m.start() > last_start and m.start() not in complete:
            raise MathExtractError("unbalanced braces: a \\boxed{ is never closed")
    if candidates:
        start, ans, q, rule = max(candidates, key=lambda c: c[0])
        if not balanced(ans):
            raise MathExtractError("unbalanced braces in the answer")
        return ans, q, rule
    nums = list(_LAST_NUMBER_RE.finditer(body[-20000:]))
    if nums:
        return nums[-1].group(0), 0.5, "last_number"
    return None


def mv_extract(text: str) -> str | None:
    """The answer string math-verify's own ``parse`` extracts from a model output (its default
    configs: LaTeX with boxed first, then plain expressions), or None. Unbounded: callers use
    ``call_bounded``."""
    from math_verify import parse as mv_parse

    found = mv_parse(text, parsing_timeout=None)  # type: ignore[arg-type]
    if len(found) >= 2 and isinstance(found[1], str) and found[1].strip():
        return found[1]
    return None


def _squash(s: str) -> str:
    return re.sub(r"\s+|\\[,;!: ]|\\left|\\right|\$", "", s)


# What may stand between two boxes of one deliberate multi-answer ("\\boxed{2} and
# \\boxed{3}", "$\\boxed{1}$, $\\boxed{2}$"): separators only, no other word.
_BOX_GAP_RE = re.compile(
    r"(?i)^(?:\s|[,;&$]|\\[\[\]()]|\\q?quad|\\[,;:! ]|\band\b|\bor\b|"
    r"\\(?:text|mbox|textrm)\{\s*(?:and|or|,)?\s*\}|\b[A-Za-z]_?\d?\s*=)*$")
#: Gaps longer than this between boxes are never separators only.
_MAX_BOX_GAP = 200


def last_box_group(body: str) -> tuple[int, int] | None:
    """``(start, end)`` of the last group of adjacent boxes when the text holds more than one
    box, else None. Boxes are adjacent when only separators stand between them (whitespace,
    commas, semicolons, ``and``/``or``, math delimiters, ``\\quad``): such a group is one
    answer, read as a set (``\\boxed{2} and \\boxed{3}`` -> ``{2, 3}``). Any other text
    between two boxes ends a group, so a self-corrected answer ("At first I got \\boxed{3}
    ... the sum is \\boxed{4}") is its last box, as the MATH reference
    (``last_boxed_only_string``) and lm-evaluation-harness's ``minerva_math`` read it."""
    boxes = [(s, b + (1 if body[b:b + 1] == "}" else 0)) for s, _, b in box_positions(body)]
    # outermost boxes only (a box nested in another is part of that answer)
    top: list[tuple[int, int]] = []
    for start, end in boxes:
        if top and start < top[-1][1]:
            continue
        top.append((start, end))
    if len(top) < 2:
        return None
    g_start, g_end = top[-1]
    for start, end in reversed(top[:-1]):
        gap = body[end:g_start]
        if len(gap) > _MAX_BOX_GAP or not _BOX_GAP_RE.match(gap):
            break
        g_start = start
    return g_start, g_end


def extract_math_answer(text: str) -> tuple[str, float, str]:
    """``(answer text, quality, rule)`` as the MATH leaderboards read it, or MathExtractError.

    math-verify's own extraction decides the answer whenever it finds one (so df_ray reads what
    the reference grader reads: a box anywhere before a later "the answer is $x$", several
    boxes read together); df_ray's rules come first only to refuse malformed answers
    (unbalanced braces, an unclosed box) and after it where it finds nothing. The rule is
    df_ray's name for where the answer came from: ``boxed``, ``final_answer``, ``answer_is``,
    ``last_expression`` (math-verify's fallback) or ``last_number`` (df_ray's).
    """
    own = extract_math_rule(text)
    body = strip_confidence_lines(text)
    group = last_box_group(body)
    if group is not None:
        # several boxes: only the last group of adjacent ones is the answer (a deliberate
        # multi-answer stays a set; an earlier box before other text was corrected)
        body = body[group[0]:group[1]]
    warm()
    try:
        ref = call_bounded(mv_extract, body, timeout_s=SYMPY_TIMEOUT_S)
    except ParseTimeout:
        raise MathExtractError(
            f"timeout: extracting the answer took over {SYMPY_TIMEOUT_S:g}s",
            own[2] if own else "", own[0].strip() if own else None) from None
    except Exception:
        ref = None
    if ref is None:
        if own is None:
            raise MathExtractError("no answer found")
        return own
    if own is not None and own[2] != "last_number" and _squash(own[0]) == _squash(ref):
        return ref, own[1], own[2]
    if any(_squash(ref) == _squash(c) for _, c in boxed_spans(squeeze(body))) or \
            (own is not None and own[2] == "boxed" and "," in ref):
        return ref, 1.0, "boxed"
    if own is not None and own[2] != "last_number":
        return ref, own[1], own[2]
    return ref, 0.5, "last_expression"


def extract_math(text: str) -> tuple[str, float] | None:
    """``(answer text, quality)`` of the final answer in a model output, or None."""
    try:
        found = extract_math_answer(text)
    except MathExtractError:
        return None
    return found[0], found[1]


# ----------------------------------------------------------------------------- the kind


@dataclass(frozen=True)
class Options:
    """A math answer has no options."""


def parse(text: str, spec: ParseSpec) -> Found | Invalid:
    options_of(spec, Options)
    try:
        ans, q, rule = extract_math_answer(text)
    except MathExtractError as e:
        return Invalid(str(e), e.rule, e.extracted)
    key, reason = math_key(ans)
    if key is None:
        return Invalid(reason or "unreadable answer", rule, ans.strip())
    return Found(key, q, ans.strip(), rule)


def canonicalize(answer: str, spec: ParseSpec) -> str | None:
    options_of(spec, Options)
    return canonical_math(answer)


def words(spec: ParseSpec) -> AnswerWords:
    """What methods say about a math answer (``AnswerWords``)."""
    return AnswerWords(
        feedback_examples=tuple(FEEDBACK_EXAMPLES),
        noun='a mathematical expression or number (e.g., "42" or "3/4")',
        field_rule=('Only place the final answer (a single number or mathematical expression) '
                    'in the "answer" field.'),
        default_answer="0",  # ReConcile's rule for numeric answers
        critique_focus=("Redo each calculation and algebraic step, check that the final answer "
                        "is fully simplified and answers exactly what was asked."))

#: Self-Refine's few-shot feedback examples for this kind (df_ray.methods.self_refine_fewshot:
#: (question, solution, [(step, review)], the fixed solution or None when it is right)),
#: written for this kind's answer format; what ``words`` gives as feedback_examples.
FEEDBACK_EXAMPLES = [
    ("Solve the following math problem.\n\nA store sells pencils at 3 for $1. How many dollars "
     "do 27 pencils cost?",
     "27 pencils is 27 * 3 = 81 groups of three.\nEach group costs $1, so the cost is 81.\n"
     "\\boxed{81}",
     [("27 pencils is 27 * 3 = 81 groups of three.",
       "wrong! The number of groups of three is 27 / 3 = 9, not 27 * 3."),
      ("Each group costs $1, so the cost is 81.",
       "wrong! With 9 groups at $1 each the cost is 9 dollars.")],
     "27 pencils is 27 / 3 = 9 groups of three.\nEach group costs $1, so the cost is 9 "
     "dollars.\n\\boxed{9}"),
    ("Solve the following math problem.\n\nWhat is the value of $x$ if $2x + 6 = 20$?",
     "Subtract 6 from both sides: 2x = 14.\nDivide by 2: x = 7.\n\\boxed{7}",
     [("Subtract 6 from both sides: 2x = 14.", "looks good"),
      ("Divide by 2: x = 7.", "looks good"),
      ("\\boxed{7}", "looks good")],
     None),
]
