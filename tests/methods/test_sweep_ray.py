"""Every method through the real pipeline on a local Ray: one sweep, one fixture benchmark,
scripted backbones; each run is logged with the same metric names and the call counts of
its protocol, and the independent generations are shared through the cache."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from df_ray.config import METHODS, SweepConfig
from df_ray.evaluation.scoring import RESULT_COLUMNS
from df_ray.methods import method_class
from tests.helpers import uncalibrated

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mmlu_pro.json"
SCRIPT = "tests.methods.responders:respond"

# With every agent answering B: ReConcile agrees at once (n calls), Self-Refine never stops
# (1 + 4 feedback calls), GoA's nodes are confident (no replacement).
EXPECTED_CALLS = {"darkforest": 4, "single": 1, "self_consistency": 9, "weighted_vote": 3,
                  "debate": 6, "reconcile": 3, "moa": 4, "goa_max": 10, "goa_mean": 12,
                  "self_refine": 5}


def _sweep(tmp_path: Path, uri: str, fuse: bool = True) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "methods",
        "fuse": fuse,
        "base": {
            "benchmark": "mmlu_pro", "source": str(FIXTURE), "limit": 3,
            "backbones": {f"b{i}": {"kind": "scripted", "model": f"m{i}", "script": SCRIPT}
                          for i in (1, 2, 3, "c")},
            "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2, 3)],
            "coordinator": {"id": "coord", "backbone": "bc"},
            "cache_root": str(tmp_path / "cache"),
            "results_dir": str(tmp_path / "results"),
            # weighted_vote fits one: the test split holds the whole file, so its held-out
            # rows come from GoA's fixture (minus its test question: 2 rows, a smoke test)
            "calibration_source": str(FIXTURE.parent / "mmlu_pro_goa.json"),
            "calibration": {"dir": str(tmp_path / "calibration"), "min_samples": 2},
            "tracking": {"uri": uri, "experiment": "methods-sweep"},
            "batch_size": 2,
        },
        "runs": [{"name": m, "method": m, "method_args": uncalibrated(m)} for m in METHODS],
    })


def test_every_method_runs_in_one_sweep(ray_local, tmp_path):
    from df_ray.pipeline.runner import run_sweep
    from df_ray.tracking import Tracker, metric_name

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    sweep = _sweep(tmp_path, uri)
    results = run_sweep(sweep, tracker=Tracker(uri, "methods-sweep"), progress=lambda m: None)
    assert [r.config.method for r in results] == list(METHODS)
    names = {r.config.method: set(r.metrics) for r in results}
    assert all(n == names["darkforest"] for n in names.values()), names
    for r in results:
        m = r.metrics
        assert m["n_samples"] == 3
        assert m["llm_calls_per_sample"] == pytest.approx(EXPECTED_CALLS[r.config.method]), \
            r.config.method
        assert 0.0 <= m["accuracy"] <= 1.0
        assert m["tokens_per_sample"] > 0
    by = {r.config.method: r.metrics for r in results}
    # DarkForest ran first: the methods made of independent answers only pay nothing more;
    # ReConcile's JSON answers are its own calls.
    assert by["single"]["fresh_calls"] == 0
    assert by["weighted_vote"]["fresh_calls"] == 0
    assert by["reconcile"]["fresh_calls"] == 3 * 3  # 3 samples, 3 JSON answers each
    # weighted_vote's calibration, fitted through the pipeline: 2 held-out samples, one call
    # per agent each; its cost is logged with every configuration that uses the file
    cal = by["weighted_vote"]
    assert (cal["calibration_samples"], cal["calibration_calls"]) == (2, 6)
    assert cal["calibration_tokens"] > 0
    assert cal["calibration_tokens_per_sample"] == cal["calibration_tokens"] / 2
    assert math.isnan(by["single"]["calibration_tokens"])  # no calibration used
    # Logged once each, under the sweep's parent run, every run with the same metric names
    # (an undefined metric, e.g. coordinator agreement without a coordinator, is logged NaN).
    tracker = Tracker(uri, "methods-sweep")
    runs = tracker.client.search_runs([tracker.experiment_id])
    logged = {r.data.tags["df_ray.method"]: set(r.data.metrics) for r in runs
              if r.data.tags.get("df_ray.kind") == "configuration"}
    assert set(logged) == set(METHODS)
    for r in results:
        assert logged[r.config.method] == {metric_name(k) for k in r.metrics}, r.config.method
        assert logged[r.config.method] == logged["darkforest"], r.config.method
    assert "coordinator_agreement" in logged["darkforest"]
    # Each configuration's samples.parquet: the generic columns, then its own method's only
    # (the fused pipeline carried them all); a method's own metric is NaN for the others.
    for r in results:
        own = list(method_class(r.config.method).result_columns)
        assert pq.read_schema(r.samples_path).names == [*RESULT_COLUMNS, *own], r.config.method
        # DarkForest records its decisions; GoA its own token counter; the rest nothing
        assert bool(own) == (r.config.method in ("darkforest", "goa_mean", "goa_max"))
        assert math.isnan(r.metrics["trusted_rate"]) == (r.config.method != "darkforest")
    assert by["darkforest"]["trusted_rate"] == 1.0  # every agent answers B
    # Each configuration's wall time is its own share of the fused pipeline's, not the
    # group's: they add up to it, and a configuration whose calls were all paid by another
    # costs less than the one that paid them.
    group = {r.metrics["group_wall_time_s"] for r in results}
    assert len(group) == 1
    (wall,) = group
    assert sum(r.metrics["wall_time_s"] for r in results) == pytest.approx(wall, rel=1e-6)
    assert by["weighted_vote"]["wall_time_s"] < by["darkforest"]["wall_time_s"]
    assert all(r.metrics["wall_time_s"] < wall for r in results)
    # What each run ran: model revisions, the data set's fingerprint, the prompt version.
    params = {r.data.tags["df_ray.method"]: r.data.params for r in runs
              if r.data.tags.get("df_ray.kind") == "configuration"}
    fps = {p["provenance.dataset_fingerprint"] for p in params.values()}
    assert len(fps) == 1 and all(p["provenance.prompt_version"] for p in params.values())
    assert params["darkforest"]["provenance.model_revision.b1"] == "unpinned"


def test_a_fused_sweep_equals_a_sequential_one(ray_local, tmp_path):
    """Every method through one fused pipeline makes the fresh calls, and reaches the
    metrics, of the same sweep run one configuration at a time (``fuse: false``)."""
    from df_ray.pipeline.runner import run_sweep

    out = {}
    for fuse in (True, False):
        root = tmp_path / ("fused" if fuse else "sequential")
        root.mkdir()
        sweep = _sweep(root, f"sqlite:///{root}/mlflow.db", fuse=fuse)
        out[fuse] = run_sweep(sweep, tracker=None, progress=lambda m: None)
    fused, sequential = out[True], out[False]
    assert [r.metrics["fresh_calls"] for r in fused] == \
        [r.metrics["fresh_calls"] for r in sequential]
    for a, b in zip(fused, sequential, strict=True):
        for k in ("accuracy", "llm_calls_per_sample", "tokens_per_sample", "trusted_rate"):
            # NaN for a method without the metric (trusted_rate): NaN in both
            assert a.metrics[k] == pytest.approx(b.metrics[k], nan_ok=True), (a.config.name, k)
