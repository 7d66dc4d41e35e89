"""Seeds that vary and budgets that do not truncate silently: the run seed in every request's
seed (one cache entry per seed across configurations), sweeps over ``seeds``, per-benchmark
``max_tokens``, finish reasons kept in the cache and truncation rates per agent and per
configuration, refused calls spending no tokens."""

from __future__ import annotations

import pytest

from df_ray.config import ConfigError, RunConfig, SweepConfig
from df_ray.engines.base import ChatRequest, Completion, Message, SamplingParams
from df_ray.engines.scripted import ScriptedEngine
from df_ray.evaluation import Driver, Member, MetricsAccumulator
from df_ray.pipeline.cache import GenerationCache
from tests.helpers import driver_config, make_sample

SAMPLES = [make_sample(f"q{i}") for i in range(4)]
LONG = "one two three four five six seven eight nine ten\nAnswer: B\nConfidence: 0.9"


def _requests(cfg: RunConfig) -> dict[str, ChatRequest]:
    """Every request a configuration's first round plans, by (agent, sample)."""
    member = Member.from_config(cfg)
    driver = Driver([member], ScriptedEngine("scripted", "majority"))
    rows = driver.new_rows(SAMPLES)
    out = {}
    for states in rows:
        for call in member.method.plan(0, states[0], member.ctx):
            out[(call.agent, states[0].sample.id)] = call.request
    return out


def test_two_run_seeds_give_different_request_seeds_and_outputs():
    r0, r1 = _requests(driver_config(seed=0)), _requests(driver_config(seed=1))
    assert r0.keys() == r1.keys()
    assert all(r0[k].seed != r1[k].seed for k in r0)
    assert all(r0[k].messages == r1[k].messages for k in r0)  # the prompt does not move
    engine = ScriptedEngine("scripted", "majority")  # its answer is a hash of the seed too
    texts0 = [c.text for c in engine.generate(list(r0.values()))]
    texts1 = [c.text for c in engine.generate(list(r1.values()))]
    assert texts0 != texts1


def test_one_run_seed_gives_one_cache_entry_across_configurations():
    df = _requests(driver_config(method="darkforest", seed=2))
    vote = _requests(driver_config(method="weighted_vote", seed=2))
    assert {k: r.key() for k, r in df.items()} == {k: r.key() for k, r in vote.items()}


def test_a_sweep_over_seeds_runs_every_configuration_once_per_seed():
    base = driver_config().model_dump(mode="json")
    vote = {"name": "vote", "method": "weighted_vote", "method_args": {}}  # not DarkForest's
    sweep = SweepConfig(name="s", base=base, runs=[{"name": "df"}, vote], seeds=[0, 1, 2])
    cfgs = sweep.expand()
    assert [(c.name, c.seed) for c in cfgs] == [
        ("df seed=0", 0), ("df seed=1", 1), ("df seed=2", 2),
        ("vote seed=0", 0), ("vote seed=1", 1), ("vote seed=2", 2)]
    assert len({c.fingerprint() for c in cfgs}) == 6
    with pytest.raises(ConfigError, match="not both"):
        SweepConfig(name="s", base=base, grid={"seed": [0, 1]}, seeds=[0, 1]).expand()
    with pytest.raises(ValueError, match="distinct"):
        SweepConfig(name="s", base=base, seeds=[1, 1])


def test_the_sweep_budget_goes_to_each_benchmark_s_agents_unless_they_set_their_own():
    sweep = SweepConfig(name="s", base={"benchmark": "math", "composition": "math"},
                        runs=[{"name": "math"},
                              {"name": "legal", "benchmark": "legalbench",
                               "composition": "legalbench"},
                              {"name": "own", "max_tokens": 300}],
                        max_tokens={"math": 2048, "legalbench": 1024})
    math, legal, own = sweep.expand()
    assert {a.max_tokens for a in math.agents} | {math.coordinator.max_tokens} == {2048}
    assert {a.max_tokens for a in legal.agents} | {legal.coordinator.max_tokens} == {1024}
    assert {a.max_tokens for a in own.agents} == {300}
    cfg = RunConfig.model_validate({
        "benchmark": "mmlu_pro", "max_tokens": 700,
        "backbones": {"b": {"kind": "scripted", "model": "m"}},
        "agents": [{"id": "a1", "backbone": "b"}, {"id": "a2", "backbone": "b", "max_tokens": 50}],
        "coordinator": {"id": "c", "backbone": "b"}})
    assert [a.max_tokens for a in cfg.agents] == [700, 50] and cfg.coordinator.max_tokens == 700
    with pytest.raises(ValueError, match="unknown benchmark"):
        SweepConfig(name="s", base={"benchmark": "math"}, max_tokens={"mathh": 10})


