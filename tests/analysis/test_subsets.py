"""Agent subsets from the cache equal the subsets run as real scripted sweeps; Shapley values."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from df_ray.analysis import analyze
from df_ray.analysis.subsets import (
    SubsetSettings,
    all_subsets,
    sampled_subsets,
    shapley_exact,
    shapley_sampled,
)
from df_ray.pipeline.cache import count_parts
from df_ray.reporting.ties import tie_outcome
from tests.analysis.sweep import AGENTS, run_config, run_sweep, sweep_config, variant


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("subsets")
    sweep = sweep_config(tmp)
    evs = run_sweep(sweep)
    parts = count_parts(sweep.base["cache_root"])
    analysis = analyze(sweep)
    return sweep, evs, analysis, parts, tmp


def test_analysis_makes_no_call_and_writes_nothing_to_the_cache(swept):
    sweep, _, analysis, parts, _ = swept
    assert count_parts(sweep.base["cache_root"]) == parts
    assert "0 LLM calls made" in analysis.to_markdown()


def test_every_subset_equals_a_real_scripted_sweep_of_it(swept):
    sweep, evs, analysis, _, tmp = swept
    (b,) = analysis.benchmarks
    table = b.subsets.table.set_index("agents")
    assert len(table) == 2 ** len(AGENTS) - 1
    pool = next(c for c in sweep.expand() if c.name == "darkforest")
    for subset in all_subsets(AGENTS):
        agents = [a for a in pool.model_dump(mode="json")["agents"] if a["id"] in subset]
        # a calibration folder of its own: the subset's file is fitted by its own run
        cal = {**pool.calibration.model_dump(), "dir": str(tmp / "subset_calibration")}
        vote = run_config(variant(pool, agents=agents, method="weighted_vote",
                                  method_args={"majority": True}), write=False)
        belief = run_config(variant(pool, agents=agents, calibration=cal,
                                    method_args={"belief_only": True}), write=False)
        row = table.loc["+".join(subset)]
        # the subset's vote from the cache, ties scored 1/m, is the real run's recorded rows
        # scored so by the report (df_ray.reporting.ties)
        assert row["vote"] == pytest.approx(expected(vote, "weighted_vote"), abs=1e-12), subset
        assert row["belief_only"] == pytest.approx(expected(belief, "darkforest"),
                                                   abs=1e-12), subset
        assert vote.metrics["fresh_calls"] == 0 and belief.metrics["fresh_calls"] == 0
        outcomes = b.subsets.outcomes[b.subsets.outcomes["agents"] == "+".join(subset)]
        assert outcomes["vote"].mean() == pytest.approx(row["vote"])
        assert len(outcomes) == len(vote.rows)
    full = table.loc["+".join(AGENTS)]
    assert full["darkforest"] == pytest.approx(evs["darkforest"].accuracy, abs=1e-12)
    assert full["belief_only"] == pytest.approx(expected(evs["darkforest belief only"],
                                                         "darkforest"))
    assert full["vote"] == pytest.approx(expected(evs["majority_vote"], "weighted_vote"))
    assert (full["vote_vs_full"], full["vote_b"], full["vote_c"]) == (0.0, 0, 0)


@pytest.mark.parametrize("rule", ["first", "random"])
def test_the_subsets_score_ties_by_the_tie_rule_as_a_real_run_with_it_answers(swept, rule):
    """``SubsetSettings.tie_rule``: ``first`` and ``random`` give each subset's vote and
    belief-only decision the accuracy of a real run of the subset with that ``tie_rule``
    (``random``: the same seeded picks), and the Shapley values follow them."""
    sweep, _, scored, _, tmp = swept
    analysis = analyze(sweep, subsets=SubsetSettings(tie_rule=rule, coordinator=False))
    (b,) = analysis.benchmarks
    assert b.subsets.tie_rule == rule and f"`{rule}`" in analysis.to_markdown()
    table = b.subsets.table.set_index("agents")
    pool = next(c for c in sweep.expand() if c.name == "darkforest")
    cal = {**pool.calibration.model_dump(), "dir": str(tmp / "subset_calibration")}
    for subset in [AGENTS, AGENTS[:2], AGENTS[1:]]:
        agents = [a for a in pool.model_dump(mode="json")["agents"] if a["id"] in subset]
        vote = run_config(variant(pool, agents=agents, method="weighted_vote",
                                  method_args={"majority": True, "tie_rule": rule}),
                          write=False)
        belief = run_config(variant(pool, agents=agents, calibration=cal,
                                    method_args={"belief_only": True, "tie_rule": rule}),
                            write=False)
        row = table.loc["+".join(subset)]
        assert row["vote"] == pytest.approx(vote.accuracy, abs=1e-12), subset
        assert row["belief_only"] == pytest.approx(belief.accuracy, abs=1e-12), subset
    # the rule decided something: some subset's vote differs from its 1/m credit
    (e,) = scored.benchmarks
    assert (table["vote"] - e.subsets.table.set_index("agents")["vote"]).abs().max() > 0
    shap = b.subsets.shapley["vote"].sum()
    assert shap == pytest.approx(table.loc["+".join(AGENTS), "vote"], abs=1e-12)
    with pytest.raises(ValueError, match="unknown tie rule 'last'"):
        SubsetSettings(tie_rule="last")


def expected(ev, method: str) -> float:
    """A run's accuracy with its votes' ties scored 1/m, from its recorded rows."""
    return sum(tie_outcome(json.loads(r.detail), method, r.correct, "expected", 0,
                           r.sample_id, r.method_columns).credit for r in ev.rows) / len(ev.rows)


def test_each_subset_is_tested_against_the_full_pool(swept):
    from statsmodels.stats.contingency_tables import mcnemar

    _, _, analysis, _, _ = swept
    (b,) = analysis.benchmarks
    out = b.subsets.outcomes
    full = out[out["agents"] == "+".join(AGENTS)].set_index("sample_id")
    table = b.subsets.table.set_index("agents")
    for agents, g in out.groupby("agents"):
        if g["darkforest"].isna().any():
            continue
        a = g.set_index("sample_id")["darkforest"].astype(bool)
        f = full["darkforest"].astype(bool).loc[a.index]
        n01, n10 = int((a & ~f).sum()), int((~a & f).sum())
        row = table.loc[agents]
        assert (row["darkforest_b"], row["darkforest_c"]) == (n01, n10)
        p = mcnemar([[int((a & f).sum()), n01], [n10, int((~a & ~f).sum())]],
                    exact=True).pvalue
        assert row["darkforest_p_mcnemar"] == pytest.approx(p)


def test_shapley_values_are_efficient_and_match_brute_force_over_orders(swept):
    _, _, analysis, _, _ = swept
    (b,) = analysis.benchmarks
    table = b.subsets.table.set_index("agents")
    shap = b.subsets.shapley.set_index("agent")
    for metric in ("vote", "belief_only"):
        def v(s, metric=metric):
            return float(table.loc["+".join(a for a in AGENTS if a in s), metric]) if s else 0.0
        assert shap[metric].sum() == pytest.approx(v(set(AGENTS)) - v(set()), abs=1e-12)
        brute = dict.fromkeys(AGENTS, 0.0)
        orders = list(itertools.permutations(AGENTS))
        for order in orders:
            seen: set = set()
            for a in order:
                brute[a] += (v(seen | {a}) - v(seen)) / len(orders)
                seen.add(a)
        for a in AGENTS:
            assert shap.loc[a, metric] == pytest.approx(brute[a], abs=1e-12)


def test_leave_one_out_is_the_full_pool_minus_the_rest(swept):
    _, _, analysis, _, _ = swept
    (b,) = analysis.benchmarks
    table = b.subsets.table.set_index("agents")
    loo = b.subsets.leave_one_out.set_index("left_out")
    for a in AGENTS:
        rest = "+".join(x for x in AGENTS if x != a)
        assert loo.loc[a, "vote_change"] == pytest.approx(
            table.loc["+".join(AGENTS), "vote"] - table.loc[rest, "vote"])


def test_shapley_of_a_known_game():
    # v(S) = |S|^2 is symmetric: every player gets n^2 / n; a dummy player gets 0
    players = ["p", "q", "r"]
    phi = shapley_exact(players, lambda s: float(len(s) ** 2))
    assert all(math.isclose(x, 3.0) for x in phi.values())
    phi = shapley_exact(players, lambda s: float(len(s - {"r"})))
    assert phi["r"] == 0.0 and math.isclose(phi["p"], 1.0)
    # an additive game: every order gives each player its own weight
    weight = {"p": 0.5, "q": 0.25, "r": 0.0}
    sampled = shapley_sampled(players, lambda s: sum(weight[x] for x in s), 7, seed=1)
    assert all(math.isclose(sampled[x], weight[x]) for x in players)


def test_beyond_the_exact_limit_the_subsets_are_a_stated_seeded_sample():
    agents = [f"x{i}" for i in range(12)]
    one = sampled_subsets(agents, 40, seed=3)
    assert one == sampled_subsets(agents, 40, seed=3)
    assert len(one) == 12 + 12 + 1 + 40
    assert tuple(agents) in one and all((a,) in one for a in agents)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """The same sweep in a folder of its own, analysed with ``fresh``: the subsets' missing
    coordinator calls made on the backbones' scripted engines, through the cache."""
    tmp = tmp_path_factory.mktemp("fresh")
    sweep = sweep_config(tmp)
    run_sweep(sweep)
    before = analyze(sweep)
    parts = count_parts(sweep.base["cache_root"])
    made = analyze(sweep, fresh=True)
    again = analyze(sweep)
    return sweep, before, made, again, parts, tmp


