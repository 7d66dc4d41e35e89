from __future__ import annotations

import json

import pandas as pd
import pytest

from df_ray.core.parsing import parse
from df_ray.core.types import Observation
from df_ray.tasks import _common as C
from df_ray.tasks.base import DataSchemaError, Sample
from df_ray.tasks.finqa import FinQATask, bare_number, render_table
from df_ray.tasks.legalbench import NON_EXACT_MATCH_TASKS, LegalBenchTask, normalize_label


@pytest.fixture
def finqa(fixtures):
    t = FinQATask()
    return t, {s.meta["question_only"]: s for s in t.load("test", source=str(fixtures / "finqa"))}


def test_finqa_splits(fixtures):
    t = FinQATask(test_size=3, calibration_size=2)
    src = str(fixtures / "finqa")
    test, cal = t.load("test", source=src), t.load("calibration", source=src)
    assert len(test) == 3 and len(cal) == 2
    assert all(s.id.startswith("finqa/SYNTH/201") for s in cal)
    assert not {s.id for s in test} & {s.id for s in cal}
    assert t.load("test", source=src) == test
    assert t.load("test", source=src, limit=1) == test[:1]
    with pytest.raises(FileNotFoundError, match=r"github\.com/czyssrs/FinQA"):
        t.load("test")


@pytest.mark.parametrize(("question", "answer", "exec_ok", "prog_ok"), [
    ("what is the change in revenue?", "subtract(5829, 5735)", True, True),
    ("what is the change in revenue?", "subtract(5829,5735)", True, True),
    # the official evaluation executes programs only: a bare number earns no credit
    ("what is the change in revenue?", "94", False, False),
    ("what is the change in revenue?", "94.0", False, False),
    ("what is the change in revenue?", "add(5829, 5735)", False, False),
    ("what is the change in revenue?", "subtract(5735, 5829)", False, False),
    ("what is the percentage change in revenue?",
     "subtract(5829, 5735), divide(#0, 5735)", True, True),
    ("what is the percentage change in revenue?", "divide(94, 5735)", True, False),
    ("what is the percentage change in revenue?", "1.639%", False, False),
    ("was revenue greater in 2009?", "greater(5829, 5735)", True, True),
    ("was revenue greater in 2009?", "greater(5735, 5829)", False, False),
    ("what is the total revenue?", "table_sum(revenue, none)", True, True),
    ("what is the total revenue?", "add(5829, 5735)", True, False),
    ("what is the total revenue?", "table_sum(nonexistent, none)", False, False),
    ("what is the total revenue?", "divide(1, 0)", False, False),
    ("what is the revenue in thousands?", "multiply(5829, const_1000)", True, True),
    ("what is the revenue in thousands?", "garbage((", False, False),
])
def test_finqa_grader_table(finqa, question, answer, exec_ok, prog_ok):
    t, by_q = finqa
    s = by_q[question]
    g = t.grade(s, Observation(agent="a", answer=None, extracted=answer))
    assert (g.correct, g.scores["exec_acc"], g.scores["prog_acc"]) == \
        (exec_ok, float(exec_ok), float(prog_ok))


def test_finqa_parser_round_trip_and_prompt(finqa):
    t, by_q = finqa
    s = by_q["what is the percentage change in revenue?"]
    o = parse("reasoning\nAnswer: subtract(5829, 5735), divide(#0, 5735)\nConfidence: 0.6",
              t.parse_spec(s), "a")
    assert o.answer == t.gold_key(s)
    assert t.grade(s, o).scores == {"exec_acc": 1.0, "prog_acc": 1.0, "value_acc": 1.0}
    bare = parse("Answer: 0.01639", t.parse_spec(s), "a")
    assert bare.answer == t.gold_key(s)  # clusters with the program ...
    g = t.grade(s, bare)  # ... but earns no execution credit, as in the official evaluation
    assert g.scores == {"exec_acc": 0.0, "prog_acc": 0.0, "value_acc": 1.0} and not g.correct
    assert "no execution credit" in g.detail
    assert not t.grade(s, None).correct
    p = t.agent_prompt(s)
    assert "| revenue | 5829 | 5735 |" in p and "divide(#0, 5735)" in p and "Confidence" in p
    assert t.parse_spec(s).table[1] == ("revenue", "5829", "5735")
    assert render_table([["a", "b"], ["1"]]).splitlines()[-1] == "| 1 |  |"
    assert bare_number("1,234") == 1234 and bare_number("abc") is None


