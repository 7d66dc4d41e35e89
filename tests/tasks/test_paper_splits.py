"""The benchmarks at the paper's sizes: LegalBench stratified over every task, HumanEval's
GoA split, FinQA's documented local copy, and splits that never move with the run seed."""

from __future__ import annotations

import json

import pytest

from df_ray.config import RunConfig
from df_ray.pipeline.runner import dataset_fingerprint, load_samples, provenance
from df_ray.tasks.finqa import FinQATask
from df_ray.tasks.humaneval import GOA_TEST_IDS, HumanEvalTask
from df_ray.tasks.legalbench import NON_EXACT_MATCH_TASKS, LegalBenchTask, instruction

N_TASKS = 40


def _many_task_file(tmp_path, n_tasks: int = N_TASKS, rows: int = 20):
    """A LegalBench copy with many tasks of very different sizes, a few train rows each, and
    two tasks LegalBench grades by another metric."""
    lines = []
    names = [f"task_{i:02d}" for i in range(n_tasks)] + ["rule_qa", "sara_numeric"]
    for t, name in enumerate(names):
        n = 2 + (t * 7) % rows  # 2..21 rows
        for i in range(n):
            lines.append({"task": name, "answer": "Yes" if (i + t) % 2 else "No", "index": i,
                          "text": f"SYNTHETIC {name} case {i}"})
        for i in range(3):
            lines.append({"task": name, "answer": "No", "index": 900 + i, "split": "train",
                          "text": f"SYNTHETIC {name} example {i}"})
    f = tmp_path / "legalbench_many.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return f, names[:n_tasks]


def test_legalbench_stratifies_over_every_exact_match_task(tmp_path):
    f, em_tasks = _many_task_file(tmp_path)
    task = LegalBenchTask(test_size=100, calibration_size=40)
    test, cal = task.load("test", source=str(f)), task.load("calibration", source=str(f))
    assert len(test) == 100 and len(cal) == 40
    assert not {s.id for s in test} & {s.id for s in cal}
    per_task = {t: sum(s.meta["legalbench_task"] == t for s in test) for t in em_tasks}
    # Every exact-match task is in the test split, spread evenly (2 or 3 each of 100/40).
    assert set(per_task) == set(em_tasks) and min(per_task.values()) >= 2
    assert max(per_task.values()) - min(per_task.values()) <= 1
    assert not {s.meta["legalbench_task"] for s in test + cal} & set(NON_EXACT_MATCH_TASKS)
    # Train rows are the few-shot examples, never questions.
    assert all(s.id.rsplit("/", 1)[1] not in ("900", "901", "902") for s in test + cal)
    s = test[0]
    assert len(s.meta["few_shot"]) == 3
    assert s.meta["instruction"] == instruction(s.meta["legalbench_task"])
    prompt = task.agent_prompt(s)
    assert "Examples:" in prompt and "example 0\nAnswer: No" in prompt
    assert "Allowed labels: No, Yes" in task.problem_statement(s)
    # A limit prefix stays stratified: the first N_TASKS rows cover N_TASKS tasks.
    assert len({x.meta["legalbench_task"] for x in test[:N_TASKS]}) == N_TASKS


def test_legalbench_instructions_are_per_task():
    assert "Abercrombie" in instruction("abercrombie")
    assert "'audit rights'" in instruction("cuad_audit_rights")
    assert "'immigration'" in instruction("learned_hands_immigration")
    assert instruction("cuad_audit_rights") != instruction("cuad_insurance")
    assert "some_new_task" in instruction("some_new_task").replace(" ", "_")


def test_legalbench_github_layout(tmp_path):
    for name in ("hearsay", "proa"):
        d = tmp_path / "tasks" / name
        d.mkdir(parents=True)
        (d / "test.tsv").write_text("answer\tindex\ttext\n" + "".join(
            f"{'Yes' if i % 2 else 'No'}\t{i}\tSYNTHETIC {name} {i}\n" for i in range(6)))
        (d / "train.tsv").write_text("answer\tindex\ttext\nYes\t0\tSYNTHETIC shot\n")
        (d / "base_prompt.txt").write_text("not data")
    task = LegalBenchTask(test_size=8, calibration_size=2)
    test = task.load("test", source=str(tmp_path / "tasks"))
    assert len(test) == 8 and {s.meta["legalbench_task"] for s in test} == {"hearsay", "proa"}
    assert test[0].meta["few_shot"] == [["Text: SYNTHETIC shot", "Yes"]]


