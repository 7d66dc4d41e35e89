"""Grades are keyed by the program text that runs, not by the canonical (clustering) key.

Differential: every answer of a sample is graded through ``score_outcome`` (which shares
grades between equal keys) and again on its own, through a fresh ``HumanEvalTask.grade``;
the two must agree for answers whose canonical keys collide.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from df_ray.core.parsing import parse
from df_ray.evaluation.scoring import grade_key, score_outcome
from df_ray.methods.base import MethodContext, Outcome, SampleState
from df_ray.sandbox import plan
from df_ray.tasks.humaneval import HumanEvalTask

pytestmark = pytest.mark.skipif(plan("strict").error is not None,
                                reason="strict sandbox unavailable: " + str(plan("strict").error))

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

#: Pairs with one canonical key (docstrings and ``__main__`` blocks are dropped from it) that
#: run differently, or must each be run.
PAIRS = {
    # reads its own docstring: the key drops it, the program does not
    "docstring": ('def add(a, b):\n    "Sum."\n    return a + b if add.__doc__ else 0\n',
                  "def add(a, b):\n    return a + b if add.__doc__ else 0\n"),
    # the case: an always-wrong answer, and the same with a "fix" under __main__
    # (which the reference harness never runs, so both are wrong)
    "main_fix": ("def add(a, b):\n    return 0\n",
                 "def add(a, b):\n    return 0\n\n\nif __name__ == '__main__':\n"
                 "    def add(a, b):\n        return a + b\n"),
    # a correct answer whose __main__ block would read stdin and fail
    "main_input": ("def add(a, b):\n    return a + b\n",
                   "def add(a, b):\n    return a + b\n\n\nif __name__ == '__main__':\n"
                   "    print(add(int(input()), 1))\n"),
}


class CountingTask:
    """The real task, counting the programs it was asked to grade."""

    def __init__(self, task: HumanEvalTask):
        self.task = task
        self.graded: list[str | None] = []

    def __getattr__(self, name):
        return getattr(self.task, name)

    def grade(self, sample, answer):
        self.graded.append(answer.extracted if answer is not None else None)
        return self.task.grade(sample, answer)


def _sample(task: HumanEvalTask):
    return next(s for s in task.load("test", source=str(FIXTURES / "humaneval.jsonl"))
                + task.load("calibration", source=str(FIXTURES / "humaneval.jsonl"))
                if s.meta["entry_point"] == "add")


def _obs(task, sample, agent: str, code: str):
    o = parse(f"```python\n{code}```\nConfidence: 0.9", task.parse_spec(sample), agent)
    assert o.valid, o
    return o


@pytest.mark.parametrize("case", sorted(PAIRS))
def test_answers_with_one_key_are_graded_each_by_its_own_run(case):
    task = HumanEvalTask(isolation="strict")
    sample = _sample(task)
    a, b = (_obs(task, sample, f"a{i}", code) for i, code in enumerate(PAIRS[case]))
    assert a.answer == b.answer  # one canonical key: one cluster in the belief
    assert grade_key(a) != grade_key(b)
    counting = CountingTask(task)
    ctx = MethodContext(task=counting, agents=[], coordinator=None, settings=None)
    row = score_outcome(SampleState(sample), Outcome(final=b, agent_observations=[a, b]), ctx)
    import json

    agent_correct = json.loads(row.detail)["agent_correct"]
    alone = {o.agent: task.grade(sample, o).correct for o in (a, b)}
    assert agent_correct == alone  # the differential: shared grading == each run alone
    assert row.correct == alone["a1"]
    assert sorted(counting.graded) == sorted([a.extracted, b.extracted])  # both ran, once each
    if case == "docstring":
        assert alone == {"a0": True, "a1": False}
    elif case == "main_fix":
        assert alone == {"a0": False, "a1": False}
    else:
        assert alone == {"a0": True, "a1": True}


def test_identical_answers_share_one_run():
    task = HumanEvalTask(isolation="strict")
    sample = _sample(task)
    code = "def add(a, b):\n    return a + b\n"
    a, b = _obs(task, sample, "a0", code), _obs(task, sample, "a1", code)
    counting = CountingTask(task)
    ctx = MethodContext(task=counting, agents=[], coordinator=None, settings=None)
    row = score_outcome(SampleState(sample), Outcome(final=a, agent_observations=[a, b]), ctx)
    assert row.correct and counting.graded == [a.extracted]
