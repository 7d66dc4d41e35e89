"""The full pipeline on a real local Ray with scripted engines; every metric checked against
values computed by hand from tests/pipeline/responders.py.

Hand computation (ablation no_calibration: alpha = R = delta = 1, s(z) = sum q_i (0.5 + c_i)):
S1: A = 1.4 + 1.4 = 2.8, B = 1.0 -> P(A) = 0.737, margin 0.474: trusted; coordinator says B
    -> overridden; gold A: final right, coordinator wrong (a correct override).
S2: C = 1.3 + 0.7 = 2.0, D = 1.3 -> P(C) = 0.606 < 0.66: not trusted; coordinator D = gold.
S3: a2 invalid; B = 2.0 alone -> P = 1, margin 1: trusted; coordinator C = gold -> overridden,
    final B wrong, coordinator right (a wrong override). No agent right.
S4: no valid observation: the coordinator answers alone (A = gold).
S5: D, A, C one each -> P = 1/3 each, support 1 < k: not trusted; top = a1's D (tie ->
    lower agent index); coordinator D = gold and agrees with z*.
accuracy 4/5; reachability 3/5 (S1, S2, S5); trusted 2/5; overrides 2/5 (one correct, one
wrong); coordinator agreement 1/4 (S1, S2, S3, S5 have a z*); 4 calls per sample.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from df_ray.pipeline.runner import Runner, shared_backbones
from df_ray.tracking import Tracker
from tests.helpers import PIPELINE_GOLD, pipeline_config, pipeline_samples

pytestmark = pytest.mark.slow

def served(runner: Runner) -> int:
    import ray

    return sum(ray.get(h.stats.remote())["served"]
               for hs in runner.pool.handles.values() for h in hs)


@pytest.fixture
def runner_factory(ray_local, tmp_path):
    made = []

    def make(cfg):
        r = Runner(shared_backbones([cfg]),
                   tracker=Tracker(cfg.tracking.uri, cfg.tracking.experiment),
                   progress=lambda m: None)
        made.append(r)
        return r

    yield make
    for r in made:
        r.shutdown()


def test_metrics_match_hand_computation(tmp_path, runner_factory):
    cfg = pipeline_config(tmp_path)
    runner = runner_factory(cfg)
    res = runner.run(cfg, pipeline_samples())
    m = res.metrics
    assert m["n_samples"] == 5
    assert m["accuracy"] == pytest.approx(0.8)
    assert m["accuracy_se"] == pytest.approx((0.8 * 0.2 / 5) ** 0.5)
    assert m["reachability"] == pytest.approx(0.6)
    assert m["trusted_rate"] == pytest.approx(0.4)
    assert m["override_rate"] == pytest.approx(0.4)
    assert m["correct_override_rate"] == pytest.approx(0.2)
    assert m["wrong_override_rate"] == pytest.approx(0.2)
    assert m["coordinator_agreement"] == pytest.approx(0.25)
    assert m["llm_calls_per_sample"] == pytest.approx(4.0)
    assert m["fresh_calls"] == 20
    assert served(runner) == 20

    written = pq.read_table(res.samples_path)
    # the rows the CLI shows of a small run are the file's first rows, kept as written
    assert res.head.num_rows == 5 and res.head.equals(written.slice(0, 5))
    rows = {r["sample_id"]: r for r in written.to_pylist()}
    assert [rows[s]["final_answer"] for s in PIPELINE_GOLD] == ["A", "D", "B", "A", "D"]
    assert [rows[s]["decision_source"] for s in PIPELINE_GOLD] == [
        "guardrail", "coordinator", "guardrail", "coordinator", "coordinator"]
    # Tokens: whitespace words of every prompt and response, as the scripted engine counts.
    detail = json.loads(rows["S1"]["detail"])
    assert len(detail["calls"]) == 4
    total = sum(c["prompt_tokens"] + c["completion_tokens"] for c in detail["calls"])
    assert rows["S1"]["total_tokens"] == total
    assert rows["S1"]["agent_tokens"] + rows["S1"]["coordinator_tokens"] == total
    assert m["tokens_per_sample"] == pytest.approx(
        sum(r["total_tokens"] for r in rows.values()) / 5)
    assert m["t_cross_per_sample"] > 0

    # The run is logged once, FINISHED, with the per-sample artifact.
    runs = runner.tracker.client.search_runs([runner.tracker.experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.metrics["accuracy"] == pytest.approx(0.8)
    arts = [a.path for a in runner.tracker.client.list_artifacts(runs[0].info.run_id)]
    assert "samples.parquet" in arts


def test_rerun_and_threshold_change_make_no_engine_calls(tmp_path, runner_factory):
    cfg = pipeline_config(tmp_path)
    runner = runner_factory(cfg)
    first = runner.run(cfg, pipeline_samples())
    assert first.metrics["fresh_calls"] == 20
    # Same configuration again: skipped as finished in MLflow.
    again = runner.run(cfg, pipeline_samples())
    assert again.skipped
    # A guardrail change shares every call: zero fresh calls, same agent outputs.
    stricter = pipeline_config(tmp_path, name="tau_p=0.8",
                               method_args={"guardrail": {"tau_p": 0.8}})
    res = runner.run(stricter, pipeline_samples())
    assert res.metrics["fresh_calls"] == 0
    assert served(runner) == 20
    # tau_p = 0.8 no longer trusts S1 (P = 0.737): the coordinator's B stands.
    assert res.metrics["trusted_rate"] == pytest.approx(0.2)
    assert res.metrics["accuracy"] == pytest.approx(0.6)


def test_lazy_coordinator_same_answers_fewer_calls(tmp_path, runner_factory):
    eager = pipeline_config(tmp_path)
    lazy = pipeline_config(tmp_path, name="lazy", method_args={"lazy": True})
    runner = runner_factory(eager)
    a = runner.run(eager, pipeline_samples())
    b = runner.run(lazy, pipeline_samples())
    fa = {r["sample_id"]: r["final_answer"] for r in pq.read_table(a.samples_path).to_pylist()}
    fb = {r["sample_id"]: r["final_answer"] for r in pq.read_table(b.samples_path).to_pylist()}
    assert fa == fb
    assert b.metrics["llm_calls_per_sample"] == pytest.approx(18 / 5)
    assert b.metrics["tokens_per_sample"] < a.metrics["tokens_per_sample"]
    assert b.metrics["override_rate"] == 0  # nothing to override without a coordinator call