def test_fresh_makes_exactly_the_missing_coordinator_calls_once(fresh):
    sweep, before, made, again, parts, _ = fresh
    (b0,), (b1,), (b2,) = before.benchmarks, made.benchmarks, again.benchmarks
    t0, t1 = b0.subsets.table.set_index("agents"), b1.subsets.table.set_index("agents")
    full = "+".join(AGENTS)
    # without it, only the full pool's DarkForest (its run's coordinator calls) is known
    assert t0["darkforest"].notna().sum() == 1 and not math.isnan(t0.loc[full, "darkforest"])
    assert t1["darkforest"].notna().all()
    assert b1.fresh_calls > 0 and b1.fresh_failed == 0
    assert f"{b1.fresh_calls} LLM calls made" in made.to_markdown()
    assert count_parts(sweep.base["cache_root"]) > parts
    # the calls are cached: a second analysis makes none and reads the same table
    assert b2.fresh_calls == 0 and "0 LLM calls made" in again.to_markdown()
    assert b2.subsets.table.equals(b1.subsets.table)
    # lazy: never more calls than the subsets' untrusted samples (the full pool's were there)
    others = t1.drop(index=full)
    untrusted = round(float(((1 - others["trusted_rate"]) * b1.n_test).sum()))
    assert b1.fresh_calls <= untrusted


