"""Fault table rows of the fourth fault campaign (docs/faults.md), each through a real
``df-ray`` process: one ``df-ray: ...`` line naming the problem, its documented exit status,
no traceback, found before Ray where it can be."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from df_ray.core.calibration import CHECKSUM_FIELD, content_checksum
from tests.helpers import REPO, base_config, cli_env, one_line, write_mmlu_goa

pytestmark = pytest.mark.slow  # df-ray subprocesses


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "df_ray.cli", *args], cwd=REPO,
                          env=cli_env(), capture_output=True, text=True, timeout=timeout)


def _write(tmp_path: Path, base: dict, name: str = "faults") -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": base, "runs": [{}]}))
    return path


@pytest.fixture
def base(tmp_path):
    src = write_mmlu_goa(tmp_path / "mmlu.json", 3)
    return base_config(tmp_path, src)


def _calibration(**agent_a1: object) -> dict:
    stats = {a: {"n_valid": 4, "n_correct": 2} for a in ("a1", "a2", "a3")}
    stats["a1"].update(agent_a1)
    return {"schema_version": 1, "benchmark": "mmlu_pro", "agents": ["a1", "a2", "a3"],
            "n_samples": 4, "fitted_at": "2025-01-01T00:00:00+00:00", "gamma": 0.5,
            "agent_stats": stats, "patterns": {}, "pairs": {}}


@pytest.mark.parametrize("checksummed", [False, True])
@pytest.mark.parametrize("edit, says", [
    ({"n_valid": -5}, "field 'agent_stats.a1.n_valid' is -5: counts cannot be negative"),
    ({"n_correct": 9}, "field 'agent_stats.a1.n_correct' is 9, more than "
                       "'agent_stats.a1.n_valid' (4)"),
    ({"n_valid": 2.5}, "field 'agent_stats.a1.n_valid' is 2.5: counts must be whole"),
    ({"n_valid": "1e999"}, "field 'agent_stats.a1.n_valid' is inf"),
])
def test_impossible_calibration_is_refused_with_the_field(tmp_path, base, edit, says,
                                                          checksummed):
    data = _calibration(**edit)
    text = json.dumps(data)
    if edit.get("n_valid") == "1e999":  # a JSON number Python reads as inf
        text = text.replace('"1e999"', "1e999")
        data = json.loads(text)
    if checksummed:  # a file that was written so, not changed after its fit
        data[CHECKSUM_FIELD] = content_checksum(data)
        text = json.dumps(data).replace('"n_valid": Infinity', '"n_valid": 1e999')
    path = tmp_path / "cal.json"
    path.write_text(text)
    base["method_args"] = {}  # full DarkForest: it reads the calibration
    base["calibration"]["path"] = str(path)
    out = _cli("run", "--config", str(_write(tmp_path, base)))
    one_line(out, 2, "calibration.path", "cal.json", says)
    assert "Ray" not in out.stdout + out.stderr  # refused before Ray starts


def test_a_calibration_of_impossible_size_is_refused(tmp_path, base):
    data = _calibration()
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data).replace('"n_samples": 4', '"n_samples": 1e999'))
    base["method_args"] = {}
    base["calibration"]["path"] = str(path)
    one_line(_cli("run", "--config", str(_write(tmp_path, base))), 2,
             "cal.json", "field 'n_samples' is inf")


def _native_rows(n: int) -> list[dict]:
    return [{"question_id": i, "question": f"Which option fits item {i}?",
             "options": ["w", "x", "y", "z"], "answer": "ABCD"[i % 4],
             "category": "reliability"} for i in range(n)]


@pytest.mark.parametrize("write, says", [
    (lambda p: p.write_bytes(json.dumps(_native_rows(3)).replace(
        "item 1", "caf\u00e9 1").encode("latin-1")),
     "not UTF-8 text: byte 0xe9"),
    (lambda p: p.write_text(json.dumps(_native_rows(3)).replace(
        '"question_id": 2', '"question_id": ' + "9" * 5000)),
     "holds an integer of more than 4,300 digits"),
    (lambda p: p.write_text(json.dumps([*_native_rows(3), {**_native_rows(3)[1], "question": "Another question entirely?"}])),
     "1 id(s) appear more than once with different content (question or gold answer): "
     "'mmlu_pro/1'"),
])
def test_bad_data_bytes_and_conflicting_ids_are_one_data_error_before_ray(
        tmp_path, base, write, says):
    data = tmp_path / "native.json"
    write(data)
    base["source"] = str(data)
    out = _cli("run", "--config", str(_write(tmp_path, base)))
    one_line(out, 2, "df-ray: data error:", says)
    assert "Ray" not in out.stdout + out.stderr


@pytest.mark.parametrize("limit", [None, 3, 5, 20])
def test_identical_repeated_rows_are_read_once_and_said_once(tmp_path, limit):
    """Whole or limited, the repeats are said once."""
    from df_ray.tasks import get_task

    data = tmp_path / "native.json"
    rows = _native_rows(4)
    data.write_text(json.dumps([*rows[:3], rows[1], rows[2], rows[1], rows[3]]))
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("df_ray.tasks._common").addHandler(handler)
    try:
        samples = get_task("mmlu_pro").load("test", source=str(data), limit=limit)
    finally:
        logging.getLogger("df_ray.tasks._common").removeHandler(handler)
    ids = [f"mmlu_pro/{i}" for i in range(4)]
    got = [s.id for s in samples]
    assert len(set(got)) == len(got) == len(ids[:limit]) and set(got) <= set(ids)
    said = [r.getMessage() for r in records]
    # MMLU-Pro reads its file whole (its splits are stratified over every row): with a limit
    # it says so, once, beside the repeats, once
    whole = [m for m in said if "is read whole even with a limit" in m]
    assert len(whole) == (0 if limit is None else 1), said
    (notice,) = [m for m in said if m not in whole]
    assert notice.startswith("data: 3 repeated row(s) with the same id and content were read "
                             "once ('mmlu_pro/1', 'mmlu_pro/2')")


# Too few inodes (nr_inodes=3) was a second case while every batch and round wrote a part of
# its own; a stage now writes the answers of the batches that end together as one part, so
# whether a three-sample run needs a second inode depends on timing. Both cases end in the
# same ENOSPC, so the size case stands for both.
@pytest.mark.parametrize("options, says", [
    ("size=12k,mode=0755", "No space left on device"),
])
def test_cache_root_that_fills_during_a_run_is_one_environment_line(tmp_path, base, options,
                                                                    says):
    """cache_root on a tmpfs with room for the write probe but not for the calls' parts: one
    environment line naming the folder, exit 1 (a Ray traceback before), then the rerun with
    room finishes without making a cached call again (the answers that could not be written
    are made again)."""
    from tests.helpers import run_to_end, tmpfs
    from tests.reliability.responders import read_call_log as calls_of

    full = tmp_path / "full"
    with tmpfs(full, options):
        base["cache_root"] = str(full)
        sweep = _write(tmp_path, base)
        log, calls = tmp_path / "run1.log", tmp_path / "calls.log"
        rc = run_to_end(["run", "--config", str(sweep)], log, calls, 900)
        done = subprocess.CompletedProcess([], rc, stdout="",
                                           stderr=log.read_text(errors="replace"))
        one_line(done, 1, "environment error", says, str(full), "free space")
        from df_ray.pipeline.cache import GenerationCache

        kept = set(GenerationCache(str(full))._entries)  # what was written before it filled
        subprocess.run(["mount", "-o", "remount,size=64m,nr_inodes=10000", str(full)],
                       check=True)
        log2, calls2 = tmp_path / "run2.log", tmp_path / "calls2.log"
        rc2 = run_to_end(["run", "--config", str(sweep)], log2, calls2, 900)
        assert rc2 == 0, log2.read_text(errors="replace")[-3000:]
        assert not kept & set(calls_of(calls2)), "a cached call was made again"


@pytest.mark.parametrize("edit, says", [
    (lambda b: b["backbones"].update({"qwen(7b)": b["backbones"].pop("b1")})
     or b["agents"][0].update(backbone="qwen(7b)"),
     "backbone name 'qwen(7b)' holds '(', ')': MLflow logs it in parameter names"),
    (lambda b: b["agents"][0].update(id="a" * 260), "at most 100 characters"),
])
def test_names_mlflow_cannot_log_are_refused_by_validate(tmp_path, base, edit, says):
    edit(base)
    one_line(_cli("validate", "--config", str(_write(tmp_path, base))), 2, says)


@pytest.mark.parametrize("field", ["results_dir", "cache_root", "tracking.uri"])
def test_a_nul_byte_in_a_path_is_refused_before_ray(tmp_path, base, field):
    if field == "tracking.uri":
        base["tracking"]["uri"] = f"sqlite:///{tmp_path}/ml\x00flow.db"
    else:
        base[field] = str(tmp_path / "a\x00b")
    out = _cli("run", "--config", str(_write(tmp_path, base)))
    one_line(out, 2, field, "holds a NUL byte")
    assert "Ray" not in out.stdout + out.stderr


@pytest.mark.parametrize("in_the_way", ["samples.parquet", "samples.parquet.sha256"])
def test_a_folder_in_the_way_of_the_results_file_is_found_before_ray(tmp_path, base,
                                                                     in_the_way):
    from df_ray.config import load_config
    from df_ray.pipeline.results import results_path

    sweep = _write(tmp_path, base)
    (cfg,) = load_config(sweep).expand()
    blocked = results_path(cfg, "faults") / in_the_way
    blocked.mkdir(parents=True)
    out = _cli("run", "--config", str(sweep))
    one_line(out, 2, f"{blocked} is a folder, where the results file goes; move it aside")
    assert "Ray" not in out.stdout + out.stderr  # not after every call was made


def _sweep_job(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "jobs/sweep.py", *args], cwd=REPO, env=cli_env(),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("edit, rc, says", [
    (lambda tmp, b: (tmp / "mmlu.json").write_text(json.dumps([{"question": "no gold"}])),
     2, "df-ray: data error:"),
    (lambda tmp, b: (tmp / "mlflow.db").write_bytes(b"this is not a database" * 100),
     2, "not a readable sqlite database"),
    (lambda tmp, b: ((tmp / "cal.json").write_text(json.dumps(
        {**_calibration(), "agents": ["x1", "x2", "x3"],
         "agent_stats": {}})), b.update(method_args={}),
                     b["calibration"].update(path=str(tmp / "cal.json"))),
     2, "was fitted for agents ['x1', 'x2', 'x3']"),
])
def test_every_failure_of_the_sweep_job_is_one_line(tmp_path, base, edit, rc, says):
    """``jobs/sweep.py`` (the ``ray job submit`` entry point) ends as ``df-ray run`` does."""
    edit(tmp_path, base)
    one_line(_sweep_job("--config", str(_write(tmp_path, base))), rc, says)


@pytest.mark.parametrize("limit, said", [
    (3, 0),  # the first three rows are distinct: nothing repeated was read
    (5, 1),  # the prefix holds repeats: read again whole, said once (not once per read)
    (20, 1),  # past the file's end: read again whole, said once
    (None, 1),
])
def test_a_limited_read_says_its_repeats_once(caplog, limit, said):
    from df_ray.tasks._common import dedupe_ids, load_prefix
    from df_ray.tasks.base import Sample

    rows = [Sample(id=f"q{i}", task="t", question=f"Q{i}", gold="A")
            for i in (0, 1, 2, 1, 2, 1, 3)]
    reads = []

    def load(n):  # as a loader does: its rows made samples, one per id
        reads.append(n)
        return dedupe_ids(rows if n is None else rows[:n])

    with caplog.at_level("WARNING", logger="df_ray.tasks._common"):
        got = load_prefix(load, limit)
    assert [s.id for s in got] == ["q0", "q1", "q2", "q3"][:limit]
    assert len([r for r in caplog.records if "repeated row" in r.getMessage()]) == said
    assert reads == {3: [3], 5: [5, None], 20: [20, None], None: [None]}[limit]
