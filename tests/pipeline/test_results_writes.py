"""The driver's side of the results: graded tables split by configuration, and a results file
that buffers its rows into few Parquet row groups, losing and reordering none."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import driver_config, make_sample


@pytest.fixture(scope="module")
def graded_table() -> pa.Table:
    """Twelve graded DarkForest rows, as the stage sends them (configuration 0)."""
    from df_ray.engines.scripted import ScriptedEngine
    from df_ray.evaluation import Driver, Member
    from df_ray.pipeline.rows import encode_results
    from tests.helpers import Script, answer

    cfg = driver_config(name="df")
    driver = Driver([Member.from_config(cfg)], ScriptedEngine("scripted", Script(
        default=answer("B"))))
    graded = driver.finish(driver.run([make_sample(f"q{i}") for i in range(12)]))
    return pa.table(encode_results(graded))


def test_rows_split_by_configuration_in_order():
    from df_ray.pipeline.runner import by_config

    table = pa.table({"config": [0, 1, 0, 2, 1], "x": ["a", "b", "c", "d", "e"]})
    split = {k: rows.column("x").to_pylist() for k, rows in by_config(table)}
    assert split == {0: ["a", "c"], 1: ["b", "e"], 2: ["d"]}
    assert list(dict(by_config(table))) == [0, 1, 2]  # first seen first
    one = pa.concat_tables([pa.table({"config": [3], "x": ["a"]}),
                            pa.table({"config": [3], "x": ["b"]})])
    ((k, rows),) = by_config(one)
    assert k == 3 and rows.column("x").to_pylist() == ["a", "b"]
    assert rows.column("x").num_chunks == 1  # Ray Data's chained blocks made one


@pytest.mark.parametrize("write_rows", [1, 3, None])
def test_buffered_writes_keep_every_row_in_order(graded_table, tmp_path, monkeypatch,
                                                 write_rows):
    """Rows added one at a time come out of the file as added, in as many row groups as the
    buffer's size makes (a row's bytes: a group per add, as before buffering; three rows'
    bytes: a group per three or four adds; the default: one group)."""
    from df_ray.pipeline import results
    from df_ray.pipeline.results import ResultsFile, read_results

    cfg = driver_config(name="df", results_dir=str(tmp_path / "results"))
    if write_rows is not None:  # the smallest row's bytes as the file buffers it
        probe, sizes = ResultsFile(cfg, "probe"), []
        for i in range(graded_table.num_rows):
            before = probe._pending_bytes
            probe.add(graded_table.slice(i, 1))
            sizes.append(probe._pending_bytes - before)
        monkeypatch.setattr(results, "WRITE_BYTES", write_rows * min(sizes))
    out = ResultsFile(cfg, "sweep")
    for i in range(graded_table.num_rows):
        out.add(graded_table.slice(i, 1))
    out.close()
    path = out.commit()
    table = read_results(path)
    assert table.column("sample_id").to_pylist() == graded_table.column(
        "sample_id").to_pylist()
    assert table.column("final_answer").to_pylist() == ["B"] * graded_table.num_rows
    assert out.acc.n == graded_table.num_rows
    groups = pq.ParquetFile(path).num_row_groups
    if write_rows is None:
        assert groups == 1
    elif write_rows == 1:
        assert groups == graded_table.num_rows
    else:
        assert 1 < groups <= graded_table.num_rows // 3
