"""One driver path: ``df_ray.evaluate``, the tests' driver runs and the Ray stage share one
guarded finish (a sample whose ``plan``, ``finish`` or grading raises is its error row,
counted against ``max_error_rate``), one per-request isolation, one accounting of error
rows and graded rows, and answers cached as they arrive; an engine failure (a token count
that fails) stops every path with the fault table's one line."""

from __future__ import annotations

import json

import pytest

import df_ray
from df_ray.engines.scripted import ScriptedEngine
from df_ray.errors import EngineFailure
from df_ray.evaluation import Driver, Member
from df_ray.evaluation.context import build_context
from df_ray.evaluation.scoring import SAMPLE_ERROR_ROLE, error_row, score_outcome
from df_ray.methods.base import CallRecord, Outcome, SampleState
from df_ray.pipeline.cache import GenerationCache
from tests.helpers import (
    base_config,
    count_constructions,
    driver_config,
    make_sample,
    run_pipeline,
    write_mmlu_goa,
)
from tests.methods.responders import respond
from tests.reliability.faulty import FINISH_FAILS_ON, PLAN_FAILS_ON, CountingFails, Faulty

SAMPLES = [make_sample(f"q{i}") for i in range(10)]


def _engines(cfg, **kw):
    return {name: ScriptedEngine(spec.model, respond, **kw)
            for name, spec in cfg.backbones.items()}


def _faulty_config(**over):
    cfg = driver_config(method="single", **over)
    # the configuration's own Method object is the faulty one (built once, then kept)
    cfg.build_method().__class__ = Faulty
    return cfg


def _check_eight_and_two(rows):
    by_id = {r.sample_id: r for r in rows}
    assert list(by_id) == [s.id for s in SAMPLES]
    bad = {PLAN_FAILS_ON: "ZeroDivisionError: plan exploded on q3",
           FINISH_FAILS_ON: "KeyError: 'finish exploded on q7'"}
    good = [r for r in rows if r.sample_id not in bad]
    assert len(good) == 8 and all(r.correct and r.final_answer == "B" for r in good)
    for sid, text in bad.items():
        row = by_id[sid]
        assert not row.correct and row.final_answer is None
        err = [c for c in json.loads(row.detail)["calls"] if c["role"] == SAMPLE_ERROR_ROLE]
        assert len(err) == 1 and text in err[0]["error"], err
    # plan's sample made no call; finish's made its one call before raising
    assert (by_id[PLAN_FAILS_ON].n_calls, by_id[FINISH_FAILS_ON].n_calls) == (1, 2)


def test_evaluate_gives_eight_graded_rows_and_two_error_rows():
    cfg = _faulty_config(max_error_rate=0.0)
    ev = df_ray.evaluate(cfg, SAMPLES, engines=_engines(cfg))
    _check_eight_and_two(ev.rows)
    assert [o is None for o in ev.outcomes] == [s.id in (PLAN_FAILS_ON, FINISH_FAILS_ON)
                                               for s in SAMPLES]
    m = ev.metrics
    assert (m["failed_calls"], m["samples_with_errors"], m["llm_calls"]) == (2, 2, 11)
    assert m["accuracy"] == 0.8
    # counted against max_error_rate, as a job counts them
    assert ev.failure is not None and ev.failure.startswith("2 of 11 LLM calls failed")
    assert "plan round 0: ZeroDivisionError" in ev.failure
    lenient = _faulty_config(max_error_rate=0.2)
    assert df_ray.evaluate(lenient, SAMPLES, engines=_engines(lenient)).failure is None


def test_the_tests_driver_runs_share_the_guarded_finish():
    cfg = _faulty_config()
    driver = Driver([Member.from_config(cfg)], ScriptedEngine("scripted", respond))
    finished = driver.outcomes(driver.run(SAMPLES))
    _check_eight_and_two([r for _, _, r in finished])
    assert sum(o is None for _, o, _ in finished) == 2
    # Driver.finish is the same rows
    assert [r.to_dict() for _, r in driver.finish(driver.run(SAMPLES))] == \
        [r.to_dict() for _, _, r in finished]