def _goa_humaneval(tmp_path, extra: int = 30):
    """GoA's 50 ids plus other problems, in a file that lists them in a scrambled order."""
    ids = list(GOA_TEST_IDS) + [f"HumanEval/{i}" for i in range(200, 200 + extra)]
    rows = [{"task_id": t, "prompt": f"def f{i}():\n", "canonical_solution": "    return 1\n",
             "test": "def check(c):\n    assert c() == 1\n", "entry_point": f"f{i}"}
            for i, t in enumerate(reversed(ids))]
    f = tmp_path / "he.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return f


def test_humaneval_test_split_is_goas_50_and_calibration_the_rest(tmp_path):
    f = _goa_humaneval(tmp_path)
    task = HumanEvalTask(calibration_size=20)
    test, cal = task.load("test", source=str(f)), task.load("calibration", source=str(f))
    assert [s.id for s in test] == list(GOA_TEST_IDS)
    assert len(cal) == 20 and not {s.id for s in cal} & set(GOA_TEST_IDS)


def _cfg(benchmark: str, source: str, seed: int) -> RunConfig:
    return RunConfig.model_validate({
        "benchmark": benchmark, "source": source, "seed": seed, "composition": benchmark})


@pytest.mark.parametrize(("bench", "source"), [
    ("math", "math500.jsonl"), ("mmlu_pro", "mmlu_pro.json"), ("gpqa", "."),
    ("finqa", "finqa"), ("legalbench", "legalbench.jsonl"), ("humaneval", "humaneval.jsonl")])
def test_splits_do_not_change_with_the_run_seed(fixtures, bench, source):
    src = str(fixtures / source)
    a = load_samples(_cfg(bench, src, 0))
    b = load_samples(_cfg(bench, src, 12345))
    assert a and [s.id for s in a] == [s.id for s in b]
    assert dataset_fingerprint(a) == dataset_fingerprint(b)
    if bench != "math":  # MATH's calibration pool needs the hub's MATH-500 ids
        ca = load_samples(_cfg(bench, src, 0), split="calibration")
        cb = load_samples(_cfg(bench, src, 7), split="calibration")
        assert [s.id for s in ca] == [s.id for s in cb]


def test_finqa_default_source_is_documented_and_missing_data_says_what_to_fetch(
        tmp_path, monkeypatch, fixtures):
    monkeypatch.setenv("DF_RAY_HOME", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"data/finqa.*czyssrs/FinQA.*fetch"):
        FinQATask().load("test")
    target = tmp_path / "data" / "finqa"
    target.mkdir(parents=True)
    for name in ("test.json", "dev.json"):
        (target / name).write_text((fixtures / "finqa" / name).read_text())
    assert FinQATask().load("test") == FinQATask().load("test", source=str(target))


def test_provenance_names_models_data_and_prompts(fixtures):
    cfg = _cfg("math", str(fixtures / "math500.jsonl"), 0)
    samples = load_samples(cfg)
    p = provenance(cfg, samples)
    assert p["provenance.dataset_fingerprint"] == dataset_fingerprint(samples)
    assert p["provenance.model.mathstral-7b"] == "mistralai/Mathstral-7B-v0.1"
    assert p["provenance.model_revision.mathstral-7b"] == "unpinned"
    assert p["provenance.prompt_version"] and p["provenance.prompt_fingerprint"]
    pinned = RunConfig.model_validate({
        "benchmark": "math", "composition": "math", "data_revision": "abc123",
        "backbones": {"mathstral-7b": {"pool": "mathstral-7b", "revision": "deadbeef"}}})
    p2 = provenance(pinned, samples)
    assert p2["provenance.model_revision.mathstral-7b"] == "deadbeef"
    assert p2["provenance.dataset_revision"] == "abc123"
