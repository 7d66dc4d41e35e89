"""``benchmark: file``: a question set from a local file, by configuration alone, in every
format the streaming reader reads, each kind read and graded as its built-in benchmark."""

from __future__ import annotations

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from df_ray.core.parsing import parse
from df_ray.tasks import get_task, task_for
from df_ray.tasks.base import DataSchemaError, DataUnavailable
from df_ray.tasks.file import FileArgs, FileTask

ROWS = [{"qid": f"r{i}", "q": f"Which is the {i}th option?", "choices": ["red", "green", "blue"],
         "gold": ["A", 1, "blue"][i % 3]} for i in range(6)]
GOLD = ["A", "B", "C", "A", "B", "C"]


def write(path, rows):
    fmt = path.name.split(".", 1)[1]
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist([{**r, "gold": str(r["gold"])} for r in rows]),
                       path)
    elif fmt == "csv":
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows({**r, "choices": json.dumps(r["choices"])} for r in rows)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        path.write_text(json.dumps(rows, indent=1))
    return path


def choice_task(path, **over) -> FileTask:
    return FileTask(**{"path": str(path), "question_field": "q", "options_field": "choices",
                       "answer_field": "gold", "id_field": "qid", "kind": "choice", **over})


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv", "parquet"])
def test_every_format_gives_the_same_samples(tmp_path, fmt):
    task = choice_task(write(tmp_path / f"qs.{fmt}", ROWS))
    got = task.load("test")
    assert [s.id for s in got] == [f"file/r{i}" for i in range(6)]
    assert [s.gold for s in got] == GOLD  # a letter, a 0-based index or the option's text
    assert got[0].question == "Which is the 0th option?\n\nOptions:\n(A) red\n(B) green\n(C) blue"
    assert task.load("test", limit=2) == got[:2]
    assert task.parse_spec(got[0]).n_options == 3
    json_task = choice_task(write(tmp_path / "ref.jsonl", ROWS))
    assert [(s.id, s.question, s.gold) for s in got] == [
        (s.id, s.question, s.gold) for s in json_task.load("test")]


def test_a_choice_answer_is_graded_on_its_letter(tmp_path):
    task = choice_task(write(tmp_path / "qs.jsonl", ROWS))
    s = task.load("test")[1]
    assert "Answer: X" in task.agent_prompt(s) and "A, B, C" in task.agent_prompt(s)
    right = parse("Green it is.\nAnswer: B\nConfidence: 0.8", task.parse_spec(s))
    wrong = parse("Answer: C", task.parse_spec(s))
    assert task.grade(s, right).correct and not task.grade(s, wrong).correct
    assert task.gold_key(s) == right.answer