def test_error_rows_and_graded_rows_count_calls_and_tokens_alike():
    cfg = driver_config(method="single")
    ctx = build_context(cfg)
    st = SampleState(make_sample("q0"))
    st.calls = [CallRecord(0, "agent", "a1", "k1", "Answer: B", 10, 5),
                CallRecord(0, "agent", "a1", "k2", "", 7, 3, error="engine error: boom"),
                CallRecord(0, "coordinator", "coord", "k3", "x", 4, 2, cached=True,
                           finish_reason="length")]
    graded = score_outcome(st, Outcome(final=None, agent_observations=[]), ctx).to_dict()
    errored = error_row(st, ctx, "finish: KeyError: x").to_dict()
    same = ("agent_tokens", "coordinator_tokens", "other_tokens", "total_tokens",
            "n_fresh_calls", "n_refused", "n_truncated", "n_repaired", "truncation")
    assert {k: graded[k] for k in same} == {k: errored[k] for k in same}
    assert graded["agent_tokens"] == 15  # a failed call spends no tokens, on either row
    # the error row adds the sample's error as one failed call
    assert (errored["n_calls"], errored["n_errors"]) == (graded["n_calls"] + 1,
                                                         graded["n_errors"] + 1)
    calls = json.loads(errored["detail"])["calls"]
    assert calls[:3] == json.loads(graded["detail"])["calls"]


class _Flaky:
    """A static engine that raises on any batch holding a poisoned prompt (every request of
    the batch lost, as a real backend's batch call is), and counts what it answers."""

    def __init__(self, model, poison="q4"):
        self.inner = ScriptedEngine(model, respond)
        self.model, self.poison, self.answered = model, poison, 0

    def generate(self, requests):
        if any(self.poison in m.content for r in requests for m in r.messages):
            raise RuntimeError(f"backend crashed on a batch with {self.poison}")
        self.answered += len(requests)
        return self.inner.generate(requests)

    def count_tokens(self, text):
        return self.inner.count_tokens(text)


def test_one_request_an_engine_raises_on_fails_alone_and_the_rest_are_cached(tmp_path):
    cfg = driver_config(method="single")
    engines = {name: _Flaky(spec.model) for name, spec in cfg.backbones.items()}
    cache = GenerationCache(str(tmp_path / "cache"))
    ev = df_ray.evaluate(cfg, SAMPLES, engines=engines, cache=cache)
    by_id = {r.sample_id: r for r in ev.rows}
    assert by_id["q4"].n_errors == 1 and not by_id["q4"].correct
    assert "engine error: RuntimeError: backend crashed" in by_id["q4"].detail
    assert sum(r.correct for r in ev.rows) == 9 and ev.metrics["failed_calls"] == 1
    # the nine answers are in the cache: a rerun makes none of them again
    again = {name: _Flaky(spec.model) for name, spec in cfg.backbones.items()}
    ev2 = df_ray.evaluate(cfg, SAMPLES, engines=again,
                          cache=GenerationCache(str(tmp_path / "cache")))
    assert sum(e.answered for e in again.values()) == 0
    assert [r.correct for r in ev2.rows] == [r.correct for r in ev.rows]


def test_answers_reach_the_cache_before_an_engine_failure_stops_the_evaluation(tmp_path):
    """Three engines in one round: two answer, the third's failure stops the evaluation;
    the answers of the first two are in the cache already, and a rerun reads them."""

    class Dead:
        model = "m3"

        def generate(self, requests):
            raise EngineFailure("ba3", "m3", 0, "local", "died while serving")

    cfg = driver_config(method="darkforest")
    engines = _engines(cfg)
    engines["ba3"] = Dead()
    root = str(tmp_path / "cache")
    with pytest.raises(EngineFailure, match="died while serving"):
        df_ray.evaluate(cfg, SAMPLES[:4], engines=engines, cache=GenerationCache(root))
    assert len(GenerationCache(root)) == 8  # a1's and a2's four answers each
    again = _engines(cfg)
    ev = df_ray.evaluate(cfg, SAMPLES[:4], engines=again, cache=GenerationCache(root))
    assert again["ba1"].n_calls == again["ba2"].n_calls == 0
    assert ev.metrics["accuracy"] == 1.0


