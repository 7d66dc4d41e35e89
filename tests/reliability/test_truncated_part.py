"""A cache part cut short (a disk that filled, a copy interrupted, a writer that bypassed the
rename) costs exactly its own entries: the rerun through the pipeline makes those calls
again and no other."""

from __future__ import annotations

import glob
import os

import pyarrow.parquet as pq
import pytest

from df_ray.config import SweepConfig
from tests.helpers import base_config, write_mmlu_goa

pytestmark = pytest.mark.slow


def test_a_truncated_part_costs_exactly_its_own_entries(tmp_path, ray_local):
    from df_ray.pipeline.runner import run_sweep

    source = write_mmlu_goa(tmp_path / "mmlu.json", 8)
    base = base_config(tmp_path, source, concurrency=1, batch_size=2)
    sweep = SweepConfig.model_validate({"name": "torn", "base": base, "runs": [{}]})
    # Two runs, two parts: a run's answers reach the cache in its engines' journals, folded
    # into one part at its end (a stage writes parts of its own only for answers that no
    # journal holds).
    half = SweepConfig.model_validate({"name": "torn", "base": {**base, "limit": 4},
                                       "runs": [{}]})
    (some,) = run_sweep(half, tracker=None, progress=lambda m: None)
    (first,) = run_sweep(sweep, tracker=None, progress=lambda m: None)
    calls = some.metrics["fresh_calls"] + first.metrics["fresh_calls"]
    assert some.metrics["fresh_calls"] > 0 and first.metrics["fresh_calls"] > 0
    parts = sorted(glob.glob(os.path.join(base["cache_root"], "**", "part-*.parquet"),
                             recursive=True))
    rows = {p: pq.ParquetFile(p).metadata.num_rows for p in parts}
    assert sum(rows.values()) == calls and len(parts) >= 2, rows
    victim = min(parts, key=lambda p: rows[p])  # the smallest: the others must not pay
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 2)
    (again,) = run_sweep(sweep, tracker=None, progress=lambda m: None)
    assert again.metrics["fresh_calls"] == rows[victim]
    assert again.metrics["accuracy"] == first.metrics["accuracy"]
    from df_ray.pipeline.cache import GenerationCache

    assert [os.path.basename(p) for p in GenerationCache(base["cache_root"]).bad_parts] == [
        os.path.basename(victim)]  # named, left where it is, never read
    (third,) = run_sweep(sweep, tracker=None, progress=lambda m: None)
    assert third.metrics["fresh_calls"] == 0  # the remade calls are cached again
