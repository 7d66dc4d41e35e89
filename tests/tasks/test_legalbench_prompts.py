"""LegalBench's official prompts: each task's base_prompt.txt (fixtures in the repository's
tasks/ layout, in LegalBench's format), filled as LegalBench's generate_prompts fills it,
read from a local copy, from the cache, or refused offline with what to fetch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from df_ray.tasks.base import DataSchemaError
from df_ray.tasks.legalbench import (
    PROMPTS_COMMIT,
    LegalBenchPromptUnavailable,
    LegalBenchTask,
    prompt_cache,
    prompt_url,
)

TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "legalbench_tasks"


def test_prompts_come_from_each_task_s_base_prompt(tmp_path):
    t = LegalBenchTask(prompts="official", test_size=4, calibration_size=0)
    rows = {s.id: s for s in t.load("test", source=str(TASKS))}
    hearsay = rows["legalbench/hearsay/0"]
    prompt = t.agent_prompt(hearsay)
    assert prompt.startswith("SYNTHETIC: Hearsay is an out-of-court statement")
    assert ("Q: SYNTHETIC: A letter offered to prove its contents. Is there hearsay?"
            in prompt)
    assert "{{" not in prompt and "\nA:\n" not in prompt.split("Is there hearsay?")[-1]
    assert "Allowed labels: No, Yes" in prompt and "'Answer: <label>'" in prompt
    assert hearsay.meta["prompt_origin"].endswith("hearsay/base_prompt.txt")
    mark = rows["legalbench/abercrombie/1"]
    assert 'Q: SYNTHETIC: The mark "Zorbly" for soap. What is the type of mark?' in \
        t.problem_statement(mark)
    # df_ray's own instructions stay available
    ours = LegalBenchTask(prompts="ours", test_size=4, calibration_size=0)
    assert "Hearsay is an out-of-court statement" not in ours.agent_prompt(
        ours.load("test", source=str(TASKS))[0])


def test_a_placeholder_the_row_lacks_is_named(tmp_path):
    shutil.copytree(TASKS, tmp_path / "tasks")
    (tmp_path / "tasks" / "hearsay" / "base_prompt.txt").write_text("Q: {{passage}}\nA:")
    with pytest.raises(DataSchemaError, match=r"hearsay.*\['passage'\]"):
        LegalBenchTask(prompts="official").load("test", source=str(tmp_path / "tasks"))


def test_offline_without_the_prompt_says_what_to_fetch(monkeypatch, tmp_path):
    monkeypatch.setenv("DF_RAY_HOME", str(tmp_path))
    src = tmp_path / "data"  # a folder of <task>.<ext> files: no prompt beside them
    src.mkdir()
    shutil.copy(TASKS / "hearsay" / "test.tsv", src / "hearsay.tsv")
    with pytest.raises(LegalBenchPromptUnavailable) as e:
        LegalBenchTask(prompts="official").load("test", source=str(src))
    msg = str(e.value)
    assert prompt_url("hearsay") in msg and PROMPTS_COMMIT in msg and "offline" in msg
    # once cached (what a machine with internet access does), the same load reads it
    cached = prompt_cache("hearsay")
    cached.parent.mkdir(parents=True)
    shutil.copy(TASKS / "hearsay" / "base_prompt.txt", cached)
    (s, _) = LegalBenchTask(prompts="official").load("test", source=str(src))
    assert s.meta["prompt_origin"] == (
        f"HazyResearch/legalbench@{PROMPTS_COMMIT[:12]}:tasks/hearsay/base_prompt.txt")


def test_an_unknown_prompt_choice_is_refused():
    with pytest.raises(ValueError, match="official, ours"):
        LegalBenchTask(prompts="theirs")