def test_an_engine_failure_in_a_token_count_stops_evaluate_with_its_line():
    cfg = driver_config(method="single")
    cfg.build_method().__class__ = CountingFails
    engines = _engines(cfg, count_fault="raise")
    with pytest.raises(EngineFailure) as info:
        df_ray.evaluate(cfg, SAMPLES[:2], engines=engines)
    line = str(info.value)
    assert line.startswith("engine 'ba1' (model m1), replica 0 on node local: a token count "
                           "failed: InjectedFault: injected failure counting tokens"), line


# ---------------------------------------------------------------- one resolved run plan


def test_a_plan_is_resolved_once_and_crosses_to_the_stage_whole(tmp_path, monkeypatch):
    """Preflight builds each configuration's Method and Task once; the plan pickled to a
    stage (as Ray Data ships the stage's constructor arguments) carries the Method whole: the
    stage validates no configuration again, builds no Method, and builds its Task once."""
    import pickle

    from df_ray.config import RunConfig
    from df_ray.methods.darkforest import DarkForest
    from df_ray.pipeline.runner import preflight
    from df_ray.tasks.mmlu_pro import MMLUProTask

    built = count_constructions(monkeypatch, method=DarkForest, task=MMLUProTask)
    built["validated_json"] = 0
    validate_json = RunConfig.model_validate_json

    def count_json(*a, **k):
        built["validated_json"] += 1
        return validate_json(*a, **k)

    monkeypatch.setattr(RunConfig, "model_validate_json", count_json)
    source = write_mmlu_goa(tmp_path / "mmlu.json", 6)
    base = base_config(tmp_path, source)
    cfgs = [RunConfig.model_validate({**base, "name": n, "seed": i})
            for i, n in enumerate(("a", "b"))]
    before = dict(built)
    (pa, pb) = preflight(cfgs)
    assert pa.samples is pb.samples and len(pa.samples) == 6  # loaded once per samples key
    assert pa.method is cfgs[0].build_method() and pa.fingerprint == cfgs[0].fingerprint()
    # validation built each configuration's Method and Task at most once; preflight none more
    assert built["method"] - before["method"] == 0 and built["task"] == 2
    # in the stage: unpickled, no JSON validated, no Method built, one Task per plan
    shipped = pickle.loads(pickle.dumps([pa, pb]))
    assert all(p.samples == () for p in shipped)  # samples travel as rows
    before = dict(built)
    members = [Member.from_plan(p) for p in shipped]
    assert [type(m.method) for m in members] == [DarkForest, DarkForest]
    assert built["method"] == before["method"] and built["validated_json"] == 0
    assert built["task"] - before["task"] == 2
    assert members[0].ctx.task is shipped[0].task  # built once where it landed


def test_a_fingerprint_is_computed_once_per_configuration(monkeypatch):
    """Preflight, the results path, the tracker and the CLI all ask for it: one hash per
    configuration object; a copy with another field computes its own."""
    from df_ray.config import RunConfig

    cfg = RunConfig.model_validate(driver_config(method="single").model_dump(mode="json"))
    computed = []
    real = RunConfig._fingerprint
    monkeypatch.setattr(RunConfig, "_fingerprint",
                        lambda self: computed.append(self.name) or real(self))
    first = cfg.fingerprint()
    assert [cfg.fingerprint() for _ in range(5)] == [first] * 5 and len(computed) == 1
    other = cfg.model_copy(update={"seed": 7})
    assert other.fingerprint() != first and len(computed) == 2
    import pickle

    assert pickle.loads(pickle.dumps(cfg)).fingerprint() == first  # recomputed where it lands


# ---------------------------------------------------------------- the Ray path, same inputs


def _ray_config(tmp_path, engine_args=None, **over):
    from df_ray.config import RunConfig

    source = write_mmlu_goa(tmp_path / "mmlu.json", 10)
    base = base_config(tmp_path, source, concurrency=1, batch_size=4)
    base.pop("method_args", None)
    for b in base["backbones"].values():
        b["engine_args"] = dict(engine_args or {})
    base.update(method="single", name="faulty", **over)
    return RunConfig.model_validate(base)


def _samples(cfg, n=10):
    import dataclasses

    loaded = cfg.build_task().load("test", source=cfg.source, limit=n, seed=0)
    return [dataclasses.replace(s, id=f"q{i}") for i, s in enumerate(loaded)]


