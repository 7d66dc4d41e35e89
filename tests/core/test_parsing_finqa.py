"""FinQA: the DSL executor (hand-computed values), value keys, program equality, parsing."""

from __future__ import annotations

import pytest

from df_ray.core.parsing import canonicalize, parse
from df_ray.core.parsing.finqa_kind import (
    ProgramError,
    execute_program,
    program_key,
    programs_equivalent,
)
from df_ray.core.types import ParseSpec

TABLE = (
    ("", "2019", "2018", "2017"),
    ("Net revenue", "$ 1,200", "$ 1,000", "$ 800"),
    ("operating expenses", "(300)", "250", "200"),
    ("Growth rate", "5%", "10%", "15%"),
    ("Notes", "n/a", "see below", ""),
)
SPEC = ParseSpec("finqa", table=TABLE)

EXECUTIONS = [
    ("subtract(5829, 5735), divide(#0, 5735)", 94 / 5735),
    ("add(1, 2)", 3.0),
    ("subtract(1, 2)", -1.0),
    ("multiply(3, 4)", 12.0),
    ("divide(1, 4)", 0.25),
    ("exp(2, 10)", 1024.0),
    ("greater(5, 3)", "yes"),
    ("greater(3, 5)", "no"),
    ("greater(3, 3)", "no"),
    ("add(1,234, 5)", 1239.0),
    ("add(1, 234)", 235.0),
    ("add(1,2)", 3.0),
    ("multiply(12%, 200)", 24.0),
    ("add($5, $1,000)", 1005.0),
    ("multiply(const_100, 0.5)", 50.0),
    ("multiply(const_1000, 2)", 2000.0),
    ("multiply(const_m1, 7)", -7.0),
    ("add(const_2, const_3)", 5.0),
    ("subtract(10, 4), multiply(#0, 3), add(#1, #0)", 24.0),
    ("subtract(-5, -7)", 2.0),
    ("divide(1.5, 0.5)", 3.0),
    ("table_max(net revenue, none)", 1200.0),
    ("table_min(Net Revenue, none)", 800.0),
    ("table_sum(NetRevenue, none)", 3000.0),
    ("table_average(net  revenue, none)", 1000.0),
    ("table_min(operating expenses, none)", -300.0),
    ("table_average(growth rate, none)", 0.1),
    ("table_max(net revenue)", 1200.0),
    ("table_sum(net revenue, none), divide(#0, const_3)", 1000.0),
    ("ADD(1, 1)", 2.0),
    ("subtract(5829, 5735), divide(#0, 5735), EOF", 94 / 5735),
    ("subtract(5829, 5735), divide(#0, 5735).", 94 / 5735),
]


@pytest.mark.parametrize(("program", "value"), EXECUTIONS)
def test_execute_program(program: str, value: float | str) -> None:
    got = execute_program(program, TABLE)
    if isinstance(value, str):
        assert got == value
    else:
        assert got == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize(
    "program",
    ["", "add(1)", "add(1, 2, 3)", "foo(1, 2)", "add(1, 2) subtract(3, 4)", "add(#1, 2)",
     "add(#0, 2)", "divide(1, 0)", "divide(1, subtract(2, 2))", "add(x, 2)", "exp(10, 100000)",
     "exp(10, 400)", "greater(1, 2), add(#0, 1)", "table_max(unknown row, none)",
     "table_max(notes, none)", "add(1, 2", "add(1, 2)) ", "subtract(5829, 5735), divide(#0, 5735) EOF x",
     "add(1, 2)" + ", add(#0, 1)" * 100, "add(1%%, 2)", "add(1e5, 2)"],
)
def test_malformed_programs_raise(program: str) -> None:
    with pytest.raises(ProgramError):
        execute_program(program, TABLE)


def test_program_error_is_value_error() -> None:
    assert issubclass(ProgramError, ValueError)


def test_table_ops_need_a_table() -> None:
    with pytest.raises(ProgramError):
        execute_program("table_max(net revenue, none)")


@pytest.mark.parametrize(
    ("value", "key"),
    [(94 / 5735, "0.01639"), (0.5, "0.5"), (3.0, "3"), (-0.0000001, "0"), (1234.567891, "1234.56789"),
     ("yes", "yes"), ("No", "no"), (-2.5, "-2.5"), (1e20, "100000000000000000000"), (0.000005, "0.00001")],
)
def test_program_key(value: float | str, key: str) -> None:
    assert program_key(value) == key


