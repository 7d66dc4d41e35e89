"""Code answers: the program is extracted and keyed by its normalized (runnable) source."""

from __future__ import annotations

import pytest

from df_ray.core.parsing import canonicalize, parse
from df_ray.core.types import ParseSpec

SPEC = ParseSpec("code", entry_point="add")
ANY = ParseSpec("code")

BASE = "def add(a, b):\n    return a + b\n"
VARIANTS = [
    BASE,
    'def add(a, b):\n    """Add two numbers."""\n    return a + b\n',
    "def add(a,b):\n\n    # sum them\n    return a+b   # done\n",
    "def add(a, b):\n    return (a + b)\n",
    'def add(a, b):\n    return a + b\n\nif __name__ == "__main__":\n    print(add(1, 2))\n',
    "\n\n# helper\ndef add(a, b):\n        return a + b\n",
]


@pytest.mark.parametrize("code", VARIANTS)
def test_formatting_comments_docstrings_do_not_change_the_key(code: str) -> None:
    assert canonicalize(code, SPEC) == canonicalize(BASE, SPEC)
    text = f"Here is my solution:\n```python\n{code}```\nIt adds numbers."
    obs = parse(text, SPEC)
    assert obs.valid and obs.answer == canonicalize(BASE, SPEC)
    assert obs.extracted == code
    assert obs.quality == 1.0


def test_key_is_runnable_code() -> None:
    key = canonicalize('def add(a, b):\n    """doc"""\n    return a + b  # c\n', SPEC)
    ns: dict = {}
    exec(key, ns)
    assert ns["add"](2, 3) == 5


@pytest.mark.parametrize(
    ("text", "quality"),
    [
        (f"```python\n{BASE}```", 1.0),
        (f"```py\n{BASE}```", 1.0),
        (f"```\n{BASE}```", 1.0),
        (f"~~~python\n{BASE}~~~", 1.0),
        (f"```python\n{BASE}", 1.0),  # unclosed final fence (truncated output)
        (f"```python\nimport math\n```\nThen:\n```python\n{BASE}```\n```python\nprint(add(1, 2))\n```", 1.0),
        (BASE, 0.7),
        (f"Sure! Here's the function.\n\n{BASE}\nThis returns the sum.", 0.5),
        (f"```python\n{BASE}```\nConfidence: 0.9", 1.0),
    ],
)
def test_extraction(text: str, quality: float) -> None:
    obs = parse(text, SPEC)
    assert obs.valid, obs
    assert obs.answer == canonicalize(BASE, SPEC)
    assert obs.quality == pytest.approx(quality)


def test_prefers_last_block_defining_entry_point() -> None:
    text = ("```python\ndef add(a, b):\n    return a - b\n```\nOops, fixed:\n"
            f"```python\n{BASE}```\nUsage:\n```python\nadd(1, 2)\n```")
    assert parse(text, SPEC).answer == canonicalize(BASE, SPEC)


def test_different_programs_have_different_keys() -> None:
    other = "def add(a, b):\n    return b + a\n"
    assert canonicalize(other, SPEC) != canonicalize(BASE, SPEC)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "I don't know how to write this.",
        "```python\ndef add(a, b)\n    return a + b\n```",  # syntax error
        "```python\ndef subtract(a, b):\n    return a - b\n```",  # entry point missing
        "```python\nThe answer is \\boxed{5}\n```",  # a math answer inside a code block
        "```python\n\x00def add(a, b): return a+b\n```",
        "```python\n" + "(" * 10_000 + "\n```",
        "def " * 60_000,
    ],
    ids=lambda t: repr(t[:25]),
)
def test_invalid_code(text: str) -> None:
    obs = parse(text, SPEC)
    assert not obs.valid and obs.answer is None


def test_boxed_in_comment_is_just_code() -> None:
    text = f"```python\n# the answer is \\boxed{{5}}\n{BASE}```"
    assert parse(text, SPEC).answer == canonicalize(BASE, SPEC)


def test_without_entry_point_any_program() -> None:
    obs = parse("```python\nx = 1\n```", ANY)
    assert obs.valid and obs.answer == "x = 1"


def test_canonicalize_accepts_fenced_gold() -> None:
    assert canonicalize(f"```python\n{BASE}```", SPEC) == canonicalize(BASE, SPEC)
    assert canonicalize("def sub(a, b): return a - b", SPEC) is None