@pytest.mark.slow
def test_the_ray_path_gives_the_same_rows_and_numbers(tmp_path, ray_local):
    cfg = _ray_config(tmp_path, max_error_rate=0.0)
    cfg.build_method().__class__ = Faulty
    samples = _samples(cfg)
    res = run_pipeline(cfg, samples, track=False)
    import pyarrow.parquet as pq

    ray_rows = pq.read_table(res.samples_path).to_pylist()
    ev = df_ray.evaluate(cfg, samples)  # its engines built here from the same backbones
    local = {r.sample_id: r.to_dict() for r in ev.rows}
    for r in ray_rows:
        mine = local[r["sample_id"]]
        for k in ("correct", "final_answer", "n_calls", "n_errors", "total_tokens"):
            assert r[k] == mine[k], (r["sample_id"], k)
    for k in ("accuracy", "llm_calls", "failed_calls", "samples_with_errors",
              "tokens_per_sample"):
        assert res.metrics[k] == ev.metrics[k], k
    assert res.failure == ev.failure and res.failure is not None


@pytest.mark.slow
def test_an_engine_failure_in_a_token_count_stops_the_ray_path(tmp_path, ray_local):
    cfg = _ray_config(tmp_path, engine_args={"count_fault": "raise"}, max_request_retries=0)
    cfg.build_method().__class__ = CountingFails
    samples = _samples(cfg, 4)
    with pytest.raises(EngineFailure) as info:
        run_pipeline(cfg, samples, track=False)
    assert "a token count failed" in str(info.value)
    assert "injected failure counting tokens" in str(info.value)


def test_a_calibration_file_preflight_found_is_the_one_the_run_uses(tmp_path, monkeypatch):
    """Preflight loads the configuration's calibration file once; the plan carries it, so
    the run does not look through the calibration folder again."""
    from df_ray.config import RunConfig
    from df_ray.evaluation import calibration_files
    from df_ray.pipeline.runner import Runner, preflight

    source = write_mmlu_goa(tmp_path / "mmlu.json", 4)
    held_out = write_mmlu_goa(tmp_path / "held_out.json", 8, tag="c")
    base = base_config(tmp_path, source)
    base.pop("method_args")
    base.update(calibration_source=str(held_out),
                calibration={"dir": str(tmp_path / "cal"), "min_samples": 4, "limit": 8})
    cfg = RunConfig.model_validate(base)
    engines = _engines(cfg)
    df_ray.evaluate(cfg, engines=engines)  # fits and freezes the file
    assert len(list((tmp_path / "cal").glob("*.json"))) == 1
    cfg = RunConfig.model_validate(base)  # a fresh process's configuration
    looked = []
    find = calibration_files._find
    monkeypatch.setattr(calibration_files, "_find", lambda c: looked.append(c) or find(c))
    (plan,) = preflight([cfg])
    assert plan.calibration is not None and plan.calibration.n_samples == 8
    assert len(looked) == 1
    runner = Runner(cfg.backbones, progress=lambda m: None)
    monkeypatch.setattr(Runner, "calibration_for",
                        lambda self, c: pytest.fail("the run looked for its calibration again"))
    assert runner.with_calibration(plan) is plan  # what the runner hands the stage


def test_evaluate_takes_a_resolved_plan_as_it_is(tmp_path, monkeypatch):
    from df_ray.config import RunConfig
    from df_ray.methods.darkforest import DarkForest
    from df_ray.pipeline.runner import preflight
    from df_ray.tasks.mmlu_pro import MMLUProTask

    source = write_mmlu_goa(tmp_path / "mmlu.json", 4)
    cfg = RunConfig.model_validate(base_config(tmp_path, source))
    (plan,) = preflight([cfg])
    built = count_constructions(monkeypatch, method=DarkForest, task=MMLUProTask)
    ev = df_ray.evaluate(plan, engines=_engines(cfg))  # its samples, Method and Task
    assert built == {"method": 0, "task": 0}
    assert [r.sample_id for r in ev.rows] == [s.id for s in plan.samples]
    again = df_ray.evaluate(cfg, engines=_engines(cfg))
    assert [r.to_dict() for r in ev.rows] == [r.to_dict() for r in again.rows]
