"""``parsing.warm(kind)``: an answer kind's first-use cost paid up front (the pipeline's stage
does it while its first calls run)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from df_ray.core import parsing


def test_warming_math_imports_math_verify_and_a_kind_without_warm_is_a_no_op():
    code = ("import sys; from df_ray.core import parsing; "
            "assert 'math_verify' not in sys.modules; parsing.warm('code'); "
            "assert 'math_verify' not in sys.modules; parsing.warm('math'); "
            "assert 'math_verify' in sys.modules and 'sympy' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_warming_an_unknown_kind_names_the_registered_ones():
    with pytest.raises(parsing.UnknownKindError, match="registered: math"):
        parsing.warm("nope")
