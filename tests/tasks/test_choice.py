from __future__ import annotations

import json

import datasets
import pytest

from df_ray.core.types import Observation
from df_ray.tasks import _common as C
from df_ray.tasks.base import DataSchemaError, Sample
from df_ray.tasks.gpqa import GatedDatasetError, GPQATask, shuffle_options
from df_ray.tasks.mmlu_pro import MMLUProTask, count_inline_options


def obs(answer, extracted=None):
    return Observation(agent="a", answer=answer, extracted=extracted)


@pytest.mark.parametrize(("pred", "ok"), [("B", True), ("b", True), ("(B)", True),
                                          ("B.", True), ("C", False), ("K", False),
                                          ("", False), (None, False)])
def test_letter_grader_table(pred, ok):
    s = Sample(id="x", task="mmlu_pro", question="q", gold="B", meta={"n_options": 10})
    assert MMLUProTask().grade(s, obs(pred)).correct is ok


def test_mmlu_pro_hf_schema_split(fixtures):
    t = MMLUProTask(per_category_test=2, calibration_size=3)
    src = str(fixtures / "mmlu_pro.json")
    test, cal = t.load("test", source=src), t.load("calibration", source=src)
    assert len(test) == 4 and len(cal) == 3
    assert {s.meta["category"] for s in test} == {"biology", "math"}
    assert {s.meta["category"] for s in cal} == {"biology", "math"}  # stratified
    assert not {s.id for s in test} & {s.id for s in cal}
    assert [s.id for s in t.load("test", source=src)] == [s.id for s in test]
    everything = MMLUProTask(per_category_test=10).load("test", source=src)
    s103 = next(s for s in everything if s.id == "mmlu_pro/103")
    assert t.parse_spec(s103).n_options == 4
    assert "(D) Amino acids" in s103.question and "(E)" not in s103.question
    assert t.parse_spec(everything[0]).n_options in (4, 10)
    p = t.agent_prompt(s103)
    assert "Answer: X" in p and "A, B, C, D" in p and "Confidence" in p


def test_mmlu_pro_goa_schema(fixtures):
    t = MMLUProTask()
    rows = t.load("test", source=str(fixtures / "mmlu_pro_goa.json"))
    assert len(rows) == 3  # the repeated row is kept under its own id
    assert len({s.id for s in rows}) == 3
    assert {t.parse_spec(s).n_options for s in rows} == {10, 4}
    assert count_inline_options("x (A) a (B) b (C) c.") == 3
    assert t.load("calibration", source=str(fixtures / "mmlu_pro_goa.json")) == []


def test_mmlu_pro_through_datasets_hub_path(fixtures, monkeypatch, tmp_path):
    """The hub path, with datasets reading a local JSON file in MMLU-Pro's schema."""
    calls = []

    def fake_hub(path, name=None, *, split, revision=None, token=None):
        calls.append((path, name, split))
        return datasets.load_dataset("json", data_files=str(fixtures / "mmlu_pro.json"),
                                     split="train", cache_dir=str(tmp_path))

    monkeypatch.setattr(C, "load_hub_dataset", fake_hub)
    rows = MMLUProTask(per_category_test=3).load("test", source="hub")
    assert calls == [("TIGER-Lab/MMLU-Pro", None, "test")]
    assert len(rows) == 6
    assert rows == MMLUProTask(per_category_test=3).load(
        "test", source=str(fixtures / "mmlu_pro.json"))


def test_mmlu_pro_schema_errors(tmp_path):
    f = tmp_path / "m.json"
    base = {"question_id": 1, "question": "q", "options": ["a", "b"], "answer": "A",
            "category": "c"}
    for broken, pat in (({**base, "options": "a,b"}, r"row 1.*'options'.*str"),
                        ({**base, "answer": "E"}, r"row 1.*'answer'"),
                        ({k: v for k, v in base.items() if k != "question"},
                         r"row 1.*missing field 'question'"),
                        ({**base, "options": ["a", 2]}, r"row 1.*'options'\[1\]")):
        f.write_text(json.dumps([base, broken]))
        with pytest.raises(DataSchemaError, match=r"m\.json.*" + pat):
            MMLUProTask().load("test", source=str(f))


