"""Integrity you can check: a damaged cache part, results file or calibration file is never
used. It is dropped with a warning that names it (its calls are made again), or refused with
one line that names it."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from df_ray.core.calibration import (
    CHECKSUM_FIELD,
    CalibrationChecksumError,
    fit_calibration,
    load_calibration,
)
from df_ray.engines.base import ChatRequest, Completion, Message
from df_ray.pipeline import writers
from df_ray.pipeline.cache import SCHEMA, GenerationCache, entry_checksum
from tests.helpers import REPO, cli_env


def req(i: int) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", f"question {i}"),), seed=i)


def text(i: int) -> str:
    # random-looking, so that Parquet's compression stores the letter where a bit can hit it
    h = hashlib.sha256(f"t{i}".encode()).hexdigest()
    return f"{h[:24]}(B){h[24:48]}"


def fill(root, n: int = 8, parts: int = 1) -> GenerationCache:
    c = GenerationCache(str(root))
    per = n // parts
    for p in range(parts):
        c.put_many([(req(i), Completion(text(i), 10 + i, 3))
                    for i in range(p * per, (p + 1) * per)])
    return c


def _flip_in_text(path, needle: bytes) -> None:
    data = bytearray(path.read_bytes())
    i = data.find(needle)
    assert i >= 0, f"{needle!r} not stored literally in {path.name}"
    data[i + len(needle) - 1] ^= 0x01  # "(B" -> "(C": the bit flip of the campaign
    path.write_bytes(bytes(data))


def test_a_bit_flipped_part_is_never_used_and_is_named(tmp_path, caplog):
    fill(tmp_path)
    (part,) = sorted(tmp_path.glob("part-*.parquet"))
    _flip_in_text(part, text(3)[20:26].encode())
    with caplog.at_level(logging.WARNING, logger="df_ray.pipeline.cache"):
        c = GenerationCache(str(tmp_path))
    # the damaged value is never served: the page's CRC (or the entry's checksum) refuses it
    assert c.get(req(3).key()) is None
    assert all(c.get(req(i).key()) is None or "(B)" in c.get(req(i).key()).text
               for i in range(8))
    assert part.name in caplog.text
    assert c.bad_parts or c.bad_entries


def test_an_entry_whose_checksum_does_not_match_is_dropped_alone(tmp_path, caplog):
    # a part whose pages are intact but whose entry was changed (e.g. rewritten by a tool):
    # only that entry is dropped, by name; the others are served
    rows = []
    for i in range(4):
        text = f"text {i}"
        rows.append({"key": req(i).key(), "model": "m", "revision": "", "seed": i,
                     "text": text if i != 2 else "tampered", "prompt_tokens": 1,
                     "completion_tokens": 1, "created": 0.0,
                     "checksum": entry_checksum(req(i).key(), text, 1, 1)})
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), tmp_path / "part-1-x.parquet")
    with caplog.at_level(logging.WARNING, logger="df_ray.pipeline.cache"):
        c = GenerationCache(str(tmp_path))
    assert c.get(req(2).key()) is None
    assert [c.get(req(i).key()).text for i in (0, 1, 3)] == ["text 0", "text 1", "text 3"]
    assert c.bad_entries == [(str(tmp_path / "part-1-x.parquet"), req(2).key())]
    assert req(2).key() in caplog.text and "part-1-x.parquet" in caplog.text


def test_parts_without_checksums_are_still_read(tmp_path):
    legacy = SCHEMA.remove(SCHEMA.get_field_index("checksum"))
    pq.write_table(pa.Table.from_pylist(
        [{"key": req(0).key(), "model": "m", "revision": "", "seed": 0, "text": "old",
          "prompt_tokens": 1, "completion_tokens": 2, "created": 0.0}], schema=legacy),
        tmp_path / "part-0-legacy.parquet")
    c = GenerationCache(str(tmp_path))
    assert c.get(req(0).key()) == Completion("old", 1, 2)
    assert c.legacy_parts == 1


def test_compact_keeps_every_call_beside_a_writer_and_drops_damaged_entries(tmp_path):
    fill(tmp_path, n=12, parts=3)
    reader = GenerationCache(str(tmp_path))
    writer = GenerationCache(str(tmp_path))
    compactor = GenerationCache(str(tmp_path))
    # a writer adds a part after the compactor listed the root (it must stay)
    real_parts = compactor._parts
    late = []

    def parts_then_write():
        listed = real_parts()
        if not late:
            late.append(writer.put_many([(req(100), Completion("late", 1, 1))]))
        return listed

    compactor._parts = parts_then_write
    compactor.compact()
    figures = compactor.compaction
    compactor._parts = real_parts
    assert figures["parts"] == 3 and figures["entries"] == 12 and figures["dropped"] == 0
    after = GenerationCache(str(tmp_path))
    assert len(after) == 13 and after.get(req(100).key()).text == "late"
    assert len(list(tmp_path.glob("part-*.parquet"))) == 2  # the merged one and the late one
    # a reader that listed the old parts before the compaction still finds every call
    reader.refresh()
    assert len(reader) == 13


def test_temporary_parts_of_dead_writers_are_removed_and_only_theirs(tmp_path):
    fill(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    host = writers.writer_tag().partition("~")[0]
    stale = tmp_path / f".tmp-{host}~{dead.stdout.strip()}-part-1-a.parquet"
    alive = tmp_path / f".tmp-{host}~{os.getpid()}-part-2-b.parquet"
    stale.write_bytes(b"half")
    alive.write_bytes(b"in progress")
    c = GenerationCache(str(tmp_path))  # the next run's opening of the cache removes it
    assert not stale.exists() and alive.exists()
    stale.write_bytes(b"half")  # a writer that died after this cache was opened
    c.compact()
    assert c.compaction["tmp_removed"] == 1
    assert not stale.exists() and alive.exists()


@pytest.mark.slow  # a df-ray subprocess
def test_cli_cache_compact_says_what_it_did(tmp_path):
    fill(tmp_path, n=6, parts=2)
    out = subprocess.run([sys.executable, "-m", "df_ray.cli", "cache", "compact", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd=REPO, env=cli_env())
    assert out.returncode == 0, out.stderr
    assert "6 calls kept in one part (merged 2 parts" in out.stdout
    assert len(list(tmp_path.glob("part-*.parquet"))) == 1


# ----------------------------------------------------------------------------- calibration

def _calibration(tmp_path):
    cal = fit_calibration([], agents=["a1", "a2"], benchmark="mmlu_pro", gamma=0.5)
    return cal.save(tmp_path / "mmlu_pro-00000000.json")


def test_a_calibration_file_carries_its_checksum_and_a_changed_one_is_refused(tmp_path):
    path = _calibration(tmp_path)
    d = json.loads(path.read_text())
    assert CHECKSUM_FIELD in d
    load_calibration(path)  # intact: read
    d["gamma"] = 0.25
    path.write_text(json.dumps(d))
    with pytest.raises(CalibrationChecksumError, match=str(path)):
        load_calibration(path)


@pytest.mark.parametrize("content, says", [
    ('{"schema_version": 1, "agents": ["a1"', "is not valid JSON"),
    ('{"schema_version": 1, "agents": ["a1"], "benchmark": "b", "n_samples": 1, '
     '"fitted_at": "x", "gamma": 0.5, "agent_stats": "oops"}',
     "field 'agent_stats' must be a JSON object"),
])
def test_a_damaged_calibration_file_is_named_with_what_is_wrong(tmp_path, content, says):
    path = tmp_path / "mmlu_pro-00000000.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=says) as e:
        load_calibration(path)
    assert str(path) in str(e.value)


# --------------------------------------------------------------------------- results files

def _results_file(tmp_path):
    from df_ray.config import RunConfig
    from df_ray.pipeline.results import ResultsFile

    cfg = RunConfig.model_validate({
        "name": "df", "benchmark": "mmlu_pro", "results_dir": str(tmp_path / "results"),
        "backbones": {"b": {"kind": "scripted", "model": "m"}},
        "agents": [{"id": "a1", "backbone": "b"}], "method": "single"})
    return ResultsFile(cfg, "sweep")


def test_a_changed_samples_file_is_refused_naming_it(tmp_path):
    from df_ray.pipeline.results import CorruptResultsError, read_results

    f = _results_file(tmp_path)
    path = f.commit()  # an empty, well-formed file with its digest beside it
    assert read_results(path).num_rows == 0
    assert (path.parent / "samples.parquet.sha256").read_text().strip() == f.sha256
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptResultsError, match="does not match its checksum") as e:
        read_results(path)
    assert str(path) in str(e.value)


def test_the_next_writer_removes_a_killed_writers_temporary_file(tmp_path):
    first = _results_file(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    host = writers.writer_tag().partition("~")[0]
    stale = first.dir / f".samples-{host}~{dead}-0123456789ab.parquet.tmp"
    stale.write_bytes(b"half a file")
    mine = first.dir / f".samples-{host}~{os.getpid()}-ba9876543210.parquet.tmp"
    mine.write_bytes(b"being written")
    _results_file(tmp_path)  # the rerun's writer of the same configuration
    assert not stale.exists() and mine.exists()


def test_results_paths_stay_inside_results_dir(tmp_path):
    from df_ray.pipeline.results import safe_name

    assert safe_name("..") == "_." and safe_name(".hidden") == "_hidden"
    assert "/" not in safe_name("a/../../b")