EQUIVALENT = [
    ("add(1, 2)", "add(2, 1)", True),
    ("multiply(3, 4)", "multiply(4, 3)", True),
    ("subtract(1, 2)", "subtract(2, 1)", False),
    ("divide(1, 2)", "divide(2, 1)", False),
    ("subtract(5829, 5735), divide(#0, 5735)", "subtract(5829, 5735), divide(#0, 5735)", True),
    ("subtract(5,829, 5735), divide(#0, 5735)", "subtract(5829, 5735), divide(#0, 5735)", True),
    ("add(1, 2), multiply(#0, 3)", "add(2, 1), multiply(3, #0)", True),
    # the official rule: the prediction may use only the gold program's arguments, in any step
    ("add(1, 2), multiply(#0, 3)", "multiply(3, 5), add(2, 1), multiply(#1, 3)", False),
    ("add(1, 2), multiply(#0, 3)", "multiply(3, 1), add(2, 1), multiply(#1, 3)", True),
    # symbolic, not structural: (a + b) + c = (a + c) + b
    ("add(1, 2), add(#0, 3)", "add(1, 3), add(#0, 2)", True),
    ("subtract(5829, 5735), divide(#0, 5735)", "divide(5829, 5735), subtract(#0, const_1)", False),
    ("subtract(5829, 5735), divide(#0, 5735), multiply(#1, const_100)",
     "subtract(5829, 5735), multiply(#0, const_100), divide(#1, 5735)", True),
    ("add(1, 2), add(#0, 3)", "add(1, 2)", False),
    ("add(1, 2), multiply(#0, 3)", "multiply(3, 3)", False),
    ("subtract(10, 4), divide(#0, 4)", "subtract(10, 4), divide(#0, const_4)", True),
    ("table_max(Net Revenue, none)", "table_max(net revenue, none)", True),
    ("table_max(net revenue, none)", "table_min(net revenue, none)", False),
    ("greater(1, 2)", "greater(2, 1)", False),
    ("add(1, 2)", "add(1, 2", False),
    ("", "", False),
]


@pytest.mark.parametrize(("a", "b", "same"), EQUIVALENT)
def test_programs_equivalent(a: str, b: str, same: bool) -> None:
    assert programs_equivalent(a, b) is same


PARSES = [
    ("Program: subtract(5829, 5735), divide(#0, 5735)", "0.01639", 1.0),
    ("The change is 94.\nAnswer: subtract(5829, 5735), divide(#0, 5735)", "0.01639", 1.0),
    ("**Program:** `subtract(5829, 5735), divide(#0, 5735)`", "0.01639", 1.0),
    ("```\nsubtract(5829, 5735), divide(#0, 5735)\n```", "0.01639", 1.0),
    ("```\nsubtract(5829, 5735),\ndivide(#0, 5735)\n```", "0.01639", 1.0),
    ("First we subtract.\nsubtract(5829, 5735), divide(#0, 5735)", "0.01639", 0.7),
    ("Program: table_sum(net revenue, none)\nAnswer: 3000", "3000", 1.0),
    ("Program: subtract(5829, 5735), divide(#0, 5735)\nAnswer: 1.6%", "0.01639", 1.0),
    ("Program: greater(5, 3)", "yes", 1.0),
    ("Answer: 1.6%", "0.016", 0.6),
    ("Answer: $1,234.50", "1234.5", 0.6),
    ("Answer: yes", "yes", 0.6),
    ("The revenue grew from 800 to 1200, i.e. by 400", "400", 0.4),
    ("Program: add(1, 2)\nConfidence: 0.8", "3", 1.0),
]


@pytest.mark.parametrize(("text", "key", "quality"), PARSES)
def test_parse_finqa(text: str, key: str, quality: float) -> None:
    obs = parse(text, SPEC)
    assert obs.valid, obs
    assert obs.answer == key
    assert obs.quality == pytest.approx(quality)


def test_extracted_is_the_program() -> None:
    obs = parse("Program: subtract(5829, 5735), divide(#0, 5735)\nConfidence: 0.8", SPEC)
    assert obs.extracted == "subtract(5829, 5735), divide(#0, 5735)"
    assert obs.confidence == pytest.approx(0.8)


@pytest.mark.parametrize(
    "text",
    ["", "Program: divide(1, 0)", "Program: add(1)", "Program: table_max(bogus, none)",
     "I could not find the data.", "Program: add(#3, 1)"],
)
def test_invalid_finqa(text: str) -> None:
    assert not parse(text, SPEC).valid


def test_program_and_number_cluster() -> None:
    by_program = parse("Program: subtract(5829, 5735), divide(#0, 5735)", SPEC).answer
    by_number = parse("Answer: 0.016390584", SPEC).answer
    assert by_program == by_number


@pytest.mark.parametrize(
    ("answer", "key"),
    [("0.01639", "0.01639"), ("1.6%", "0.016"), ("subtract(5829, 5735), divide(#0, 5735)", "0.01639"),
     ("yes", "yes"), ("$1,000", "1000"), ("(5)", "-5"), ("bogus", None), ("divide(1, 0)", None)],
)
def test_canonicalize_finqa(answer: str, key: str | None) -> None:
    assert canonicalize(answer, SPEC) == key
