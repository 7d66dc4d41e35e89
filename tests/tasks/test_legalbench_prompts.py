"""LegalBench's official prompts: each task's base_prompt.txt (fixtures in the repository's
tasks/ layout, in LegalBench's format), filled as LegalBench's generate_prompts fills it,
read from a local copy, from the cache, or refused offline with what to fetch."""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import pytest

from df_ray.tasks.base import DataSchemaError
from df_ray.tasks.legalbench import (
    NON_EXACT_MATCH_TASKS,
    PROMPTS_COMMIT,
    LegalBenchPromptUnavailable,
    LegalBenchTask,
    prompt_cache,
    prompt_url,
    strip_cue,
)
from tests.tasks.conftest import SHARED_DATA

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
    with pytest.raises(ValueError, match="zero_shot, official, ours"):
        LegalBenchTask(prompts="theirs")


# ----------------------------------------------------------------------------- every template
# LegalBench's own task folders (HazyResearch/legalbench at PROMPTS_COMMIT, tasks/<task>/:
# base_prompt.txt, base_prompt_wo_example.txt where a task has one, train.tsv) are not in the
# repository; where a copy sits in the shared data folder beside it, every template is
# rendered and checked.

LEGALBENCH_TASKS = SHARED_DATA / "legalbench" / "tasks"
needs_templates = pytest.mark.skipif(not LEGALBENCH_TASKS.is_dir(),
                                     reason="LegalBench's task folders are not present")


def _exact_match_tasks() -> list[str]:
    return sorted(p.name for p in LEGALBENCH_TASKS.iterdir()
                  if (p / "base_prompt.txt").is_file() and p.name not in NON_EXACT_MATCH_TASKS)


def _samples(prompts: str) -> list:
    """One synthetic row per task, every field of its template filled."""
    parsed = []
    for t in _exact_match_tasks():
        fields = set(re.findall(r"\{\{([^{}]+)\}\}", (LEGALBENCH_TASKS / t / "base_prompt.txt")
                                .read_text(encoding="utf-8")))
        inputs = {f: f"SYNTHETIC {f} of {t}." for f in sorted(fields)}
        parsed.append((t, "Yes", 0, inputs, "test"))
        parsed.append((t, "No", 1, inputs, "train"))  # a second label
    task = LegalBenchTask(prompts=prompts)
    return task, task._build(parsed, LEGALBENCH_TASKS)


def _train_texts(t: str) -> list[str]:
    f = LEGALBENCH_TASKS / t / "train.tsv"
    if not f.is_file():
        return []
    with f.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return [v.strip()[:60] for r in rows for k, v in r.items()
            if k not in ("answer", "index", "label") and v and len(v.strip()) >= 25]


def _template_part(prompt: str) -> str:
    return prompt.split("\n\nAllowed labels:")[0].rstrip()


@needs_templates
def test_the_exact_match_tasks_are_all_there():
    assert len(_exact_match_tasks()) == 154


@needs_templates
@pytest.mark.parametrize("prompts", ["official", "zero_shot"])
def test_no_rendered_prompt_ends_its_template_with_a_dangling_cue(prompts):
    task, samples = _samples(prompts)
    assert len(samples) == 154
    for s in samples:
        t = s.meta["legalbench_task"]
        template = (LEGALBENCH_TASKS / t / "base_prompt.txt").read_text(encoding="utf-8")
        for prompt in (task.agent_prompt(s), task.problem_statement(s)):
            body = _template_part(prompt)
            last = body.rsplit("\n", 1)[-1].strip()
            assert not last.endswith(":"), (t, last)
            # a short question the examples answer on its line ("Supportive? Yes") is a cue
            if last.endswith("?") and len(last) <= 40:
                assert not re.search(r"(?m)^" + re.escape(last) + r"[ \t]+\S", template), (t, last)
            assert "{{" not in prompt and "SYNTHETIC" in body, t
            assert prompt.count("Allowed labels: No, Yes") == 1, t


@needs_templates
@pytest.mark.parametrize("prompts", ["official", "zero_shot"])
def test_no_coordinator_or_baseline_prompt_contains_a_training_example(prompts):
    """problem_statement is what the coordinator and every baseline's later calls read: no
    train.tsv input, and no example line (the template's cue followed by a label)."""
    task, samples = _samples(prompts)
    leaked_into_agents = 0
    for s in samples:
        t = s.meta["legalbench_task"]
        statement = task.problem_statement(s)
        for text in _train_texts(t):
            assert text not in statement, (t, text)
            leaked_into_agents += text in task.agent_prompt(s)
        template = (LEGALBENCH_TASKS / t / "base_prompt.txt").read_text(encoding="utf-8")
        cue = template.rstrip()[len(strip_cue(template)):].strip()
        if cue:
            assert not re.search(r"(?m)^" + re.escape(cue) + r"[ \t]+\S", statement), (t, cue)
    # the few-shot variant's agents do read the examples; the zero-shot variant's do not
    assert (leaked_into_agents > 0) == (prompts == "official")
