"""Math answers (MATH): find the final answer, then give equal answers one canonical key.

Extraction, in order of trust: the last ``\\boxed{}``/``\\fbox{}`` or explicit final-answer
line (whichever comes last in the text; quality 1.0, 0.9 for a softer "the answer is"), else
the last number in the text (quality 0.5).

Canonicalization: a cheap normalization of the LaTeX (``\\left``/``\\right``, ``\\dfrac``,
``\\text{units}``, degrees, percent, currency, trailing dots), a fast exact path for plain
numbers (``0.5`` and ``1/2`` both give ``1/2``), then math-verify to get a sympy expression
that is simplified under guards and printed (``(3, pi/2)``, ``2*sqrt(2)``). When sympy cannot
read the answer, the normalized string itself is the key.
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from fractions import Fraction

from df_ray.core.parsing._text import (
    boxed_spans,
    first_math_segment,
    next_nonempty_line,
    squeeze,
    strip_confidence_lines,
    strip_markdown,
)

#: Answers longer than this are keyed by their normalized string only (no sympy).
MAX_SYMPY_CHARS = 400
#: Keys longer than this are shortened to a prefix plus a hash.
MAX_KEY_CHARS = 120
#: Seconds allowed for one sympy canonicalization when a signal timeout is possible.
SYMPY_TIMEOUT_S = 3

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


def _exact_number(s: str) -> Fraction | None:
    t = s.replace(" ", "")
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


def _with_timeout(fn, *args):
    """Run fn under a SIGALRM time limit when we are on the main thread, else directly."""
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    try:
        from math_verify.errors import TimeoutException
        from math_verify.utils import timeout
    except Exception:
        return fn(*args)
    try:
        return timeout(timeout_seconds=SYMPY_TIMEOUT_S)(fn)(*args)
    except TimeoutException:
        return None


@functools.lru_cache(maxsize=65536)
def canonical_math(answer: str) -> str | None:
    """Canonical key of a bare math answer (LaTeX or plain); None when empty/unreadable."""
    try:
        s = normalize_latex(answer)
    except Exception:
        return None
    if not s:
        return None
    fr = _exact_number(s)
    if fr is not None:
        return _fraction_key(fr)
    if len(s) <= MAX_SYMPY_CHARS and not _looks_like_prose(s):
        try:
            key = _with_timeout(_sympy_key, s)
        except Exception:  # math-verify/sympy failures fall back to the string key
            key = None
        if key:
            return key
    return _string_key(s)


_FUNC_WORDS = frozenset(
    ["sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "pi", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "frac", "min", "max", "gcd", "lcm", "mod", "det"]
)


def _looks_like_prose(s: str) -> bool:
    """Words (``Monday``, ``no solution``): sympy would read them as products of symbols."""
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


def extract_math(text: str) -> tuple[str, float] | None:
    """``(answer text, quality)`` of the final answer in a model output, or None."""
    body = strip_confidence_lines(squeeze(text))
    candidates: list[tuple[int, str, float]] = []
    boxes = boxed_spans(body)
    if boxes:
        start, content = boxes[-1]
        candidates.append((start, content, 1.0))
    markers = list(_MARKER_RE.finditer(body))
    # Markers inside the last box's own line are covered by the box.
    for m in reversed(markers):
        line_end = body.find("\n", m.end())
        rest = body[m.end() : line_end if line_end >= 0 else len(body)]
        if not rest.strip() or rest.strip() in {"**", "*"}:
            rest = next_nonempty_line(body, (line_end if line_end >= 0 else len(body)) + 1)
        ans = _clean_marker_text(rest)
        if ans:
            quality = 0.9 if m.group(1).lower().startswith("the") else 1.0
            candidates.append((m.start(), ans, quality))
            break
    if candidates:
        start, ans, q = max(candidates, key=lambda c: c[0])
        return ans, q
    nums = list(_LAST_NUMBER_RE.finditer(body[-20000:]))
    if nums:
        return nums[-1].group(0), 0.5
    return None
