"""Calibration counting, lookups, files and mismatch errors."""

from __future__ import annotations

import json

import pytest

from df_ray.core.calibration import (
    AgentStats,
    Calibration,
    CalibrationMismatchError,
    CalibrationRecord,
    PairStats,
    PatternStats,
    fit_calibration,
    load_calibration,
)
from df_ray.core.types import Observation
from df_ray.evaluation.calibration_files import calibration_filename, find_calibration

Obs = Observation
AGENTS = ("a", "b", "c")

# A hand-made held-out set.
#   r1 gold "1":  a "1"  b "1"  c "2"      a right, b right, c wrong
#   r2 gold "5":  a "3"  b "3"  c "5"      a wrong, b wrong (same), c right
#   r3 gold "9":  a "4"  b --   c "6"      a wrong, b invalid, c wrong (different)
#   r4 code:      a "p"  b "q"  c "p"      correct = {p: True, q: False}
RECORDS = [
    CalibrationRecord("r1", (Obs("a", "1"), Obs("b", "1"), Obs("c", "2")), gold="1"),
    CalibrationRecord("r2", (Obs("a", "3"), Obs("b", "3"), Obs("c", "5")), gold="5"),
    CalibrationRecord("r3", (Obs("a", "4"), Obs.invalid("b"), Obs("c", "6")), gold="9"),
    CalibrationRecord("r4", (Obs("a", "p"), Obs("b", "q"), Obs("c", "p")),
                      correct={"p": True, "q": False}),
]


@pytest.fixture
def cal() -> Calibration:
    return fit_calibration(RECORDS, agents=AGENTS, benchmark="toy",
                           fitted_at="2025-01-01T00:00:00+00:00")


def test_agent_counts(cal):
    # a: valid in r1-r4, right in r1, r4 -> alpha = 3/6; b: valid in r1, r2, r4, right in r1
    # -> alpha = 2/5; c: valid in r1-r4, right in r2, r4 -> alpha = 3/6
    assert cal.agent_stats["a"] == AgentStats(4, 2)
    assert cal.agent_stats["b"] == AgentStats(3, 1)
    assert cal.agent_stats["c"] == AgentStats(4, 2)
    assert cal.alpha("a") == pytest.approx(0.5)
    assert cal.alpha("b") == pytest.approx(0.4)
    assert cal.n_samples == 4


def test_pattern_counts(cal):
    # (a,b): r1 right, r2 wrong -> R = 2/4; (c): r1 wrong, r2 right, r3 wrong -> R = 2/5
    # (a): r3 wrong -> 1/3; (a,c): r4 right -> 2/3; (b): r4 wrong -> 1/3
    assert cal.pattern_stats == {
        ("a", "b"): PatternStats(2, 1), ("c",): PatternStats(3, 1), ("a",): PatternStats(1, 0),
        ("a", "c"): PatternStats(1, 1), ("b",): PatternStats(1, 0),
    }
    assert cal.pattern_reliability(("a", "b")) == pytest.approx(0.5)
    assert cal.pattern_reliability(("b", "a")) == pytest.approx(0.5)  # unsorted accepted
    assert cal.pattern_reliability(("c",)) == pytest.approx(0.4)
    assert cal.pattern_reliability(("a", "b", "c")) == 0.5  # never seen: Laplace prior


def test_pair_counts_and_delta(cal):
    # (a,b) both wrong in r2 only, same answer -> kappa = 2/3
    # (a,c) both wrong in r3 only, different -> kappa = 1/3
    # (b,c) never both wrong -> kappa = 1/2
    assert cal.pair_stats[("a", "b")] == PairStats(1, 1)
    assert cal.pair_stats[("a", "c")] == PairStats(1, 0)
    assert cal.pair_stats[("b", "c")] == PairStats(0, 0)
    assert cal.kappa("b", "a") == pytest.approx(2 / 3)
    assert cal.kappa("a", "c") == pytest.approx(1 / 3)
    assert cal.kappa("b", "c") == pytest.approx(0.5)
    # delta at gamma 0.5: a: 1 - 0.5 * 2/3; b: 1 - 0.5 * 2/3; c: 1 - 0.5 * 1/2
    assert cal.delta("a") == pytest.approx(2 / 3)
    assert cal.delta("b") == pytest.approx(2 / 3)
    assert cal.delta("c") == pytest.approx(0.75)
    assert cal.delta("c", 1.0) == pytest.approx(0.5)
    assert cal.delta("c", 0.0) == 1.0
    with pytest.raises(ValueError):
        cal.kappa("a", "a")
    with pytest.raises(ValueError):
        cal.delta("a", 2.0)


def test_unknown_agent_priors(cal):
    assert cal.alpha("zz") == 0.5
    assert cal.delta("zz") == pytest.approx(0.75)  # kappa(zz, .) = 1/2
    single = fit_calibration([], agents=["a"], benchmark="toy")
    assert single.delta("a") == 1.0 and single.n_samples == 0


def test_correct_mapping_takes_precedence_over_gold():
    rec = CalibrationRecord("x", (Obs("a", "1"), Obs("b", "2")), gold="1",
                            correct={"1": False, "2": True})
    cal = fit_calibration([rec], agents=["a", "b"], benchmark="code")
    assert cal.agent_stats["a"] == AgentStats(1, 0)
    assert cal.agent_stats["b"] == AgentStats(1, 1)
    # key missing from `correct` falls back to gold
    assert CalibrationRecord("y", (), gold="3", correct={"1": True}).is_correct("3")


