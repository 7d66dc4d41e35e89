"""MMLU-Pro's official 5-shot chain-of-thought prompt (``benchmark_args: {prompt: official}``)
as TIGER-AI-Lab/MMLU-Pro's ``evaluate_from_local.py`` builds it, on the fixture copy of the
validation split; the examples reach the agents' calls only."""

from __future__ import annotations

from pathlib import Path

import pytest

from df_ray.config import RunConfig
from df_ray.core.parsing import parse
from df_ray.tasks import get_task
from df_ray.tasks.base import DataSchemaError
from df_ray.tasks.mmlu_pro import COT_INITIAL_PROMPT, VALIDATION_ENV, MMLUProTask
from tests.helpers import answer, driver_config, run_method

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VALIDATION = str(FIXTURES / "mmlu_pro_validation.json")


def official(**kw) -> MMLUProTask:
    return MMLUProTask(prompt="official", validation_source=VALIDATION, **kw)


def test_the_prompt_is_the_reference_layout():
    task = official()
    physics = next(s for s in task.load("test", source=str(FIXTURES / "mmlu_pro_goa.json"))
                   if s.meta["category"] == "physics")
    prompt = task.agent_prompt(physics)
    head = ('The following are multiple choice questions (with answers) about physics. Think '
            'step by step and then finish your answer with "the answer is (X)" where X is the '
            'correct letter choice.\n\n\n\nQuestion:\nWhat is the SI unit of force?\nOptions:\n'
            'A. Joule\nB. Newton\nC. Watt\n')
    assert prompt.startswith(head)
    # the first worked answer, its "A:" written "Answer:", then a blank line
    assert ("J. Farad\nAnswer: Let's think step by step. Force is mass times acceleration, "
            "measured in newtons. The answer is (B).\n\nQuestion:\n") in prompt
    assert prompt.count("Question:\n") == 6  # five examples and the question
    assert "N/A" not in prompt  # dropped from the examples, as preprocess drops them
    stem, options = physics.meta["stem"], physics.meta["options"]
    tail = (f"Question:\n{stem}\nOptions:\n"
            + "".join(f"{'ABCDEFGHIJ'[i]}. {o}\n" for i, o in enumerate(options))
            + "Answer: Let's think step by step.")
    assert prompt.endswith(tail)
    assert "Confidence" not in prompt and "(A) " not in tail


def test_goa_inline_options_become_option_lines():
    task = official()
    s = task.load("test", source=str(FIXTURES / "mmlu_pro_goa.json"))[0]
    assert s.meta["stem"] == "What is 2 + 2?"
    assert s.meta["options"] == ["3", "4", "5", "6", "7", "8", "9", "10", "11", "12"]
    assert task.agent_prompt(s).endswith("I. 11\nJ. 12\nAnswer: Let's think step by step.")


def test_only_the_first_five_of_the_category_and_shots_is_an_option():
    bio = next(s for s in official().load("test", source=str(FIXTURES / "mmlu_pro.json"))
               if s.meta["category"] == "biology")
    prompt = official().agent_prompt(bio)
    assert "sixth biology example" not in prompt and "photosynthesis" in prompt
    two = official(shots=2).agent_prompt(bio)  # a sample loaded at 5 shots, asked at 2
    assert two.count("Question:\n") == 3 and "oxygen" not in two
    with pytest.raises(ValueError, match="shots"):
        official(shots=0)


def test_the_reference_answer_line_is_read():
    s = official().load("test", source=str(FIXTURES / "mmlu_pro.json"))[0]
    spec = official().parse_spec(s)
    obs = parse("Mitochondria make ATP. The answer is (C).", spec, agent="a")
    assert obs.valid and obs.answer == "C"


def test_problem_statement_holds_no_example():
    task = official()
    s = task.load("test", source=str(FIXTURES / "mmlu_pro.json"))[0]
    assert "Let's think step by step" not in task.problem_statement(s)
    assert COT_INITIAL_PROMPT[:30] not in task.problem_statement(s)


def test_a_run_shows_the_examples_to_the_agents_only():
    cfg = driver_config(benchmark_args={"prompt": "official", "validation_source": VALIDATION})
    samples = cfg.build_task().load("test", source=str(FIXTURES / "mmlu_pro.json"), limit=2)
    run = run_method("darkforest", lambda r: answer("B"), cfg=cfg, samples=samples,
                     method_args={"ablation": "no_calibration"})
    agents = [c.request for c in run.calls(role="agent")]
    coordinator = [c.request for c in run.calls(role="coordinator")]
    assert agents and coordinator
    assert all("Answer: Let's think step by step." in r.messages[-1].content for r in agents)
    assert all("The answer is (" not in r.messages[-1].content for r in coordinator)


def test_missing_category_and_bad_options_are_one_line_errors(tmp_path, monkeypatch):
    only_math = tmp_path / "val.json"
    only_math.write_text('[{"question": "q", "options": ["a", "b"], "cot_content": '
                         '"A: Let\'s think step by step. The answer is (A).", '
                         '"category": "math"}]')
    task = MMLUProTask(prompt="official", validation_source=str(only_math))
    with pytest.raises(DataSchemaError, match="category 'biology'"):
        task.load("test", source=str(FIXTURES / "mmlu_pro.json"))
    with pytest.raises(FileNotFoundError, match=r"nowhere\.json"):
        MMLUProTask(prompt="official", validation_source=str(tmp_path / "nowhere.json")
                    ).load("test", source=str(FIXTURES / "mmlu_pro.json"))
    with pytest.raises(ValueError, match="prompt 'fancy' is not one of ours, official"):
        get_task("mmlu_pro", prompt="fancy")
    with pytest.raises(ValueError, match="benchmark_args of mmlu_pro"):
        RunConfig.model_validate({**driver_config().model_dump(mode="json"),
                                  "benchmark_args": {"promt": "official"}}).build_task()
    empty = tmp_path / "empty_cot.json"
    empty.write_text('[{"question": "q", "options": ["a"], "cot_content": "", '
                     '"category": "math"}]')
    with pytest.raises(DataSchemaError, match="cot_content"):
        MMLUProTask(prompt="official", validation_source=str(empty)).examples()


def test_the_environment_names_a_local_copy(monkeypatch):
    monkeypatch.setenv(VALIDATION_ENV, VALIDATION)
    task = MMLUProTask(prompt="official")
    assert sorted(task.examples()) == ["biology", "math", "physics"]
    assert task.run_tags() == {"df_ray.mmlu_pro.prompt": "official"}


def test_ours_stays_the_class_default():
    task = MMLUProTask()
    s = task.load("test", source=str(FIXTURES / "mmlu_pro.json"))[0]
    assert "cot_header" not in s.meta
    assert task.agent_prompt(s).startswith("Answer the following multiple-choice question")
