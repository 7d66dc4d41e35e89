"""``limit`` reads only what it needs: the rows after the limit are never decoded (a broken
row there does not stop a limited run), and the samples are the full read's first ones."""

from __future__ import annotations

import json
import logging

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


def test_a_json_list_is_parsed_one_row_at_a_time_up_to_the_limit(tmp_path):
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
    (tmp_path / "nums.json").write_text("[12345, 678,\n 9, 0.25, null, true]")
    assert read_rows(tmp_path / "nums.json", 6) == read_rows(tmp_path / "nums.json") == [
        12345, 678, 9, 0.25, None, True]
    assert isinstance(read_rows(tmp_path / "nums.json", 4)[3], float)  # not a Decimal
    (tmp_path / "open.json").write_text('[{"a": 1}, ')
    with pytest.raises(DataSchemaError, match="not closed"):
        read_rows(tmp_path / "open.json", 2)
    (tmp_path / "bad.json").write_text('[{"a": 1} {"b": 2}]')
    with pytest.raises(DataSchemaError, match="not valid JSON"):
        read_rows(tmp_path / "bad.json", 2)


def test_gzipped_and_single_line_json_stream_too(tmp_path):
    import gzip

    rows = [math_row(i) for i in range(4)]
    gz = tmp_path / "rows.json.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        json.dump(rows, f)
    assert read_rows(gz, 2) == rows[:2] and read_rows(gz) == rows
    lines = tmp_path / "lines.json"  # JSON lines in a .json file
    lines.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert read_rows(lines, 3) == rows[:3] and read_rows(lines) == rows
    one = tmp_path / "one.json"
    one.write_text(json.dumps(rows[0]))
    assert read_rows(one, 5) == read_rows(one) == [rows[0]]
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'[{"a": "caf\xe9"}]')
    with pytest.raises(DataSchemaError, match="not UTF-8"):
        read_rows(latin, 1)


def test_iter_rows_stops_reading_where_its_reader_stops(tmp_path):
    from df_ray.tasks._common import iter_rows

    p = tmp_path / "rows.json"
    p.write_text("[" + ",".join(json.dumps(math_row(i)) for i in range(3)) + ", {broken")
    it = iter_rows(p)
    assert [next(it)["answer"] for _ in range(3)] == ["0", "2", "4"]
    it.close()  # the broken tail was never parsed
    t = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([math_row(i) for i in range(3000)]), t,
                   row_group_size=1000)
    assert [r["answer"] for r in iter_rows(t, columns=["answer"])][:2] == ["0", "2"]
    assert set(next(iter_rows(t, columns=["answer", "level"]))) == {"answer", "level"}


def test_csv_and_parquet_take_their_first_rows(tmp_path):
    c = tmp_path / "rows.csv"
    c.write_text("a,b\n1,2\n3,4\n5,6\n")
    assert read_rows(c, 2) == [{"a": "1", "b": "2"}, {"a": "3", "b": "4"}]
    p = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([math_row(i) for i in range(6)]), p)
    assert read_rows(p, 2) == [math_row(0), math_row(1)]
    assert len(read_rows(p)) == 6


def test_a_limited_math_test_split_is_the_full_splits_prefix(tmp_path, caplog):
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
    with caplog.at_level(logging.WARNING, logger="df_ray.tasks._common"):
        assert task.load("test", source=str(twice), limit=4) == want
        assert task.load("test", source=str(full), limit=20) == task.load("test", source=str(full))
    said = [r.getMessage() for r in caplog.records if "read whole" in r.getMessage()]
    assert len(said) == 1 and f"{twice} (" in said[0] and "rows repeated" in said[0], said


def test_a_limited_gpqa_test_split_is_the_full_splits_prefix(tmp_path):
    from tests.helpers import FIXTURES

    task = get_task("gpqa")
    src = str(FIXTURES / "gpqa_diamond.csv")
    full = task.load("test", source=src, seed=3)
    assert task.load("test", source=src, seed=3, limit=2) == full[:2]


def test_a_stratified_split_says_in_one_line_that_it_reads_the_whole_file(tmp_path, caplog):
    import logging

    from tests.helpers import write_mmlu_goa

    src = write_mmlu_goa(tmp_path / "mmlu.json", 6)
    task = get_task("mmlu_pro")
    with caplog.at_level(logging.WARNING, logger="df_ray.tasks._common"):
        got = task.load("test", source=str(src), limit=2)
        assert got == task.load("test", source=str(src))[:2]
    said = [r.getMessage() for r in caplog.records if "read whole" in r.getMessage()]
    assert len(said) == 1, said  # the limited read only
    size = src.stat().st_size / 1e6
    assert f"{src} ({size:.1f} MB)" in said[0] and "stratified by category" in said[0]