def test_fit_rejects_bad_input():
    with pytest.raises(ValueError, match="'zz'"):
        fit_calibration([CalibrationRecord("x", (Obs("zz", "1"),), gold="1")],
                        agents=AGENTS, benchmark="toy")
    with pytest.raises(ValueError, match="neither gold nor correct"):
        fit_calibration([CalibrationRecord("x", (Obs("a", "1"),))], agents=AGENTS, benchmark="t")
    with pytest.raises(ValueError):
        fit_calibration([], agents=["a|b"], benchmark="t")
    with pytest.raises(ValueError):
        fit_calibration([], agents=["a", "a"], benchmark="t")


def test_duplicate_agent_in_record_counted_once():
    rec = CalibrationRecord("x", (Obs("a", "1", quality=1.0), Obs("a", "2", quality=0.4)), gold="2")
    cal = fit_calibration([rec], agents=["a"], benchmark="t")
    assert cal.agent_stats["a"] == AgentStats(1, 0)  # the better-parsed "1" is a's answer


def test_round_trip(tmp_path, cal):
    path = cal.save(tmp_path / "sub" / "toy.json")
    text = path.read_text()
    data = json.loads(text)
    assert text == json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert data["schema_version"] == 1
    assert data["patterns"]["a|b"] == {"n": 2, "n_correct": 1, "R": 0.5}
    assert data["pairs"]["a|b"]["kappa"] == pytest.approx(2 / 3)
    assert data["agent_stats"]["c"]["delta"] == pytest.approx(0.75)
    loaded = load_calibration(path, agents=AGENTS, benchmark="toy")
    assert loaded == cal
    assert Calibration.from_dict(cal.to_dict()) == cal
    assert hash(loaded) == hash(cal)


def test_mismatched_agents_named(tmp_path, cal):
    path = cal.save(tmp_path / "toy.json")
    with pytest.raises(CalibrationMismatchError) as err:
        load_calibration(path, agents=["a", "b", "d"])
    msg = str(err.value)
    assert "['a', 'b', 'c']" in msg and "['a', 'b', 'd']" in msg
    assert "Refit" in msg and str(path) in msg
    assert isinstance(err.value, ValueError)
    # order of the agent list does not matter
    assert load_calibration(path, agents=["c", "b", "a"]) == cal


def test_mismatched_benchmark(tmp_path, cal):
    path = cal.save(tmp_path / "toy.json")
    with pytest.raises(CalibrationMismatchError, match="'math'"):
        load_calibration(path, benchmark="math")


def test_unknown_schema_version(tmp_path, cal):
    data = cal.to_dict()
    data["schema_version"] = 99
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationMismatchError, match=r"future\.json"):
        load_calibration(path)


def test_malformed_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json"):
        load_calibration(path)
    path.write_text(json.dumps({"schema_version": 1, "benchmark": "t"}))
    with pytest.raises(ValueError, match="malformed"):
        load_calibration(path)


def test_filename_stable():
    name = calibration_filename("math", ["a", "b", "c"])
    assert name == calibration_filename("math", ["c", "a", "b"])
    assert name.startswith("math-") and name.endswith(".json") and len(name) == len("math-") + 13
    assert name != calibration_filename("math", ["a", "b", "d"])
    assert calibration_filename("legal bench/x", ["a"]).startswith("legal_bench_x-")


def test_find_calibration_by_content(tmp_path, cal):
    assert find_calibration(tmp_path / "missing", "toy", AGENTS) is None
    assert find_calibration(tmp_path, "toy", AGENTS) is None
    (tmp_path / "junk.json").write_text("[1, 2]")
    (tmp_path / "notes.json").write_text("{oops")
    odd = cal.save(tmp_path / "whatever-name.json")
    assert find_calibration(tmp_path, "toy", ["c", "b", "a"]) == odd
    assert find_calibration(tmp_path, "other", AGENTS) is None
    assert find_calibration(tmp_path, "toy", ["a", "b"]) is None
    canonical = cal.save(tmp_path / calibration_filename("toy", AGENTS))
    assert find_calibration(tmp_path, "toy", AGENTS) == canonical


def test_find_prefers_newest(tmp_path):
    old = fit_calibration([], agents=AGENTS, benchmark="t", fitted_at="2024-01-01T00:00:00")
    new = fit_calibration([], agents=AGENTS, benchmark="t", fitted_at="2025-01-01T00:00:00")
    old.save(tmp_path / "a-old.json")
    new_path = new.save(tmp_path / "z-new.json")
    assert find_calibration(tmp_path, "t", AGENTS) == new_path


IDS = {a: {"model": "m-" + a, "temperature": 0.7} for a in AGENTS}


def test_identities_round_trip_and_guard_loading(tmp_path):
    cal = fit_calibration(RECORDS, agents=AGENTS, benchmark="math", identities=IDS)
    path = cal.save(tmp_path / calibration_filename("math", AGENTS))
    again = load_calibration(path, agents=AGENTS, benchmark="math", identities=IDS)
    assert again == cal and again.identities == IDS
    changed = {**IDS, "b": {"model": "another-model", "temperature": 0.7}}
    with pytest.raises(CalibrationMismatchError) as err:
        load_calibration(path, agents=AGENTS, benchmark="math", identities=changed)
    msg = str(err.value)
    assert "b: model 'm-b' -> 'another-model'" in msg and "a:" not in msg
    assert find_calibration(tmp_path, "math", AGENTS, changed) is None
    assert find_calibration(tmp_path, "math", AGENTS, IDS) == path


def test_a_file_without_identities_cannot_be_checked_and_is_accepted(tmp_path):
    path = fit_calibration(RECORDS, agents=AGENTS, benchmark="math").save(tmp_path / "c.json")
    assert "agent_identities" not in json.loads(path.read_text())
    assert load_calibration(path, agents=AGENTS, benchmark="math", identities=IDS).identities == {}
