"""FinQA programs: a small DSL executor, value keys, and FinQA's symbolic program equality.

A program is steps separated by commas, each ``op(arg1, arg2)``::

    subtract(5829, 5735), divide(#0, 5735)

Ops: add, subtract, multiply, divide, exp, greater (-> "yes"/"no"), and table_max, table_min,
table_sum, table_average (arguments: a row name matched to the first cell of a table row,
case/space-insensitive, and ``none``). Arguments: numbers (``1,234``, ``$5``, ``12%`` -> 0.12),
``const_100``, ``const_1000``, ``const_m1`` (-1) or any ``const_<n>``, and ``#n`` references to
the result of step n.

Answer extraction for ``parse``: a program after ``Program:`` / ``Answer:`` or in a fenced
block (quality 1.0), read whole even when written over several lines, else the last line that
holds a program (0.7). A truncated program (a step never closed, a trailing comma at the end)
or one with an unknown operation is invalid: df_ray never falls back to a number taken from
inside it. Without a program, a number after ``Answer:`` (0.6) or the last number (0.4) is
keyed by its value so that numeric answers still cluster with executed programs (they earn no
execution credit: see ``df_ray.tasks.finqa``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from df_ray.core.parsing._text import fenced_blocks, squeeze, strip_confidence_lines
from df_ray.core.parsing.kinds import AnswerWords, Found, Invalid, option, options_of
from df_ray.core.types import ParseSpec


class ProgramError(ValueError):
    """A FinQA program that cannot be parsed or executed."""


BINARY_OPS = ("add", "subtract", "multiply", "divide", "exp", "greater")
TABLE_OPS = ("table_max", "table_min", "table_sum", "table_average")
COMMUTATIVE_OPS = frozenset({"add", "multiply"})
MAX_STEPS = 64
MAX_PROGRAM_CHARS = 10_000

_STEP_RE = re.compile(r"\s*([A-Za-z_]+)\s*\(([^()]*)\)\s*")
_NUM_RE = re.compile(r"^[-+]?\$?\s*(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?\s*%?$")
_CONST_RE = re.compile(r"^const_(m?)(\d+(?:[._]\d+)?)$")
_REF_RE = re.compile(r"^#\s*(\d{1,9})$")  # bounded: int() of 4,300+ digits raises


@dataclass(frozen=True, slots=True)
class _Step:
    op: str
    args: tuple[str, ...]


def _split_args(inner: str, arity: int) -> list[str]:
    """Split arguments on ", " first (FinQA's separator; "1,234" keeps its comma), then ","."""
    parts = [p.strip() for p in re.split(r",\s+", inner.strip())] if inner.strip() else []
    if len(parts) == arity:
        return parts
    parts2 = [p.strip() for p in inner.split(",")] if inner.strip() else []
    if len(parts2) == arity:
        return parts2
    return parts


def parse_program(program: str) -> list[_Step]:
    """The steps of a program; raises ProgramError when it is malformed."""
    if not isinstance(program, str):
        raise ProgramError("program must be a string")
    s = program.strip().strip("`").strip()
    if len(s) > MAX_PROGRAM_CHARS:
        raise ProgramError("program too long")
    s = re.sub(r"(?:,?\s*EOF)?\s*[.;]?\s*$", "", s)
    if not s:
        raise ProgramError("empty program")
    steps: list[_Step] = []
    pos = 0
    while pos < len(s):
        m = _STEP_RE.match(s, pos)
        if not m:
            raise ProgramError(f"cannot read a step at {pos}: {s[pos:pos + 30]!r}")
        op = m.group(1).lower()
        if op in BINARY_OPS:
            args = _split_args(m.group(2), 2)
            if len(args) != 2:
                raise ProgramError(f"{op} takes 2 arguments, got {len(args)}")
        elif op in TABLE_OPS:
            args = _split_args(m.group(2), 2)
            if len(args) == 1:
                args = [args[0], "none"]
            if len(args) != 2 or not args[0]:
                raise ProgramError(f"{op} takes a row name and 'none'")
        else:
            raise ProgramError(f"unknown operation {op!r}")
        steps.append(_Step(op, tuple(args)))
        if len(steps) > MAX_STEPS:
            raise ProgramError("too many steps")
        pos = m.end()
        if pos < len(s):
            if s[pos] != ",":
                raise ProgramError(f"expected ',' between steps at {pos}")
            pos += 1
            if not s[pos:].strip():
                raise ProgramError("truncated program: it ends with ','")
    return steps


def parse_number(token: str) -> float:
    """A numeric literal: ``1,234``, ``-5.2``, ``$5``, ``12%`` (-> 0.12); ProgramError if not."""
    t = token.strip()
    if not t or not _NUM_RE.match(t) or not re.search(r"\d", t):
        raise ProgramError(f"not a number: {token!r}")
    pct = t.endswith("%")
    t = t.rstrip("%").replace("$", "").replace(",", "").replace(" ", "")
    try:
        v = float(t)
    except ValueError as e:
        raise ProgramError(f"not a number: {token!r}") from e
    return v / 100.0 if pct else v


def _const(token: str) -> float | None:
    m = _CONST_RE.match(token.strip().lower())
    if not m:
        return None
    v = float(m.group(2).replace("_", "."))
    return -v if m.group(1) else v


def _norm_row(name: str) -> str:
    return re.sub(r"\s+", "", name).lower().strip("\"'`")


def _cell_number(cell: str) -> float | None:
    c = cell.strip().replace("$", "").replace(" ", "")
    neg = False
    m = re.fullmatch(r"\((.+)\)", c)
    if m:
        c, neg = m.group(1), True
    else:
        c = c.split("(")[0]
    try:
        v = parse_number(c)
    except ProgramError:
        return None
    return -v if neg else v


def _table_values(row_name: str, table: Sequence[Sequence[str]] | None) -> list[float]:
    if not table:
        raise ProgramError("table operation without a table")
    want = _norm_row(row_name)
    for row in table:
        if row and _norm_row(str(row[0])) == want:
            vals = [v for v in (_cell_number(str(c)) for c in row[1:]) if v is not None]
            if not vals:
                raise ProgramError(f"row {row_name!r} has no numbers")
            return vals
    raise ProgramError(f"no table row named {row_name!r}")


def _arg_value(token: str, results: list[float | str]) -> float:
    t = token.strip()
    m = _REF_RE.match(t)
    if m:
        i = int(m.group(1))
        if i >= len(results):
            raise ProgramError(f"reference #{i} to a later step")
        v = results[i]
        if isinstance(v, str):
            raise ProgramError(f"#{i} is {v!r}, not a number")
        return v
    c = _const(t)
    if c is not None:
        return c
    return parse_number(t)


def execute_program(program: str, table: Sequence[Sequence[str]] | None = None) -> float | str:
    """Execute a FinQA program; the last step's value (a float, or "yes"/"no" for greater)."""
    steps = parse_program(program)
    results: list[float | str] = []
    for step in steps:
        value: float | str
        if step.op in TABLE_OPS:
            vals = _table_values(step.args[0], table)
            if step.op == "table_max":
                value = max(vals)
            elif step.op == "table_min":
                value = min(vals)
            elif step.op == "table_sum":
                value = math.fsum(vals)
            else:
                value = math.fsum(vals) / len(vals)
        else:
            a = _arg_value(step.args[0], results)
            b = _arg_value(step.args[1], results)
            try:
                if step.op == "add":
                    value = a + b
                elif step.op == "subtract":
                    value = a - b
                elif step.op == "multiply":
                    value = a * b
                elif step.op == "divide":
                    if b == 0:
                        raise ProgramError("division by zero")
                    value = a / b
                elif step.op == "exp":
                    if abs(b) > 10_000:
                        raise ProgramError("exponent too large")
                    value = math.pow(a, b)
                else:  # greater
                    value = "yes" if a > b else "no"
            except (OverflowError, ValueError, ZeroDivisionError) as e:
                if isinstance(e, ProgramError):
                    raise
                raise ProgramError(f"{step.op} failed: {e}") from e
        if isinstance(value, float) and not math.isfinite(value):
            raise ProgramError(f"{step.op} gave a non-finite value")
        results.append(value)
    return results[-1]


def program_key(value: float | int | str) -> str:
    """Key of an executed value: rounded to 5 decimals ("0.01639"); "yes"/"no" kept."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("yes", "no"):
            return v
        try:
            value = parse_number(v)
        except ProgramError:
            return v
    f = float(value)
    if not math.isfinite(f):
        return str(f)
    r = round(f, 5)
    if r == 0:
        return "0"
    return f"{r:.5f}".rstrip("0").rstrip(".")


# ---------------------------------------------------------------- symbolic program equality

#: Seconds allowed for one symbolic comparison (sympy simplify), on any thread.
EQUIVALENCE_TIMEOUT_S = 5.0


def _arg_token(token: str) -> str:
    """The identity of an argument for program accuracy: its value for numbers and constants
    (``5,829`` = ``5829`` = ``5829.0``; ``const_4`` = ``4``), ``#n`` as written."""
    t = token.strip()
    m = _REF_RE.match(t)
    if m:
        return f"#{int(m.group(1))}"
    c = _const(t)
    v = c if c is not None else parse_number(t)
    return repr(round(v, 10))


def _step_tokens(step: _Step) -> list[str]:
    if step.op in TABLE_OPS:
        return [f"{step.op}({_norm_row(step.args[0])})"]
    return [_arg_token(a) for a in step.args if not _REF_RE.match(a.strip())]


def _symbolic(steps: list[_Step], symbols: dict[str, object]):
    import sympy

    values: list[object] = []
    for i, step in enumerate(steps):
        if step.op in TABLE_OPS:
            values.append(symbols[_step_tokens(step)[0]])
            continue
        args = []
        for a in step.args:
            m = _REF_RE.match(a.strip())
            if m:
                j = int(m.group(1))
                if j >= i:
                    raise ProgramError(f"reference #{j} to a later step")
                args.append(values[j])
            else:
                args.append(symbols[_arg_token(a)])
        x, y = args
        if step.op == "add":
            values.append(x + y)
        elif step.op == "subtract":
            values.append(x - y)
        elif step.op == "multiply":
            values.append(x * y)
        elif step.op == "divide":
            values.append(x / y)
        elif step.op == "exp":
            values.append(x**y)
        else:
            values.append(sympy.StrictGreaterThan(x, y))
    return sympy.simplify(values[-1])


def symbolic_equal(gold: str, pred: str) -> bool:
    """FinQA's ``equal_program`` without a time bound (use ``programs_equivalent``)."""
    import sympy

    g_steps = parse_program(gold)
    p_steps = parse_program(pred)
    symbols: dict[str, object] = {}
    for step in g_steps:
        for tok in _step_tokens(step):
            symbols.setdefault(tok, sympy.Symbol(f"a{len(symbols)}"))
    for step in p_steps:  # the prediction may only use the gold program's arguments
        if any(tok not in symbols for tok in _step_tokens(step)):
            return False
    return bool(_symbolic(g_steps, symbols) == _symbolic(p_steps, symbols))


def programs_equivalent(gold: str, pred: str) -> bool:
    """FinQA program accuracy, as its official evaluation (``equal_program`` in
    czyssrs/FinQA ``code/evaluate/evaluate.py``) defines it: every argument of the gold
    program becomes a symbol, the predicted program may use only those arguments (in any
    step, used or not), both programs become sympy expressions over the symbols (#n resolved)
    and are equal when their simplified forms are. So ``add(a, b)`` = ``add(b, a)`` and
    ``add(1, 2), add(#0, 3)`` = ``add(1, 3), add(#0, 2)``.

    Where df_ray is more lenient than the official string matching: numbers are identified
    by value (``5,829`` = ``5829``, ``const_4`` = ``4``) and table rows by their normalized
    name. Bounded in time on any thread (False when the comparison runs past
    ``EQUIVALENCE_TIMEOUT_S``); never raises.
    """
    from df_ray.core.parsing._bounded import ParseTimeout, call_bounded
    from df_ray.core.parsing.math_kind import warm

    try:
        warm()
        parse_program(gold)
        parse_program(pred)
        return bool(call_bounded(symbolic_equal, gold, pred, timeout_s=EQUIVALENCE_TIMEOUT_S))
    except (ProgramError, ParseTimeout, RecursionError):
        return False
    except Exception:
        return False


# ---------------------------------------------------------------- extraction from a model output

_OP_START_RE = re.compile(r"(?i)\b(?:" + "|".join(BINARY_OPS + TABLE_OPS) + r")\s*\(")
_CALL_RE = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_STEP_SEP_RE = re.compile(r"[^\S\n]*+(?:[,;][^\S\n]*+)?(?:\n\s*+(?:(?:\d{1,3}[.)]|[-*•])[^\S\n]++)?)?")
_MARKER_RE = re.compile(r"(?i)\b(?:final\s+)?(?:program|answer)\b\s*(?:is\s*)?[*_]*\s*[:=：][*_]*")
_NUMBER_ANS_RE = re.compile(r"(?<![\w#.])[-+]?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s?%)?")


def _looks_like_call(s: str, m: re.Match[str]) -> bool:
    """Whether ``name(`` starts a program step: a FinQA op, or an unknown op written like one
    (``percentage_change(a, b)``: a snake_case name, or arguments with ``,``/``#``/``const_``)."""
    name = m.group(1).lower()
    if name in BINARY_OPS or name in TABLE_OPS:
        return True
    inner = s[m.end() : m.end() + 200].split(")", 1)[0]
    return ("_" in name or "," in inner or "#" in inner or "const_" in inner) and not name.isdigit()


def read_program(s: str, *, known_ops_only: bool = False) -> str | None:
    """The whole program that starts at the first step in ``s`` (steps may be separated by
    commas, newlines or list bullets), as FinQA writes it: ``op(a, b), op(#0, c)``.

    A step that is never closed, or a trailing comma at the very end, is kept as written so
    that executing it fails (a truncated program is invalid, not shortened). None when ``s``
    has no step. ``known_ops_only`` ignores calls that are not FinQA operations (used for
    lines without a marker, where ``f(x)`` is prose).
    """
    start = None
    for m in _CALL_RE.finditer(s):
        if _OP_START_RE.match(s, m.start()) or (not known_ops_only and _looks_like_call(s, m)):
            start = m
            break
    if start is None:
        return None
    steps: list[str] = []
    pos = start.start()
    while True:
        m = _CALL_RE.match(s, pos)
        if m is None:
            break
        close = s.find(")", m.end())
        nxt_open = s.find("(", m.end())
        if close < 0 or (0 <= nxt_open < close and "\n" not in s[m.end():nxt_open]):
            steps.append(s[m.start():].strip())  # truncated or nested: fails to parse
            return ", ".join(steps)
        steps.append(s[m.start() : close + 1].strip())
        pos = close + 1
        sep = _STEP_SEP_RE.match(s, pos)
        after = sep.end() if sep else pos
        nxt = _CALL_RE.match(s, after)
        if nxt is None or not (_OP_START_RE.match(s, after) or _looks_like_call(s, nxt)):
            if s[pos:after].strip().startswith(",") and not s[after:].strip():
                steps.append("")  # "op(a, b)," and then nothing: cut off
                return ", ".join(steps)
            break
        pos = after
    return ", ".join(steps)


def _program_in(s: str) -> str | None:
    return read_program(s)


def extract_finqa_rule(text: str) -> tuple[str, str, float, str] | None:
    """``(what, extracted, quality, rule)`` with what in {"program", "number"}; None if nothing.

    Rules: ``program_marker`` (a program after ``Program:`` / ``Answer:``, read across lines,
    1.0), ``fenced_program`` (in a fenced block, 1.0), ``program_line`` (the last line that
    holds a program, 0.7), ``answer_number`` (a number or yes/no after ``Answer:``, 0.6),
    ``last_number`` (0.4). A program that is truncated or uses an unknown operation is
    returned as written: executing it fails, so the output is invalid.
    """
    body = strip_confidence_lines(squeeze(text))
    explicit: list[tuple[int, str, str]] = []
    marker_numbers: list[tuple[int, str]] = []
    for m in list(_MARKER_RE.finditer(body))[-50:]:
        line_end = body.find("\n", m.end())
        rest = body[m.end() : line_end if line_end >= 0 else len(body)]
        if not rest.strip() or rest.strip() in {"**", "*", "`", "```"}:
            nxt = body[(line_end + 1 if line_end >= 0 else len(body)):][:4000].lstrip("\n`")
            rest = nxt.split("\n", 1)[0]
            start = (line_end + 1 if line_end >= 0 else len(body))
        else:
            start = m.end()
        prog = read_program(rest)
        if prog:
            whole = read_program(body[start : start + 8000])
            explicit.append((m.start(), whole or prog, "program_marker"))
            continue
        yn = re.match(r"^[\s*_`$]*(yes|no)\b", rest, re.I)
        if yn:
            marker_numbers.append((m.start(), yn.group(1).lower()))
            continue
        num = _NUMBER_ANS_RE.search(rest)
        if num:
            marker_numbers.append((m.start(), num.group(0).strip()))
    if "```" in body or "~~~" in body:
        offset = 0
        for _lang, block, _closed in fenced_blocks(body):
            prog = read_program(block)
            pos = body.find(block, offset)
            offset = max(offset, pos)
            if prog:
                explicit.append((pos, prog, "fenced_program"))
    if explicit:
        _, prog, rule = max(explicit, key=lambda c: c[0])
        return "program", prog, 1.0, rule
    lines = body.split("\n")[-2000:]
    for i in range(len(lines) - 1, -1, -1):
        attempt = read_program(lines[i])
        if attempt and not read_program(lines[i], known_ops_only=True):
            # a line written as a program with an unknown operation: invalid, not a number
            return "program", attempt, 0.7, "program_line"
        if read_program(lines[i], known_ops_only=True):
            # read from the line where this program starts (it may continue on later lines)
            j = i
            while j > 0 and re.match(r"^\s*(?:[,;]\s*)?[A-Za-z_]+\s*\(", lines[j]) and \
                    read_program(lines[j - 1], known_ops_only=True) and \
                    re.search(r"\)\s*,?\s*$", lines[j - 1]):
                j -= 1
            prog = read_program("\n".join(lines[j:]), known_ops_only=True)
            return "program", prog or "", 0.7, "program_line"
    if marker_numbers:
        return "number", max(marker_numbers, key=lambda c: c[0])[1], 0.6, "answer_number"
    nums = list(_NUMBER_ANS_RE.finditer(body[-20000:]))
    if nums:
        return "number", nums[-1].group(0).strip(), 0.4, "last_number"
    return None


def extract_finqa(text: str) -> tuple[str, str, float] | None:
    """``(what, extracted, quality)`` with what in {"program", "number"}; None if nothing."""
    found = extract_finqa_rule(text)
    return None if found is None else found[:3]


def number_key(token: str) -> str | None:
    """Key of a bare numeric (or yes/no) answer, consistent with program_key; None if not one."""
    t = token.strip().strip("*_`").strip().rstrip(".").strip()
    if t.lower() in ("yes", "no"):
        return t.lower()
    t = t.replace(" ", "").replace("$", "")
    neg = re.fullmatch(r"\((.+)\)", t)
    try:
        v = parse_number(neg.group(1) if neg else t)
    except ProgramError:
        return None
    return program_key(-v if neg else v)


# ----------------------------------------------------------------------------- the kind


@dataclass(frozen=True)
class Options:
    """What a FinQA program runs on."""

    table: tuple[tuple[str, ...], ...] | None = option(None, "the table (rows of cells) programs read")


def parse(text: str, spec: ParseSpec) -> Found | Invalid:
    table = options_of(spec, Options).table
    found = extract_finqa_rule(text)
    if found is None:
        return Invalid("no answer found")
    what, extracted, q, rule = found
    if what == "program":
        try:
            return Found(program_key(execute_program(extracted, table)), q, extracted, rule)
        except ProgramError as e:
            return Invalid(f"program error: {e}", rule, extracted)
    key = number_key(extracted)
    if key is None:
        return Invalid("not a number", rule, extracted)
    return Found(key, q, extracted, rule)


def canonicalize(answer: str, spec: ParseSpec) -> str | None:
    table = options_of(spec, Options).table
    key = number_key(answer)
    if key is not None:
        return key
    try:
        return program_key(execute_program(answer, table))
    except ProgramError:
        return None


def words(spec: ParseSpec) -> AnswerWords:
    """What methods say about a FinQA program answer (``AnswerWords``)."""
    return AnswerWords(
        feedback_examples=tuple(FEEDBACK_EXAMPLES),
        noun='the program in the program language above (e.g., "subtract(5, 3), divide(#0, 3)")',
        field_rule=('Only place the program in the program language above in the "answer" '
                    'field.'),
        default_answer="0",  # ReConcile's rule for numeric answers
        critique_focus=("Check that every number is taken from the right row, column and year "
                        "of the table or text, that each program step uses the right operation "
                        "and step reference, and that the program's result answers the question "
                        "(units, percentages as ratios)."))

#: Self-Refine's few-shot feedback examples for this kind (df_ray.methods.self_refine_fewshot:
#: (question, solution, [(step, review)], the fixed solution or None when it is right)),
#: written for this kind's answer format; what ``words`` gives as feedback_examples.
FEEDBACK_EXAMPLES = [
    ("Read the following excerpt of a financial report and answer the question.\n\nTable:\n"
     "| | 2019 | 2018 |\n| revenue | 1200 | 1000 |\n\nQuestion: what was the percentage "
     "change in revenue from 2018 to 2019?",
     "The change is 1200 - 1000 = 200; divided by the 2019 revenue.\n"
     "Answer: subtract(1200, 1000), divide(#0, 1200)",
     [("The change is 1200 - 1000 = 200.", "looks good"),
      ("divided by the 2019 revenue: divide(#0, 1200)",
       "wrong! A percentage change is relative to the earlier year, 2018: divide by 1000.")],
     "The change is 1200 - 1000 = 200; relative to the 2018 revenue of 1000 that is 0.2.\n"
     "Answer: subtract(1200, 1000), divide(#0, 1000)"),
    ("Read the following excerpt of a financial report and answer the question.\n\nTable:\n"
     "| | 2019 |\n| net income | 300 |\n| shares outstanding | 150 |\n\nQuestion: what was "
     "the net income per share in 2019?",
     "Net income per share is net income divided by shares outstanding: 300 / 150 = 2.\n"
     "Answer: divide(300, 150)",
     [("Net income per share is net income divided by shares outstanding.", "looks good"),
      ("Answer: divide(300, 150)", "looks good: both numbers are from the 2019 column")],
     None),
]
