"""Code answers (HumanEval): extract the program, key it by its normalized source.

Extraction: the last fenced block that defines ``spec.entry_point`` (else the last python /
unlabeled fenced block that parses) at quality 1.0; otherwise the whole text when it is valid
Python (0.7), else the span from the first ``def``/``import`` line to the end, trimmed of
trailing prose (0.5). When ``entry_point`` is set, a program that does not define it is invalid.

Key: ``ast.unparse`` of the module without docstrings and ``if __name__ == "__main__":``
blocks, so comments, blank lines and formatting do not matter and the key still runs.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

from df_ray.core.parsing._text import fenced_blocks
from df_ray.core.parsing.kinds import AnswerWords, Found, Invalid, option, options_of
from df_ray.core.types import ParseSpec

_PY_LANGS = {"", "python", "python3", "py", "py3", "python3.10", "python3.11", "ipython", "pycon"}


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                body.pop(0)
                if not body and not isinstance(node, ast.Module):
                    body.append(ast.Pass())


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If):
        return False
    t = node.test
    return (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "__name__"
            and len(t.comparators) == 1 and isinstance(t.comparators[0], ast.Constant)
            and t.comparators[0].value == "__main__")


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except Exception:  # SyntaxError, ValueError (null bytes), RecursionError, MemoryError
        return None


@functools.lru_cache(maxsize=16384)
def normalize_code(code: str) -> str | None:
    """Normalized source (runnable), or None on a syntax error / empty program."""
    tree = _parse(code)
    if tree is None:
        return None
    try:
        _strip_docstrings(tree)
        tree.body = [n for n in tree.body if not _is_main_guard(n)]
        if not tree.body:
            return None
        return ast.unparse(tree)
    except Exception:
        return None


def defines(code: str, name: str) -> bool:
    """Whether the module defines ``name`` at top level (function, class or assignment)."""
    tree = _parse(code)
    if tree is None:
        return False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def _plain_code(text: str) -> str | None:
    lines = text.split("\n")[:5000]
    start = next((i for i, ln in enumerate(lines)
                  if re.match(r"^(?:def |async def |class |import |from \S+ import |@)", ln)), None)
    if start is None:
        return None
    end = len(lines)
    while end > start:
        candidate = "\n".join(lines[start:end])
        if _parse(candidate) is not None:
            return candidate
        end -= 1
        if len(lines) - end > 200:
            break
    return None


def extract_code(text: str, entry_point: str | None) -> tuple[str, float] | None:
    """``(code as written, quality)`` or None when no program can be found."""
    blocks = [(lang, body) for lang, body, _closed in fenced_blocks(text)
              if lang in _PY_LANGS and body.strip()]
    if blocks:
        if entry_point:
            for _lang, body in reversed(blocks):
                if defines(body, entry_point):
                    return body, 1.0
        for _lang, body in reversed(blocks):
            if _parse(body) is not None:
                return body, 1.0
        return blocks[-1][1], 1.0  # the (broken) program the agent gave: invalid downstream
    if re.search(r"(?m)^(?:def |async def |class |import |from )", text) is None:
        return None
    if _parse(text) is not None:
        return text, 0.7
    code = _plain_code(text)
    if code is not None:
        return code, 0.5
    return None


# ----------------------------------------------------------------------------- the kind


@dataclass(frozen=True)
class Options:
    """What a code answer must be."""

    entry_point: str | None = option(None, "the function an answer defines (None: any)")


def parse(text: str, spec: ParseSpec) -> Found | Invalid:
    entry_point = options_of(spec, Options).entry_point
    found = extract_code(text, entry_point)
    if found is None:
        return Invalid("no code found")
    code, q = found
    key = normalize_code(code)
    if key is None:
        return Invalid("code does not parse", "code", code)
    if entry_point and not defines(code, entry_point):
        return Invalid(f"code does not define {entry_point}", "code", code)
    return Found(key, q, code, "code")


def canonicalize(answer: str, spec: ParseSpec) -> str | None:
    entry_point = options_of(spec, Options).entry_point
    if entry_point and not defines(answer, entry_point):
        found = extract_code(answer, entry_point)
        if found is None or not defines(found[0], entry_point):
            return None
        answer = found[0]
    return normalize_code(answer)


def example(spec: ParseSpec, seed: int) -> str:
    """A program answer (a stand-in engine's): a fenced function of the entry point that
    returns ``seed``."""
    name = options_of(spec, Options).entry_point or "solution"
    return f"```python\ndef {name}(*args):\n    return {int(seed)}\n```"


def words(spec: ParseSpec) -> AnswerWords:
    """What methods say about a program answer (``AnswerWords``): no program is a valid answer
    by chance, so there is no random one."""
    return AnswerWords(
        feedback_examples=tuple(FEEDBACK_EXAMPLES),
        noun="the completed Python function code",
        field_rule='Only place the complete Python function in the "answer" field.',
        critique_focus=("Trace the function on the docstring's examples and on edge cases "
                        "(empty input, zero, negatives, duplicates), and check the signature "
                        "and return type."))

#: Self-Refine's few-shot feedback examples for this kind (df_ray.methods.self_refine_fewshot:
#: (question, solution, [(step, review)], the fixed solution or None when it is right)),
#: written for this kind's answer format; what ``words`` gives as feedback_examples.
FEEDBACK_EXAMPLES = [
    ("Complete the following Python function.\n\n```python\ndef count_evens(nums: list) -> "
     "int:\n    \"\"\"Return how many numbers in nums are even.\n    >>> count_evens([1, 2, "
     "4])\n    2\n    \"\"\"\n```",
     "```python\ndef count_evens(nums: list) -> int:\n    count = 0\n    for n in nums:\n"
     "        if n % 2 == 1:\n            count += 1\n    return count\n```",
     [("count = 0\nfor n in nums:", "looks good"),
      ("if n % 2 == 1:\n    count += 1",
       "wrong! This counts the odd numbers. count_evens([1, 2, 4]) returns 1, not 2. The "
       "test must be n % 2 == 0."),
      ("return count", "looks good")],
     "```python\ndef count_evens(nums: list) -> int:\n    count = 0\n    for n in nums:\n"
     "        if n % 2 == 0:\n            count += 1\n    return count\n```"),
    ("Complete the following Python function.\n\n```python\ndef last_char(s: str) -> str:\n"
     "    \"\"\"Return the last character of s, or '' for an empty string.\n    >>> "
     "last_char('abc')\n    'c'\n    \"\"\"\n```",
     "```python\ndef last_char(s: str) -> str:\n    return s[-1] if s else ''\n```",
     [("return s[-1] if s else ''",
       "looks good: last_char('abc') is 'c' and last_char('') is ''")],
     None),
]
