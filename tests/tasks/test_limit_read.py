"""``limit`` reads only what it needs: the rows after the limit are never decoded (a broken
row there does not stop a limited run), and the samples are the full read's first ones."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from df_ray.tasks import get_task
from df_ray.tasks._common import read_rows
from df_ray.tasks.base import DataSchemaError


def math_row(i: int, problem: str | None = None) -> dict:
    return {"problem": problem or f"What is {i} + {i}?", "solution": f"$\\boxed{{{2 * i}}}$",
            "answer": str(2 * i), "subject": "Algebra", "level": 1,
            "unique_id": f"test/algebra/{i}.json"}


def test_json_lines_stop_at_the_limit(tmp_path):
    p = tmp_path / "rows.jsonl"
    p.write_text("\n".join([*(json.dumps(math_row(i)) for i in range(4)), "{not json",
                            json.dumps(math_row(9))]) + "\n")
    assert [r["unique_id"] for r in read_rows(p, 4)] == [f"test/algebra/{i}.json"
                                                         for i in range(4)]
    assert read_rows(p, 0) == []
    with pytest.raises(DataSchemaError, match="line 5"):
        read_rows(p)  # the whole file: the broken row is found


@pytest.mark.parametrize("chunk", [1 << 20, 7, 1])  # elements cut by every chunk boundary
def test_a_json_list_is_decoded_one_row_at_a_time_up_to_the_limit(tmp_path, monkeypatch,
                                                                  chunk):
    import df_ray.tasks._common as common

    monkeypatch.setattr(common, "_CHUNK", chunk)
    p = tmp_path / "rows.json"
    good = ",\n  ".join(json.dumps(math_row(i)) for i in range(5))
    p.write_text(f"[\n  {good},\n  {{\"problem\": }}\n]")
    assert [r["answer"] for r in read_rows(p, 3)] == ["0", "2", "4"]
    assert len(read_rows(p, 5)) == 5
    with pytest.raises(DataSchemaError, match="not valid JSON"):
        read_rows(p, 6)
    with pytest.raises(DataSchemaError, match="not valid JSON"):
        read_rows(p)
    q = tmp_path / "short.json"
    q.write_text(json.dumps([math_row(0), math_row(1)]))
    assert read_rows(q, 10) == read_rows(q) == [math_row(0), math_row(1)]
    assert read_rows(tmp_path / "short.json", 1) == [math_row(0)]
    (tmp_path / "nums.json").write_text("[12345, 678,\n 9]")
    assert read_rows(tmp_path / "nums.json", 3) == [12345, 678, 9]
    (tmp_path / "open.json").write_text('[{"a": 1}, ')
    with pytest.raises(DataSchemaError, match="not closed"):
        read_rows(tmp_path / "open.json", 2)
    (tmp_path / "bad.json").write_text('[{"a": 1} {"b": 2}]')
    with pytest.raises(DataSchemaError, match="expected ','"):
        read_rows(tmp_path / "bad.json", 2)


def test_csv_and_parquet_take_their_first_rows(tmp_path):
    c = tmp_path / "rows.csv"
    c.write_text("a,b\n1,2\n3,4\n5,6\n")
    assert read_rows(c, 2) == [{"a": "1", "b": "2"}, {"a": "3", "b": "4"}]
    p = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([math_row(i) for i in range(6)]), p)
    assert read_rows(p, 2) == [math_row(0), math_row(1)]
    assert len(read_rows(p)) == 6


def test_a_limited_math_test_split_is_the_full_splits_prefix(tmp_path):
    task = get_task("math")
    rows = [math_row(i) for i in range(8)]
    full = tmp_path / "full.jsonl"
    full.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    broken = tmp_path / "broken.jsonl"  # the same rows, a broken one after the fourth
    broken.write_text("\n".join([*(json.dumps(r) for r in rows[:4]), "{oops"]) + "\n")
    want = task.load("test", source=str(full))[:4]
    assert task.load("test", source=str(broken), limit=4) == want
    assert task.load("test", source=str(full), limit=4) == want
    # a row given twice inside the prefix: the full file is read, the limit still met
    twice = tmp_path / "twice.jsonl"
    twice.write_text("\n".join(json.dumps(r) for r in [rows[0], rows[0], *rows[1:]]) + "\n")
    assert task.load("test", source=str(twice), limit=4) == want


def test_a_limited_gpqa_test_split_is_the_full_splits_prefix(tmp_path):
    from tests.helpers import FIXTURES

    task = get_task("gpqa")
    src = str(FIXTURES / "gpqa_diamond.csv")
    full = task.load("test", source=src, seed=3)
    assert task.load("test", source=src, seed=3, limit=2) == full[:2]
