"""The threshold grid equals Table 9-style configurations run as a sweep; the held-out
choice; Self-Consistency's curve ends at its run; a missing call gives one line."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from df_ray.analysis import analyze
from df_ray.analysis.cached import load_pool
from df_ray.analysis.subsets import coordinator_method
from df_ray.config import SweepConfig
from df_ray.core import load_calibration
from df_ray.engines import make_engine
from df_ray.evaluation import Driver, Member, build_context
from df_ray.evaluation.api import EngineRouter
from df_ray.evaluation.calibration_files import find_calibration
from df_ray.methods import get_method
from df_ray.pipeline.cache import GenerationCache
from tests.analysis.sweep import base, run_config, run_sweep, sweep_config

GRID = {"method_args.guardrail.k": [1, 2, 3], "method_args.guardrail.tau_p": [0.5, 0.66, 0.8],
        "method_args.guardrail.tau_m": [0.1, 0.3, 0.5]}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("thresholds")
    sweep = sweep_config(tmp)
    evs = run_sweep(sweep)
    return sweep, evs, tmp


def test_the_grid_equals_table9_configurations_run_as_a_sweep(swept):
    sweep, _, tmp = swept
    (b,) = analyze(sweep).benchmarks
    table = b.thresholds.table.set_index("setting")
    grid = SweepConfig.model_validate({"name": "analysis", "base": base(tmp),
                                       "runs": [{"name": "df"}], "grid": GRID})
    configs = grid.expand()
    assert len(configs) == 27
    for cfg in configs:
        g = cfg.method_args["guardrail"]
        ev = run_config(cfg, write=False)
        assert ev.metrics["fresh_calls"] == 0
        row = table.loc[f"k={g['k']},tau_p={g['tau_p']:g},tau_m={g['tau_m']:g}"]
        m = ev.metrics
        assert row["test_accuracy"] == pytest.approx(m["accuracy"], abs=1e-12), g
        assert row["test_trusted_rate"] == pytest.approx(m["trusted_rate"], abs=1e-12), g
        assert row["test_override_rate"] == pytest.approx(m["override_rate"], abs=1e-12), g
        assert row["test_wrong_override_rate"] == pytest.approx(m["wrong_override_rate"],
                                                                abs=1e-12), g
    never = run_config(configs[0].model_copy(update={"method_args": {
        "guardrail": {"enabled": False}}}), write=False)
    assert table.loc["never", "test_accuracy"] == pytest.approx(never.accuracy)


def test_held_out_choice_where_the_coordinator_ran_on_held_out_data(swept):
    sweep, _, _ = swept
    (b,) = analyze(sweep).benchmarks
    assert b.thresholds.chosen is None
    assert any("held-out split: not computed" in line for line in b.lines)
    # a run that asks the coordinator on the held-out samples (the calibration pass's seed)
    cfg = next(c for c in sweep.expand() if c.name == "darkforest")
    cache = GenerationCache(cfg.cache_root)
    cal = load_calibration(find_calibration(cfg.calibration.dir, cfg.benchmark,
                                            cfg.agent_ids()))
    engines = EngineRouter({n: make_engine(s) for n, s in cfg.backbones.items()})
    pool = load_pool(cfg, cache)
    held = pool.held_out.samples

    def held_out_accuracy(method) -> float:
        member = Member(method, build_context(cfg, cal, for_calibration=True))
        driver = Driver([member], engines, cache)
        rows = driver.outcomes(driver.run(held))
        return sum(r.correct for _, _, r in rows) / len(rows)

    held_out_accuracy(coordinator_method(cfg))
    (b,) = analyze(sweep).benchmarks
    t = b.thresholds
    assert t.chosen is not None and t.chosen["n"] == len(held)
    table = t.table.set_index("setting")
    assert table.loc["never", "certified"]
    for name, guard in (("never", {"enabled": False}),
                        ("k=2,tau_p=0.66,tau_m=0.3", {"k": 2, "tau_p": 0.66, "tau_m": 0.3})):
        acc = held_out_accuracy(get_method("darkforest", guardrail=guard))
        assert table.loc[name, "held_out_accuracy"] == pytest.approx(acc, abs=1e-12)
    assert "Chosen on held-out data" in analyze(sweep).to_markdown()


def test_self_consistency_curve_ends_at_its_run_and_the_frontier_has_every_point(swept):
    sweep, evs, _ = swept
    (b,) = analyze(sweep).benchmarks
    f = b.frontier
    assert set(f.points["configuration"]) == set(evs)
    sc = f.curves[f.curves["curve"] == "self_consistency"].set_index("k")
    assert list(sc.index) == [1, 2, 3, 4]
    # at k = n the curve is the run's own vote, its ties broken uniformly (maj@k) where the
    # run gave them to the first sample: they differ by at most the tied samples' share
    rows = evs["self_consistency"].rows
    votes = [json.loads(r.detail)["extra"]["votes"] for r in rows]
    tied = sum(1 for v in votes if v and list(v.values()).count(max(v.values())) > 1)
    gap = abs(sc.loc[4, "accuracy"] - evs["self_consistency"].accuracy)
    assert gap <= tied / len(rows) + 1e-12
    if tied == 0:
        assert gap == pytest.approx(0.0, abs=1e-12)
    assert sc.loc[4, "tokens_per_sample"] == pytest.approx(
        evs["self_consistency"].metrics["tokens_per_sample"])
    assert sc.loc[1, "accuracy"] == pytest.approx(sc.loc[1, "pass_at_k"])
    (row,) = f.at_darkforest_tokens.to_dict("records")
    assert row["darkforest"] == "darkforest" and row["sc_tokens"] <= row["darkforest_tokens"]


def test_a_missing_cached_call_gives_one_line_and_the_other_sections(tmp_path):
    sweep = sweep_config(tmp_path)
    run_sweep(sweep)
    cfg = next(c for c in sweep.expand() if c.name == "darkforest")
    pool = load_pool(cfg, GenerationCache(cfg.cache_root))
    gone = pool.test.states[3].calls[1]  # a2's answer to the fourth test sample
    root = tmp_path / "cache"
    for part in root.glob("part-*.parquet"):
        t = pq.read_table(part)
        keep = [k != gone.key for k in t.column("key").to_pylist()]
        if not all(keep):
            import pyarrow as pa
            pq.write_table(t.filter(pa.array(keep)), part)
    (b,) = analyze(sweep).benchmarks
    lines = [ln for ln in b.lines if "not in the generation cache" in ln]
    assert len(lines) == 1
    assert f"1 agent call(s) not in the generation cache (a2 on {pool.test.samples[3].id})" \
        in lines[0]
    assert b.subsets is None and b.thresholds is None
    assert b.frontier is not None and len(b.frontier.points) == 5
