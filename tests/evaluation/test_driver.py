"""The evaluation driver without Ray: every method on the scripted engine, configurations
fused in one driver, the result schema, calibration records and ``df_ray.evaluate``."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

import df_ray
from df_ray.config import METHODS, RunConfig
from df_ray.engines.scripted import ScriptedEngine
from df_ray.evaluation import Driver, Member, MetricsAccumulator, ResultRow, arrow_schema
from df_ray.evaluation.scoring import RESULT_COLUMNS, SUMMED
from df_ray.methods import method_class
from df_ray.methods.base import SampleState
from df_ray.methods.darkforest import DarkForest
from tests.helpers import driver_config, make_sample
from tests.methods.responders import respond

SCRIPT = "tests.methods.responders:respond"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mmlu_pro.json"
SAMPLES = [make_sample(f"q{i}") for i in range(3)]
# With every agent answering B (the responder): calls per sample of each method.
EXPECTED_CALLS = {"darkforest": 4, "single": 1, "self_consistency": 9, "weighted_vote": 3,
                  "debate": 6, "reconcile": 3, "moa": 4, "goa_max": 10, "goa_mean": 12,
                  "self_refine": 5}  # MoA: proposers + aggregator; Self-Refine: 1 + 4 feedbacks


def _members(methods=METHODS):
    return [Member.from_config(driver_config(method=m)) for m in methods]


@pytest.mark.parametrize("name", METHODS)
def test_every_method_runs_on_the_driver(name):
    driver = Driver(_members([name]), ScriptedEngine("scripted", respond))
    rows = driver.run(SAMPLES)
    graded = driver.finish(rows)
    assert [r.sample_id for _, r in graded] == [s.id for s in SAMPLES]
    for _, r in graded:
        assert r.correct and r.final_answer == "B"
        assert r.n_calls == EXPECTED_CALLS[name]
        assert r.total_tokens == r.agent_tokens + r.coordinator_tokens + r.other_tokens > 0
        json.loads(r.detail)


def test_fused_members_share_calls_and_equal_members_run_alone():
    engine = ScriptedEngine("scripted", respond)
    fused = Driver(_members(), engine)
    rows = fused.finish(fused.run(SAMPLES))
    fused_calls = engine.n_calls
    alone = {}
    total = 0
    for m, name in enumerate(METHODS):
        e = ScriptedEngine("scripted", respond)
        d = Driver(_members([name]), e)
        alone[m] = [r for _, r in d.finish(d.run(SAMPLES))]
        total += e.n_calls
    assert fused_calls < total  # the independent answers are asked for once
    for m, r in rows:
        twin = next(a for a in alone[m] if a.sample_id == r.sample_id)
        a, b = r.to_dict(), twin.to_dict()
        for key in ("n_fresh_calls", "detail"):  # who paid for a shared call differs
            a.pop(key), b.pop(key)
        assert a == b, METHODS[m]


def test_a_state_survives_its_json_form():
    driver = Driver(_members(["darkforest", "single", "debate"]),
                    ScriptedEngine("scripted", respond))
    (row,) = driver.run(SAMPLES[:1])
    for st in row:
        assert SampleState.from_dict(json.loads(json.dumps(st.to_dict()))).to_dict() == \
            st.to_dict()
        bare = json.loads(json.dumps(st.to_dict(with_sample=False)))
        assert "sample" not in bare
        assert SampleState.from_dict(bare, st.sample).to_dict() == st.to_dict()


def test_result_row_is_the_one_schema():
    assert tuple(f.name for f in fields(ResultRow) if f.name != "method_columns") == \
        RESULT_COLUMNS
    assert arrow_schema().names == list(RESULT_COLUMNS)
    # a method's own columns follow the generic ones, with their declared types
    own = arrow_schema(DarkForest.result_columns)
    assert own.names == [*RESULT_COLUMNS, *DarkForest.result_columns]
    assert str(own.field("trusted").type) == "bool"
    assert str(own.field("top_answer").type) == "string"
    with pytest.raises(ValueError, match="generic columns"):
        arrow_schema({"correct": "bool"})
    with pytest.raises(ValueError, match="not an Arrow type name"):
        arrow_schema({"x": "boolean-ish"})
    acc = MetricsAccumulator()
    driver = Driver(_members(["darkforest"]), ScriptedEngine("scripted", respond))
    for _, r in driver.finish(driver.run(SAMPLES)):
        acc.add(r.to_dict())
    m = acc.result()
    assert m["n_samples"] == 3 and m["accuracy"] == 1.0
    assert m["llm_calls_per_sample"] == 4 and set(SUMMED) <= set(RESULT_COLUMNS)
    assert (m["llm_calls"], m["failed_calls"], acc.first_errors) == (12, 0, [])


@pytest.mark.parametrize("name", [m for m in METHODS
                                  if not method_class(m).result_columns and not method_class(m).metrics])
def test_a_method_without_columns_of_its_own_has_only_the_generic_ones(name):
    assert not method_class(name).result_columns and not method_class(name).metrics
    driver = Driver(_members([name]), ScriptedEngine("scripted", respond))
    for _, r in driver.finish(driver.run(SAMPLES[:1])):
        assert r.method_columns == {} and tuple(r.to_dict()) == RESULT_COLUMNS
    acc = MetricsAccumulator()
    acc.add(r.to_dict())
    assert not {"trusted_rate", "override_rate", "coordinator_agreement"} & set(acc.result())


def test_the_accumulator_counts_calls_and_keeps_the_first_errors():
    # Prompts over 20 tokens fail (a context-length error): every call of every sample.
    engine = ScriptedEngine("scripted", respond, max_prompt_tokens=20)
    acc = MetricsAccumulator()
    driver = Driver(_members(["darkforest"]), engine)
    for _, r in driver.finish(driver.run(SAMPLES)):
        acc.add(r.to_dict())
    m = acc.result()
    # three agents per sample (the coordinator of a belief with no valid answer is called
    # too): counted, not rebuilt from the per-sample average
    assert m["llm_calls"] == sum(r["n_calls"] for r in _rows(SAMPLES, engine))
    assert m["failed_calls"] == m["llm_calls"] and m["samples_with_errors"] == 3
    # the first distinct errors, each with its agent, from the rows as they came
    assert len(acc.first_errors) == 3
    assert [e.split(":")[0] for e in acc.first_errors] == ["a1", "a2", "a3"]
    assert all("context_length_exceeded" in e for e in acc.first_errors)


def _rows(samples, engine):
    driver = Driver(_members(["darkforest"]), engine)
    return [r.to_dict() for _, r in driver.finish(driver.run(samples))]


def test_outcome_carries_coordinator_and_top_answer():
    driver = Driver(_members(["darkforest"]), ScriptedEngine("scripted", respond))
    ((_, outcome, row),) = driver.outcomes(driver.run(SAMPLES[:1]))
    assert outcome.coordinator is not None and outcome.coordinator.answer == "B"
    assert outcome.columns["coordinator_called"] and outcome.columns["top_answer"] == "B"
    own = row.method_columns
    assert (own["coordinator_answer"], own["top_answer"], own["coordinator_agrees"]) == \
        ("B", "B", True)
    assert own["coordinator_correct"] is True and own["decision_source"] == "guardrail"
    assert tuple(own) == tuple(DarkForest.result_columns)  # every declared one, in order
    assert tuple(row.to_dict()) == (*RESULT_COLUMNS, *DarkForest.result_columns)
    assert "coordinator_called" not in outcome.extra


@pytest.mark.parametrize("name", ["darkforest", "weighted_vote"])
def test_calibration_records_come_from_the_method(name):
    member = Member.from_config(driver_config(method=name, method_args={"ablation": "full"} if name == "darkforest" else {}), for_calibration=True)
    assert member.method.needs_calibration and member.rounds == 1
    driver = Driver([member], ScriptedEngine("scripted", respond))
    recs = driver.calibration_records(driver.run(SAMPLES))
    assert len(recs) == 3
    for _, rec in recs:
        assert [o.agent for o in rec.observations] == ["a1", "a2", "a3"]
        assert rec.correct == {"B": True}


def test_needs_calibration_is_a_method_capability():
    assert not driver_config(method="darkforest", method_args={"ablation": "no_calibration"}).build_method().needs_calibration
    assert driver_config(method="darkforest", method_args={"ablation": "full"}).build_method().needs_calibration
    assert not driver_config(method="weighted_vote", method_args={"majority": True}
                      ).build_method().needs_calibration
    assert not driver_config(method="debate").build_method().needs_calibration


def test_evaluate_a_config_in_process(tmp_path):
    cfg = RunConfig.model_validate({
        "benchmark": "mmlu_pro", "source": str(FIXTURE), "limit": 2,
        "backbones": {f"b{i}": {"kind": "scripted", "model": f"m{i}", "script": SCRIPT}
                      for i in (1, 2, "c")},
        "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2)],
        "coordinator": {"id": "coord", "backbone": "bc"},
        "method_args": {"lazy": True, "ablation": "no_calibration"},
        "results_dir": str(tmp_path / "results"), "cache_root": str(tmp_path / "cache"),
    })
    ev = df_ray.evaluate(cfg)
    assert len(ev.rows) == 2 and ev.metrics["n_samples"] == 2
    assert all(r.final_answer == "B" for r in ev.rows)
    assert ev.outcomes[0].columns["trusted"] and ev.metrics["trusted_rate"] == 1.0
    # lazy: trusted, no coordinator call
    assert all(r.method_columns["coordinator_called"] is False for r in ev.rows)
    assert all(r.method_columns["coordinator_correct"] is None for r in ev.rows)


def test_evaluate_the_pieces_in_process():
    engines = {a: ScriptedEngine(f"m-{a}", respond) for a in ("a1", "a2", "a3", "coordinator")}
    ev = df_ray.evaluate(("darkforest", "mmlu_pro", engines), SAMPLES[:2])
    assert [r.final_answer for r in ev.rows] == ["B", "B"]
    assert ev.metrics["llm_calls_per_sample"] == 4
    ev = df_ray.evaluate(("single", "mmlu_pro", {"a1": engines["a1"]}), SAMPLES[:1])
    assert ev.rows[0].n_calls == 1 and ev.accuracy == 1.0


def test_evaluate_fits_a_missing_calibration_in_process(tmp_path):
    cfg = RunConfig.model_validate({
        "benchmark": "mmlu_pro", "source": str(FIXTURE), "limit": 2,
        "backbones": {f"b{i}": {"kind": "scripted", "model": f"m{i}", "script": SCRIPT}
                      for i in (1, 2, "c")},
        "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2)],
        "coordinator": {"id": "coord", "backbone": "bc"},
        # the test split holds the whole file: held-out rows come from GoA's fixture (its
        # "What is 2 + 2?" is a test question and is dropped; two rows remain)
        "calibration_source": str(FIXTURE.parent / "mmlu_pro_goa.json"),
        "calibration": {"dir": str(tmp_path / "cal"), "limit": 2, "min_samples": 2},
        "cache_root": str(tmp_path / "cache"),
    })
    ev = df_ray.evaluate(cfg)
    (fitted,) = (tmp_path / "cal").glob("*.json")
    assert json.loads(fitted.read_text())["n_samples"] == 2
    assert [r.final_answer for r in ev.rows] == ["B", "B"]


class _KilledMidRound:
    """An engine client that answers the first request of a round, then is killed (the
    process's end, as far as the driver can tell) before the round's other answers come."""

    answers_as_they_come = True

    def __init__(self) -> None:
        self.engine = ScriptedEngine("scripted", respond)

    def generate(self, requests, on_answer=None):
        (first,) = self.engine.generate(requests[:1])
        on_answer(0, first)
        raise KeyboardInterrupt


def test_answers_are_cached_as_they_come_so_a_kill_mid_round_keeps_them(tmp_path, monkeypatch):
    from df_ray.evaluation import driver as driver_module
    from df_ray.pipeline.cache import GenerationCache

    monkeypatch.setattr(driver_module._AnswerSink, "FLUSH_S", 0.0)
    cache = GenerationCache(str(tmp_path / "cache"))
    killed = Driver(_members(["weighted_vote"]), _KilledMidRound(), cache=cache)
    with pytest.raises(KeyboardInterrupt):
        killed.run(SAMPLES[:1])
    assert len(GenerationCache(str(tmp_path / "cache"))) == 1
    # the rerun makes only the calls the killed round had not been answered
    engine = ScriptedEngine("scripted", respond)
    rerun = Driver(_members(["weighted_vote"]), engine,
                   cache=GenerationCache(str(tmp_path / "cache")))
    (row,) = [r for _, r in rerun.finish(rerun.run(SAMPLES[:1]))]
    assert row.correct and row.n_calls == EXPECTED_CALLS["weighted_vote"]
    assert engine.n_calls == EXPECTED_CALLS["weighted_vote"] - 1
