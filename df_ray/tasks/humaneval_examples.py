"""The inputs of a HumanEval prompt's own examples, for keying programs by behaviour.

Only the prompt is read (the signature and docstring of the entry point), never the hidden
tests (``Sample.meta["test"]``). The 164 HumanEval prompts write their examples in these
forms, each read here:

- calls: ``>>> f(x)`` lines, ``f(x) == y``, ``f(x) ➞ y``, ``f(x) => y``, ``f(x) returns y``,
  ``f(x) should return y``, ``f(x) = y``, also across lines (a call's parentheses may span
  them). The function named is the entry point, or (at the start of a line) another name
  called with as many arguments as the entry point takes (HumanEval/81's docstring calls
  ``grade_equation``). Each argument must be a Python literal; in a call of the entry point
  bare words that are not parameter names stand for strings (HumanEval/80 writes
  ``is_happy(abcd)``; HumanEval/46's ``fib4(n) = ...`` is a definition).
- ``Input: ...`` (up to ``Output:``): one literal, a tuple of the arguments, or
  ``name = literal, ...`` keyword form (``arr = [1, 2], k = 3``).
- ``For lst = [...] the output should be ...``, ``arr = [...]`` lines: a parameter's name
  assigned a literal (functions of one parameter).

Inputs are deduplicated in order. When a prompt gives fewer than ``MIN_INPUTS`` (3), simple
inputs are derived deterministically from the parameters' annotations (or the types of the
parsed examples' values, else ``int``): see :func:`derived_inputs`.

Standard library only.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["MIN_INPUTS", "CallInput", "PromptInputs", "derived_inputs", "parse_examples",
           "prompt_inputs"]

MIN_INPUTS = 3


@dataclass(frozen=True, slots=True)
class CallInput:
    """One call's arguments: positional values and keyword values (plain Python literals)."""

    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()

    def source(self) -> str:
        """The arguments as Python source (``repr`` of each value): ``1, 'a', k=[2]``."""
        parts = [_literal_repr(a) for a in self.args]
        parts += [f"{k}={_literal_repr(v)}" for k, v in self.kwargs]
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class PromptInputs:
    """What a prompt yields: its examples' inputs, then any derived ones."""

    inputs: tuple[CallInput, ...]
    parsed: int
    derived: int


def _literal_repr(v: Any) -> str:
    # repr round-trips every literal except the non-finite floats
    if isinstance(v, float) and v != v:
        return "float('nan')"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "float('inf')" if v > 0 else "-float('inf')"
    return repr(v)


@dataclass(frozen=True)
class _Signature:
    entry: str
    params: tuple[str, ...]
    annotations: tuple[ast.expr | None, ...]
    required: int
    docstring: str


def _signature(prompt: str, entry: str) -> _Signature | None:
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry:
            a = node.args
            params = [p for p in [*a.posonlyargs, *a.args]]
            doc = ast.get_docstring(node, clean=False)
            if doc is None:  # a statement before the docstring (HumanEval/115's import)
                doc = "\n".join(n.value.value for n in node.body
                                if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                                and isinstance(n.value.value, str))
            return _Signature(entry, tuple(p.arg for p in params),
                              tuple(p.annotation for p in params),
                              len(params) - len(a.defaults), doc)
    return None


# ------------------------------------------------------------------------------ scanning