def test_finqa_schema_errors(tmp_path):
    row = {"id": "x", "pre_text": ["a"], "post_text": ["b"], "table": [["h"], ["1"]],
           "qa": {"question": "q", "program": "add(1, 2)", "exe_ans": 3.0}}
    f = tmp_path / "test.json"
    for broken, pat in (({**row, "pre_text": "a"}, r"row 1.*'pre_text'.*str"),
                        ({**row, "qa": {"question": "q", "exe_ans": 3.0}},
                         r"row 1.*missing field 'program'"),
                        ({**row, "table": [["h"], [1]]}, r"row 1.*'table'\[1\]")):
        f.write_text(json.dumps([row, broken]))
        with pytest.raises(DataSchemaError, match=r"test\.json.*" + pat):
            FinQATask().load("test", source=str(f))


@pytest.mark.parametrize(("gold", "pred", "ok"), [
    ("Yes", "yes", True), ("Yes", "Yes.", True), ("Yes", " YES ", True), ("Yes", "No", False),
    ("descriptive", "Descriptive", True), ("descriptive", "suggestive", False),
    ("Procedural History", "procedural history", True), ("UCC", "U.C.C.", True),
    ("Common Law", "common-law", False), ("Yes", None, False),
])
def test_legalbench_grader_table(gold, pred, ok):
    s = Sample(id="x", task="legalbench", question="q", gold=gold,
               meta={"legalbench_task": "t", "labels": [gold]})
    assert LegalBenchTask().grade(s, Observation(agent="a", answer=pred)).correct is ok
    assert normalize_label("  Hello, World! ") == "hello world"


def _write_parquet_tree(root, n_hearsay=30, n_aber=12):
    """The parquet conversion's layout: <task>/test/0000.parquet (+ a train file)."""
    hearsay = pd.DataFrame({"answer": ["Yes" if i % 3 else "No" for i in range(n_hearsay)],
                            "index": list(range(n_hearsay)),
                            "slice": ["synthetic"] * n_hearsay,
                            "text": [f"SYNTHETIC statement {i}" for i in range(n_hearsay)]})
    aber = pd.DataFrame({"answer": [["generic", "fanciful", "arbitrary"][i % 3]
                                    for i in range(n_aber)],
                         "description": [f"SYNTHETIC mark {i}" for i in range(n_aber)],
                         "index": list(range(n_aber))})
    for name, df in (("hearsay", hearsay), ("abercrombie", aber)):
        (root / name / "test").mkdir(parents=True)
        (root / name / "train").mkdir(parents=True)
        df.to_parquet(root / name / "test" / "0000.parquet")
        df.head(2).assign(index=[900, 901]).to_parquet(root / name / "train" / "0000.parquet")


def test_legalbench_parquet_folder_stratified_split(tmp_path):
    _write_parquet_tree(tmp_path)
    t = LegalBenchTask(tasks=("hearsay", "abercrombie"), test_size=20, calibration_size=10)
    test, cal = t.load("test", source=str(tmp_path)), t.load("calibration",
                                                             source=str(tmp_path))
    assert len(test) == 20 and len(cal) == 10
    assert not {s.id for s in test} & {s.id for s in cal}
    per = lambda rows, k: sum(s.meta["legalbench_task"] == k for s in rows)  # noqa: E731
    assert per(test, "hearsay") == 10 and per(test, "abercrombie") == 10
    assert per(cal, "hearsay") == 8 and per(cal, "abercrombie") == 2  # abercrombie ran out
    assert all("/90" not in s.id for s in test + cal)  # train rows are examples, not questions
    s = next(x for x in test if x.meta["legalbench_task"] == "abercrombie")
    assert t.parse_spec(s).labels == ("arbitrary", "fanciful", "generic")
    assert "Description: SYNTHETIC mark" in s.question
    prompt = t.agent_prompt(s)
    assert "Allowed labels: arbitrary, fanciful, generic" in prompt
    assert "Abercrombie" in prompt  # the task's own instruction
    assert len(s.meta["few_shot"]) == 2 and "Examples:" in prompt
    assert t.load("test", source=str(tmp_path)) == test
    assert t.load("test", source=str(tmp_path), seed=3) == test  # the split is fixed
    assert t.load("test", source=str(tmp_path), limit=4) == test[:4]
    o = parse("hmm\nAnswer: Generic\nConfidence: 0.5", t.parse_spec(s), "a")
    assert o.valid and t.grade(s, o).correct is (s.gold == "generic")


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _hub_cache(home, commit=COMMIT):
    """A Hugging Face cache holding the parquet branch of nguha/legalbench as
    ``snapshot_download`` leaves it: the branch's layout (<task>/<split>/0000.parquet) under
    snapshots/<commit>/, the branch name resolved in refs/. hearsay has no train split."""
    repo = home / "hub" / "datasets--nguha--legalbench"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    _write_parquet_tree(snap)
    for f in (snap / "hearsay" / "train").iterdir():
        f.unlink()
    (snap / "hearsay" / "train").rmdir()
    ref = repo / "refs" / "refs" / "convert" / "parquet"
    ref.parent.mkdir(parents=True)
    ref.write_text(commit)
    return snap


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return home


