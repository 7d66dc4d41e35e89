"""``parsing.warm(kind)``: an answer kind's first-use cost paid up front (the pipeline's stage
does it while its first calls run)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from df_ray.core import parsing
from df_ray.core.types import ParseSpec


def test_warming_math_imports_math_verify_and_a_kind_without_warm_is_a_no_op():
    code = ("import sys; from df_ray.core import parsing; "
            "assert 'math_verify' not in sys.modules; parsing.warm('code'); "
            "assert 'math_verify' not in sys.modules; parsing.warm('math'); "
            "assert 'math_verify' in sys.modules and 'sympy' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_warming_an_unknown_kind_names_the_registered_ones():
    with pytest.raises(parsing.UnknownKindError, match="registered: math"):
        parsing.warm("nope")


@pytest.mark.parametrize("spec", [
    ParseSpec("math"), ParseSpec("choice", n_options=4),
    ParseSpec("code", entry_point="add"), ParseSpec("finqa"),
    ParseSpec("label", labels=("Yes", "No"))], ids=lambda s: s.kind)
def test_every_builtin_kind_has_an_example_answer_it_reads_as_valid(spec):
    """What ``df-ray show``'s stand-ins answer: the kind's own ``example`` (code), or one of
    its words' answers in a usual form (the others)."""
    for seed in range(3):
        text = parsing.example_output(spec, seed)
        assert parsing.parse(text, spec).valid, text


def test_a_kind_with_nothing_to_draw_from_has_no_example(monkeypatch):
    monkeypatch.setitem(parsing.KINDS, "opaque", "df_ray.core.parsing.math_kind")
    from df_ray.core.parsing import math_kind

    monkeypatch.setattr(math_kind, "words", lambda spec: parsing.AnswerWords())
    assert parsing.example_output(ParseSpec("opaque")) is None