def test_gpqa_local_folder_and_shuffle(fixtures):
    t = GPQATask()
    test = t.load("test", source=str(fixtures))
    cal = t.load("calibration", source=str(fixtures))
    assert [s.id for s in test] == [f"gpqa/recSYNTH000{i}" for i in (1, 2, 3)]
    assert len(cal) == 5 and not {s.id for s in cal} & {s.id for s in test}
    for s in test:
        correct = {"gpqa/recSYNTH0001": "Newton", "gpqa/recSYNTH0002": "Electron",
                   "gpqa/recSYNTH0003": "Na"}[s.id]
        assert s.meta["options"]["ABCD".index(s.gold)] == correct
        assert f"({s.gold}) {correct}" in s.question
        assert t.parse_spec(s).n_options == 4
    # deterministic, seed dependent, per question
    again = GPQATask().load("test", source=str(fixtures))
    assert [s.meta["options"] for s in again] == [s.meta["options"] for s in test]
    orders = {tuple(shuffle_options("c", ["x", "y", "z"], rid, 0)[0])
              for rid in ("r1", "r2", "r3", "r4", "r5", "r6")}
    assert len(orders) > 1
    assert shuffle_options("c", ["x", "y", "z"], "r1", 0) == \
        shuffle_options("c", ["x", "y", "z"], "r1", 0)
    golds = {tuple(s.gold for s in t.load("test", source=str(fixtures), seed=k))
             for k in range(6)}
    assert len(golds) > 1
    assert t.grade(test[0], obs(test[0].gold)).correct
    assert not t.grade(test[0], obs("E")).correct


def test_gpqa_without_token_gives_the_clear_error(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)

    def no_network(*a, **k):  # pragma: no cover - must not be reached
        raise AssertionError("network attempted")

    monkeypatch.setattr(C, "load_hub_dataset", no_network)
    with pytest.raises(GatedDatasetError) as e:
        GPQATask().load("test", source="hub")
    msg = str(e.value)
    assert "huggingface.co/datasets/Idavidrein/gpqa" in msg and "HF_TOKEN" in msg
    assert "source=" in msg


def test_gpqa_with_token_uses_the_hub_path(monkeypatch, fixtures, tmp_path):
    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    seen = []

    def fake_hub(path, name=None, *, split, revision=None, token=None):
        seen.append((path, name, split, token))
        return datasets.load_dataset("csv", data_files=str(fixtures / f"{name}.csv"),
                                     split="train", cache_dir=str(tmp_path))

    monkeypatch.setattr(C, "load_hub_dataset", fake_hub)
    test = GPQATask().load("test", source="hub")
    cal = GPQATask().load("calibration")
    assert len(test) == 3 and len(cal) == 5
    assert seen[0] == ("Idavidrein/gpqa", "gpqa_diamond", "train", "hf_dummy")


def test_gpqa_schema_error(tmp_path):
    f = tmp_path / "gpqa_diamond.json"
    f.write_text(json.dumps([{"Question": "q", "Correct Answer": "a",
                              "Incorrect Answer 1": "b", "Incorrect Answer 2": "c",
                              "Record ID": "r"}]))
    with pytest.raises(DataSchemaError, match=r"gpqa_diamond\.json.*row 0.*'Incorrect Answer 3'"):
        GPQATask().load("test", source=str(f))


def test_gpqa_reads_goa_schema_in_its_fixed_option_order(fixtures):
    t = GPQATask()
    rows = t.load("test", source=str(fixtures / "gpqa_goa.json"))
    assert [s.gold for s in rows] == ["B", "D", "A"]
    assert rows[0].question.endswith("(A) Joule (B) Newton (C) Watt (D) Pascal")  # not shuffled
    assert rows[0].id.startswith("gpqa/") and rows[0].meta["option_order"] == "goa"
    assert t.parse_spec(rows[0]).n_options == 4
    assert t.grade(rows[0], obs("B")).correct and not t.grade(rows[0], obs("A")).correct
    # the same questions from the hub's schema have the same question_key: a calibration
    # split from gpqa_main can drop GoA's test questions by text
    hub = t.load("test", source=str(fixtures / "gpqa_diamond.csv"))
    assert [s.meta["question_key"] for s in rows] == [s.meta["question_key"] for s in hub]


def test_gpqa_goa_schema_errors(tmp_path):
    f = tmp_path / "GPQA_test.json"
    f.write_text(json.dumps([{"question": "q? The options are: (A) a (B) b (C) c",
                              "gold_answer": "A"}]))
    with pytest.raises(DataSchemaError, match=r"row 0.*inlines 3 options"):
        GPQATask().load("test", source=str(f))
    f.write_text(json.dumps([{"question": "q? The options are: (A) a (B) b (C) c (D) d",
                              "gold_answer": "E"}]))
    with pytest.raises(DataSchemaError, match=r"row 0.*'gold_answer' 'E'"):
        GPQATask().load("test", source=str(f))