def _balanced_end(text: str, start: int) -> int | None:
    """The index just past the bracket that closes ``text[start]`` (skipping strings)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = [pairs[text[start]]]
    i = start + 1
    quote = None
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in pairs:
            stack.append(pairs[ch])
        elif ch in ")]}":
            if not stack or ch != stack.pop():
                return None
            if not stack:
                return i + 1
        i += 1
    return None


def _literal(node: ast.expr, *, bare_names: bool) -> tuple[bool, Any]:
    if bare_names and isinstance(node, ast.Name) and node.id not in ("None", "True", "False"):
        return True, node.id
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _call_input(inner: str, sig: _Signature, *, bare_names: bool = False) -> CallInput | None:
    """``inner`` (the text between a call's parentheses) as arguments, or None; with
    ``bare_names`` a call whose arguments are all bare words takes them as strings."""
    try:
        call = ast.parse(f"_f({inner})", mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not isinstance(call, ast.Call) or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    n = len(call.args) + len(call.keywords)
    if not (sig.required <= n <= len(sig.params)):
        return None
    if any(k.arg is None or k.arg not in sig.params for k in call.keywords):
        return None
    # a bare word that names a parameter is a definition (``fib4(n) = ...``), not an example
    bare = bare_names and bool(call.args) and all(
        isinstance(a, ast.Name) and a.id not in sig.params for a in call.args)
    args = []
    for a in call.args:
        ok, v = _literal(a, bare_names=bare)
        if not ok:
            return None
        args.append(v)
    kwargs = []
    for k in call.keywords:
        ok, v = _literal(k.value, bare_names=False)
        if not ok:
            return None
        kwargs.append((str(k.arg), v))
    return CallInput(tuple(args), tuple(kwargs))


_LINE_START_CALL = re.compile(
    r"^[ \t]*(?:>>>\s*|\*\s*|-\s*)?(?:(?:assert|for|print)\s+)?([A-Za-z_]\w*)\s*\(", re.M)
_BUILTINS = frozenset(dir(builtins))


def _calls(doc: str, sig: _Signature) -> list[tuple[int, CallInput]]:
    out = []
    starts: dict[int, bool] = {}  # where a call's "(" is -> it calls the entry point
    for m in _LINE_START_CALL.finditer(doc):
        if m.group(1) != sig.entry and m.group(1) not in _BUILTINS:
            starts[m.end() - 1] = False
    for m in re.finditer(rf"(?<![\w.]){re.escape(sig.entry)}\s*\(", doc):
        starts[m.end() - 1] = True
    for open_at in sorted(starts):
        end = _balanced_end(doc, open_at)
        if end is None:
            continue
        got = _call_input(doc[open_at + 1:end - 1], sig, bare_names=starts[open_at])
        if got is not None:
            out.append((open_at, got))
    return out


_INPUT = re.compile(r"^[ \t]*Input\s*:\s*(.*?)(?=^[ \t]*Output\s*:|\Z)", re.M | re.S)


def _io_inputs(doc: str, sig: _Signature) -> list[tuple[int, CallInput]]:
    out = []
    for m in _INPUT.finditer(doc):
        text = " ".join(m.group(1).split())
        if not text:
            continue
        got = None
        try:
            value = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            got = _call_input(text, sig)  # the keyword form: arr = [..], k = 3
            if got is None:  # one "name : value" line per parameter (HumanEval/115)
                pairs = re.findall(r"^[ \t]*([A-Za-z_]\w*)\s*:\s*(.+?)\s*$", m.group(1), re.M)
                if pairs and all(k in sig.params for k, _ in pairs):
                    got = _call_input(", ".join(f"{k}={v}" for k, v in pairs), sig)
                elif pairs:  # named otherwise than the parameters: in their order
                    got = _call_input(", ".join(v for _, v in pairs), sig)
        else:
            if len(sig.params) == 1:
                got = CallInput((value,))
            elif isinstance(value, tuple) and sig.required <= len(value) <= len(sig.params):
                got = CallInput(tuple(value))
        if got is not None:
            out.append((m.start(), got))
    return out


def _assignment_inputs(doc: str, sig: _Signature) -> list[tuple[int, CallInput]]:
    """``For lst = [...] the output ...`` / ``arr = [...]`` / ``For s = "ab", c = "a" ...``:
    the longest start of the line after the first parameter's name that reads as keyword
    arguments."""
    if not sig.params:
        return []
    name = re.escape(sig.params[0])
    out = []
    for m in re.finditer(rf"^[ \t]*(?:[Ff]or\s+)?(?={name}\s*=[^=])", doc, re.M):
        line = doc[m.end():].split("\n", 1)[0]
        if line.rstrip().endswith(("[", "(", "{")) or line.count("[") > line.count("]"):
            end = _balanced_end(doc, doc.index("=", m.end()) + 1 + (
                len(doc[doc.index("=", m.end()) + 1:]) -
                len(doc[doc.index("=", m.end()) + 1:].lstrip())))
            line = doc[m.end():end] if end else line
        cuts = sorted({i for i, ch in enumerate(line) if ch in " ,"} | {len(line)},
                      reverse=True)
        for cut in cuts:
            got = _call_input(line[:cut].rstrip(" ,"), sig)
            if got is not None and not got.args:
                out.append((m.start(), got))
                break
    return out


def parse_examples(prompt: str, entry_point: str) -> list[CallInput]:
    """The inputs of the examples in the entry point's docstring, in order, deduplicated."""
    sig = _signature(prompt, entry_point)
    if sig is None:
        return []
    found = (_calls(sig.docstring, sig) + _io_inputs(sig.docstring, sig)
             + _assignment_inputs(sig.docstring, sig))
    seen: set[str] = set()
    out = []
    for _, got in sorted(found, key=lambda f: f[0]):
        key = got.source()
        if key not in seen:
            seen.add(key)
            out.append(got)
    return out


# ------------------------------------------------------------------------------ derived

_SIMPLE: dict[str, tuple[Any, ...]] = {
    "int": (0, 1, 2, 3, 5, 10, -1),
    "float": (0.0, 1.5, 2.0, -1.0, 3.25),
    "str": ("", "a", "abc", "Hello World", "aab"),
    "bool": (True, False, True),
    "list[int]": ([], [1], [1, 2, 3], [3, 1, 2], [5, -2, 0, 5]),
    "list[float]": ([], [1.0], [1.0, 2.5, 3.0], [3.5, -1.0], [2.0, 2.0]),
    "list[str]": ([], ["a"], ["ab", "c"], ["hello", "world", "a"], ["x", "x"]),
    "list": ([], [1], [1, 2, 3], [3, 1, 2], [5, -2, 0, 5]),
    "list[list[int]]": ([], [[1]], [[1, 2], [3]], [[0, 1, 0], [1, 1, 1]], [[2], []]),
    "tuple": ((), (1,), (1, 2)),
    "dict": ({}, {"a": 1}, {"a": 1, "b": 2}),
}


def _type_name(annotation: ast.expr | None) -> str | None:
    if annotation is None:
        return None
    text = ast.unparse(annotation).replace("typing.", "").replace(" ", "")
    text = re.sub(r"\bList\b", "list", text)
    text = re.sub(r"\bDict\b.*", "dict", text)
    text = re.sub(r"\bTuple\b.*", "tuple", text)
    text = re.sub(r"^dict\[.*", "dict", text)
    text = re.sub(r"^tuple\[.*", "tuple", text)
    text = text.replace("Optional[", "").rstrip("]") if text.startswith("Optional[") else text
    if text.startswith("Union[") or "|" in text:
        return None
    if text == "list[Any]":
        return "list"
    return text if text in _SIMPLE else None


def _value_type(v: Any) -> str | None:
    if isinstance(v, bool):
        return "bool"
    for t, name in ((int, "int"), (float, "float"), (str, "str"), (tuple, "tuple"),
                    (dict, "dict")):
        if isinstance(v, t):
            return name
    if isinstance(v, list):
        inner = {_value_type(x) for x in v}
        if len(inner) == 1 and (name := f"list[{inner.pop()}]") in _SIMPLE:
            return name
        return "list"
    return None


_MISSING = object()


def _argument(e: CallInput, pos: int, param: str) -> Any:
    if len(e.args) > pos:
        return e.args[pos]
    return dict(e.kwargs).get(param, _MISSING)


_STR_NAMES = re.compile(r"^(s|str|string|text|txt|word|sentence|message|name|file_?name|"
                        r"date|planet\d*|class_name|a|b)$")
_LIST_NAMES = re.compile(r"(list|lst|arr|array|numbers|nums|grid|operand|operator|l\d?$|"
                         r"values|words|extensions)", re.I)


def _name_type(param: str) -> str:
    """A parameter's type guessed from its name alone (no annotation, no example)."""
    if _LIST_NAMES.search(param):
        return "list[int]"
    if _STR_NAMES.match(param) and param not in ("a", "b"):
        return "str"
    return "int"


def derived_inputs(prompt: str, entry_point: str, examples: list[CallInput],
                   count: int) -> list[CallInput]:
    """``count`` simple inputs from the parameters' annotations: the i-th input takes each
    parameter's i-th simple value of its type (the type of the examples' values where there
    is no annotation, else ``int``), skipping inputs equal to an example's. Deterministic."""
    sig = _signature(prompt, entry_point)
    if sig is None or count <= 0:
        return []
    types = []
    for pos, (param, ann) in enumerate(zip(sig.params, sig.annotations, strict=True)):
        t = _type_name(ann)
        if t is None:
            seen = [_value_type(_argument(e, pos, param)) for e in examples]
            t = next((s for s in seen if s is not None), None) or _name_type(param)
        types.append(t)
    taken = {e.source() for e in examples}
    out: list[CallInput] = []
    longest = max((len(_SIMPLE[t]) for t in types), default=0)
    for i in range(longest):
        got = CallInput(tuple(_SIMPLE[t][(i + j) % len(_SIMPLE[t])]
                              for j, t in enumerate(types)))
        if got.source() in taken:
            continue
        taken.add(got.source())
        out.append(got)
        if len(out) == count:
            break
    return out


def prompt_inputs(prompt: str, entry_point: str, minimum: int = MIN_INPUTS) -> PromptInputs:
    """The examples' inputs, topped up with derived ones to at least ``minimum``."""
    examples = parse_examples(prompt, entry_point)
    extra = derived_inputs(prompt, entry_point, examples, minimum - len(examples))
    return PromptInputs(tuple(examples + extra), len(examples), len(extra))