def test_legalbench_loads_the_parquet_branch_from_the_cache_offline(hf_home):
    from df_ray.tasks.hub import resolved_commits

    snap = _hub_cache(hf_home)
    t = LegalBenchTask(test_size=20, calibration_size=10)  # every exact-match task
    test = t.load("test")  # HF_HUB_OFFLINE=1 (conftest): the cache is all there is
    assert {s.meta["legalbench_task"] for s in test} == {"abercrombie", "hearsay"}
    assert test == t.load("test", source=str(snap))  # as a local copy in that layout
    hearsay = next(s for s in test if s.meta["legalbench_task"] == "hearsay")
    aber = next(s for s in test if s.meta["legalbench_task"] == "abercrombie")
    assert hearsay.meta["few_shot"] == [] and len(aber.meta["few_shot"]) == 2
    assert all("/90" not in s.id for s in test)  # train rows are examples, not questions
    assert resolved_commits(["nguha/legalbench"]) == {"nguha/legalbench": COMMIT}
    only = LegalBenchTask(tasks=["hearsay"], test_size=5, calibration_size=2).load("test")
    assert {s.meta["legalbench_task"] for s in only} == {"hearsay"} and len(only) == 5


def test_legalbench_data_revision_pins_the_branch_commit(hf_home):
    """A run's data_revision (a commit of the parquet branch) loads that snapshot; another
    commit, not in the cache, is refused offline."""
    _hub_cache(hf_home)
    t = LegalBenchTask(tasks=["abercrombie"], test_size=4, calibration_size=2)
    with C.pinned_revision(COMMIT):
        assert len(t.load("test")) == 4
    with C.pinned_revision("f" * 40), pytest.raises(C.HubUnavailable, match="f" * 40):
        t.load("test")


def test_legalbench_offline_without_the_cache_names_the_cache_folder(hf_home):
    with pytest.raises(C.HubUnavailable) as e:
        LegalBenchTask().load("test")
    msg = str(e.value)
    assert "\n" not in msg and "nguha/legalbench@refs/convert/parquet" in msg
    assert str(hf_home / "hub") in msg
    assert "hf download nguha/legalbench --repo-type dataset --revision refs/convert/parquet" \
        in msg


def test_legalbench_single_file_and_defaults(fixtures):
    assert len(NON_EXACT_MATCH_TASKS) == 8 and "rule_qa" in NON_EXACT_MATCH_TASKS
    t = LegalBenchTask(test_size=5, calibration_size=2)
    test = t.load("test", source=str(fixtures / "legalbench.jsonl"))
    cal = t.load("calibration", source=str(fixtures / "legalbench.jsonl"))
    assert len(test) == 5 and len(cal) == 2
    assert {s.meta["legalbench_task"] for s in test} == {"hearsay", "abercrombie"}


def test_legalbench_schema_errors(tmp_path):
    f = tmp_path / "lb.jsonl"
    f.write_text('{"task": "hearsay", "answer": "Yes", "index": 0, "text": "t"}\n'
                 '{"task": "hearsay", "index": 1, "text": "t"}\n')
    with pytest.raises(DataSchemaError, match=r"lb\.jsonl.*row 1.*missing field 'answer'"):
        LegalBenchTask(tasks=("hearsay",)).load("test", source=str(f))
    f.write_text('{"task": "hearsay", "answer": "Yes", "index": 0}\n')
    with pytest.raises(DataSchemaError, match=r"row 0.*no input text"):
        LegalBenchTask(tasks=("hearsay",)).load("test", source=str(f))