def test_a_fresh_subset_equals_a_real_scripted_run_of_it_that_replays_the_calls(fresh):
    sweep, _, made, _, _, tmp = fresh
    (b,) = made.benchmarks
    table = b.subsets.table.set_index("agents")
    pool = next(c for c in sweep.expand() if c.name == "darkforest")
    for subset in [s for s in all_subsets(AGENTS) if 2 <= len(s) < len(AGENTS)]:
        agents = [a for a in pool.model_dump(mode="json")["agents"] if a["id"] in subset]
        cal = {**pool.calibration.model_dump(), "dir": str(tmp / "subset_calibration")}
        # lazy: the coordinator asked only where the guardrail does not trust z*, as --fresh
        ev = run_config(variant(pool, agents=agents, calibration=cal,
                                method_args={"lazy": True}), write=False)
        assert table.loc["+".join(subset), "darkforest"] == pytest.approx(ev.accuracy), subset
        assert ev.metrics["fresh_calls"] == 0, subset  # every coordinator call was made above


def test_fresh_calls_are_cached_batch_by_batch_so_an_interruption_keeps_them(tmp_path):
    from types import SimpleNamespace

    from df_ray.analysis.fresh import FreshCalls
    from df_ray.engines.base import ChatRequest, Message
    from df_ray.engines.scripted import ScriptedEngine
    from df_ray.methods.base import Call
    from df_ray.pipeline.cache import GenerationCache

    def respond(request):
        if request.messages[-1].content == "q11":
            raise KeyboardInterrupt  # the user stops the analysis in the second batch
        return "ok"

    cfg = SimpleNamespace(coordinator=SimpleNamespace(backbone="bc"), max_request_retries=0,
                          backbones={"bc": SimpleNamespace(max_batch_size=8)})
    cache = GenerationCache(str(tmp_path))
    fresh = FreshCalls(cfg, cache, engines={"bc": ScriptedEngine("mc", respond)})
    calls = [Call("coordinator", "coord", ChatRequest(model="mc", backbone="bc",
                                                      messages=(Message("user", f"q{i}"),)))
             for i in range(12)]
    with pytest.raises(KeyboardInterrupt):
        fresh.make(calls)
    again = GenerationCache(str(tmp_path))
    assert len(again) == 8 and fresh.made == 8  # the first batch, answered and kept
    assert all(again.get(c.request.key()) is not None for c in calls[:8])