def test_math_and_label_kinds_grade_as_their_benchmarks(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(json.dumps({"problem": "Half of one?", "answer": "\\frac{1}{2}"}) + "\n")
    task = FileTask(path=str(p), question_field="problem", kind="math")
    (s,) = task.load("test")
    assert s.id.startswith("file/") and s.gold == "\\frac{1}{2}"
    assert task.grade(s, parse("So \\boxed{0.5}", task.parse_spec(s))).correct
    assert not task.grade(s, parse("\\boxed{2}", task.parse_spec(s))).correct
    lab = tmp_path / "l.csv"
    lab.write_text('text,label,allowed\n"Is it?",Yes,"[""Yes"", ""No""]"\n')
    task = FileTask(path=str(lab), question_field="text", answer_field="label",
                    options_field="allowed", kind="label")
    (s,) = task.load("test")
    assert task.parse_spec(s).labels == ("Yes", "No")
    assert "Allowed labels: Yes, No" in task.agent_prompt(s)
    assert task.grade(s, parse("Answer: yes", task.parse_spec(s))).correct
    assert not task.grade(s, parse("Answer: No", task.parse_spec(s))).correct


def test_bad_rows_and_bad_args_say_what_is_wrong(tmp_path):
    bad = write(tmp_path / "bad.jsonl", [*ROWS[:2], {**ROWS[2], "gold": "purple"}])
    with pytest.raises(DataSchemaError, match=r"row 2: field 'gold' 'purple' is neither"):
        choice_task(bad).load("test")
    assert len(choice_task(bad).load("test", limit=2)) == 2  # the broken row is not read
    clash = write(tmp_path / "clash.jsonl", [ROWS[0], {**ROWS[1], "qid": "r0"}])
    with pytest.raises(DataSchemaError, match="different content"):
        choice_task(clash).load("test")
    with pytest.raises(ValueError, match="kind"):
        FileTask(path="x", kind="essay")
    with pytest.raises(TypeError):
        FileTask(path="x", questions="q")  # type: ignore[call-arg]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        FileTask(path=str(tmp_path / "none.jsonl")).load("test")
    with pytest.raises(DataUnavailable, match="calibration_source"):
        choice_task(bad).load("calibration")


def test_a_calibration_source_is_every_row_of_its_file(tmp_path):
    task = choice_task(write(tmp_path / "qs.jsonl", ROWS))
    other = write(tmp_path / "held.jsonl", [{**r, "qid": f"h{i}"} for i, r in enumerate(ROWS)])
    assert [s.id for s in task.held_out_pool(str(other))] == [f"file/h{i}" for i in range(6)]


def test_configuration_alone_builds_it(tmp_path):
    from df_ray.config import RunConfig

    src = write(tmp_path / "qs.jsonl", ROWS)
    cfg = RunConfig.model_validate({
        "benchmark": "file",
        "benchmark_args": {"path": str(src), "question_field": "q", "options_field": "choices",
                           "answer_field": "gold", "id_field": "qid"},
        "backbones": {"b": {"kind": "scripted", "model": "m"}},
        "agents": [{"id": "a1", "backbone": "b"}], "coordinator": {"id": "c", "backbone": "b"}})
    task = task_for(cfg)
    assert isinstance(task, FileTask) and task.kind == "choice"
    assert len(task.load("test")) == 6
    assert get_task("file").kind == "choice"  # buildable bare, as every benchmark is
    assert task.data_location(None)[0] == f"local {src}"
    from df_ray.evaluation.plan import samples_key

    other = cfg.model_copy(update={"benchmark_args": {**cfg.benchmark_args, "path": "o.csv"}})
    assert samples_key(other) != samples_key(cfg)  # two files, two sample sets
    assert all(f.description for f in FileArgs.model_fields.values())


@pytest.mark.slow
def test_a_file_benchmark_runs_on_ray_as_in_process(tmp_path, ray_local):
    """The stage actors build the file benchmark from the configuration alone, and give the
    rows ``df_ray.evaluate`` gives in this process."""
    import pyarrow.parquet as pq

    import df_ray
    from df_ray.config import RunConfig
    from tests.helpers import base_config, run_pipeline

    src = write(tmp_path / "qs.parquet", ROWS)
    base = base_config(tmp_path, src)
    base.pop("source")
    base.update(benchmark="file", benchmark_args={
        "path": str(src), "question_field": "q", "options_field": "choices",
        "answer_field": "gold", "id_field": "qid"})
    cfg = RunConfig.model_validate(base)
    samples = cfg.build_task().load("test")
    res = run_pipeline(cfg, samples, track=False)
    ray_rows = pq.read_table(res.samples_path).to_pylist()
    ev = df_ray.evaluate(cfg)  # its samples loaded here from the same configuration
    local = {r.sample_id: r.to_dict() for r in ev.rows}
    assert sorted(r["sample_id"] for r in ray_rows) == sorted(local) == [
        f"file/r{i}" for i in range(6)]
    for r in ray_rows:
        for k in ("correct", "final_answer", "n_calls", "total_tokens"):
            assert r[k] == local[r["sample_id"]][k], (r["sample_id"], k)
    assert res.metrics["accuracy"] == ev.metrics["accuracy"]
    assert 0 < ev.metrics["accuracy"] < 1  # the scripted agents get some right, not all