def test_truncation_is_kept_in_the_cache_and_measured_per_agent_and_configuration(tmp_path):
    # a1 and a2 answer with 10+ words; a1 may write 5 tokens, a2 and a3 512
    cfg = driver_config(method="weighted_vote").model_dump(mode="json")
    cfg["agents"][0]["max_tokens"] = 5
    cfg = RunConfig.model_validate(cfg)
    engine = ScriptedEngine("scripted", lambda r: LONG)
    cache = GenerationCache(str(tmp_path / "cache"))
    driver = Driver([Member.from_config(cfg)], engine, cache)
    acc = MetricsAccumulator()
    for _, row in driver.finish(driver.run(SAMPLES)):
        acc.add(row.to_dict())
    m = acc.result()
    assert m["truncation_rate.a1"] == 1.0
    assert m["truncation_rate.a2"] == 0.0 and m["truncation_rate.a3"] == 0.0
    assert m["truncated_calls"] == 4 and m["truncation_rate"] == pytest.approx(4 / 12)
    # a fresh reader of the cache (a rerun) sees why each completion ended
    again = GenerationCache(str(tmp_path / "cache"))
    reasons = sorted(again.get(k).finish_reason for k in again._entries)
    assert reasons == ["length"] * 4 + ["stop"] * 8
    engine2 = ScriptedEngine("scripted", lambda r: LONG)
    d2 = Driver([Member.from_config(cfg)], engine2, again)
    acc2 = MetricsAccumulator()
    for _, row in d2.finish(d2.run(SAMPLES)):
        acc2.add(row.to_dict())
    assert engine2.n_calls == 0 and acc2.result()["truncation_rate.a1"] == 1.0
    # and MLflow keeps both rates (a real store)
    from mlflow.tracking import MlflowClient

    from df_ray.tracking import Tracker

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    MlflowClient(tracking_uri=uri).create_experiment("trunc",
                                                     artifact_location=str(tmp_path / "art"))
    samples = tmp_path / "samples.parquet"
    samples.write_bytes(b"")
    run_id = Tracker(uri, "trunc").log_run(cfg, m, samples)
    logged = MlflowClient(tracking_uri=uri).get_run(run_id).data.metrics
    assert logged["truncation_rate.a1"] == 1.0 and logged["truncation_rate.a2"] == 0.0
    assert logged["truncation_rate"] == pytest.approx(4 / 12)


def test_cache_parts_written_before_finish_reasons_read_as_unknown(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "cache"
    root.mkdir()
    req = ChatRequest("m", (Message("user", "hi"),), SamplingParams(), seed=1)
    old = pa.table({"key": [req.key()], "model": ["m"], "revision": [""], "seed": [1],
                    "text": ["hello"], "prompt_tokens": [1], "completion_tokens": [1],
                    "created": [0.0]})
    pq.write_table(old, root / "part-0-old.parquet")
    cache = GenerationCache(str(root))
    assert cache.get(req.key()) == Completion("hello", 1, 1)
    new = ChatRequest("m", (Message("user", "again"),), SamplingParams(), seed=1)
    cache.put_many([(new, Completion("x", 1, 1, finish_reason="length"))])
    assert cache.compact() == 2
    merged = GenerationCache(str(root))
    assert merged.get(req.key()).finish_reason is None
    assert merged.get(new.key()).finish_reason == "length"


def test_a_refused_call_counts_no_tokens_and_one_refusal():
    cfg = driver_config(method="single", method_args={"agent": "a1"})
    engine = ScriptedEngine("scripted", "majority", max_prompt_tokens=3)  # every prompt: over
    driver = Driver([Member.from_config(cfg)], engine)
    rows = [r for _, r in driver.finish(driver.run(SAMPLES[:2]))]
    assert all(r.n_refused == 1 and r.n_errors == 1 for r in rows)
    assert all(r.total_tokens == 0 and r.agent_tokens == 0 for r in rows)
    acc = MetricsAccumulator()
    for r in rows:
        acc.add(r.to_dict())
    assert acc.result()["refused_calls"] == 2 and acc.result()["tokens_per_sample"] == 0
