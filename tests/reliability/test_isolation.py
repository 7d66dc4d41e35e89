"""One bad sample or output spoils only itself: an exception in a method, a parser or a
grader becomes that sample's error row; engine texts are made valid UTF-8 at the engine
boundary; hostile outputs parse within their bound; Python's integer-string limit is handled
where model text becomes a number."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from df_ray.config import SweepConfig
from df_ray.core import ParseSpec, parse
from df_ray.core.parsing._text import MAX_BOX_CHARS, box_positions, boxed_spans
from df_ray.engines.base import ChatRequest, Completion, Message, repair_text
from df_ray.engines.scripted import ScriptedEngine, last_user_content
from df_ray.evaluation import Driver, Member, MetricsAccumulator
from df_ray.evaluation.scoring import SAMPLE_ERROR_ROLE
from df_ray.methods.goa import parse_selection
from df_ray.pipeline.cache import GenerationCache
from df_ray.pipeline.outcome import judge
from tests.helpers import base_config, driver_config, make_sample, write_mmlu_goa
from tests.methods.responders import respond

SAMPLES = [make_sample(f"q{i}") for i in range(10)]


def _member(method: str = "single", fail_in: str = "finish", on: str = "q3") -> Member:
    member = Member.from_config(driver_config(method=method))
    base = type(member.method)

    class Raising(base):  # a method with a bug that shows on one sample only
        def plan(self, round, state, ctx):
            if fail_in == "plan" and state.sample.id == on:
                raise ZeroDivisionError("plan exploded on " + on)
            return super().plan(round, state, ctx)

        def finish(self, state, ctx):
            if fail_in == "finish" and state.sample.id == on:
                raise KeyError("finish exploded on " + on)
            return super().finish(state, ctx)

    member.method.__class__ = Raising
    return member


@pytest.mark.parametrize("where", ["plan", "finish"])
def test_a_method_raising_on_one_sample_gives_its_error_row_and_nine_graded(where):
    driver = Driver([_member(fail_in=where)], ScriptedEngine("scripted", respond))
    graded = [r for _, r in driver.finish(driver.run(SAMPLES))]
    assert [r.sample_id for r in graded] == [s.id for s in SAMPLES]
    bad = [r for r in graded if r.sample_id == "q3"]
    good = [r for r in graded if r.sample_id != "q3"]
    assert len(good) == 9 and all(r.correct and r.final_answer == "B" for r in good)
    (row,) = bad
    assert not row.correct and row.final_answer is None and row.n_errors == 1
    calls = json.loads(row.detail)["calls"]
    err = [c for c in calls if c["role"] == SAMPLE_ERROR_ROLE]
    exc = "ZeroDivisionError" if where == "plan" else "KeyError"
    assert len(err) == 1 and exc in err[0]["error"] and "exploded on q3" in err[0]["error"]
    # counted like a failed call against max_error_rate
    acc = MetricsAccumulator()
    for r in graded:
        acc.add(r.to_dict())
    m = acc.result()
    assert m["failed_calls"] == 1 and m["samples_with_errors"] == 1
    strict = driver_config(method="single", max_error_rate=0.0)
    # the sample's calls made before it raised count too (finish: its one call, plan: none)
    calls = 10 if where == "plan" else 11
    assert f"1 of {calls} LLM calls failed" in judge(strict, m)
    assert judge(driver_config(method="single", max_error_rate=0.2), m) is None


def test_a_grader_raising_on_one_sample_gives_its_error_row():
    member = Member.from_config(driver_config(method="single"))
    task = member.ctx.task
    real = task.grade

    def grade(sample, obs):
        if sample.id == "q5" and obs is not None:
            raise RuntimeError("grader bug")
        return real(sample, obs)

    task.grade = grade
    driver = Driver([member], ScriptedEngine("scripted", respond))
    graded = {r.sample_id: r for _, r in driver.finish(driver.run(SAMPLES))}
    assert len(graded) == 10 and sum(r.correct for r in graded.values()) == 9
    assert "grade: RuntimeError: grader bug" in graded["q5"].detail


def test_goa_selection_over_the_int_string_limit_is_an_unusable_selection():
    assert parse_selection("1" * 5000 + ",2,3", n=4, top_k=3) is None
    assert parse_selection("0,2,3", n=4, top_k=3) == [0, 2, 3]


@pytest.mark.slow
def test_goa_5000_digit_selection_on_one_sample_writes_every_row(tmp_path, ray_local):
    from df_ray.pipeline.runner import run_sweep

    source = write_mmlu_goa(tmp_path / "mmlu.json", 6)
    base = base_config(tmp_path, source, concurrency=1, batch_size=3)
    for b in base["backbones"].values():
        b["script"] = "tests.reliability.responders:goa_huge_selection"
    base["agents"].append({"id": "a4", "backbone": "b1"})
    base.pop("method_args", None)  # DarkForest's knobs, not GoA's
    base.update(method="goa_mean", name="goa")
    sweep = SweepConfig.model_validate({"name": "iso", "base": base, "runs": [{}]})
    (res,) = run_sweep(sweep, tracker=None, progress=lambda m: None)
    import pyarrow.parquet as pq

    rows = pq.read_table(res.samples_path).to_pylist()
    assert len({r["sample_id"] for r in rows}) == 6 and res.metrics["n_samples"] == 6
    assert res.metrics["failed_calls"] == 0
    extra = [json.loads(r["detail"])["extra"] for r in rows]
    # q3's selection (5,000 digits, on every retry) ends in GoA's fallback; the others chose
    fallback = [bool(e.get("selection_fallback")) for e in extra]
    assert sorted(fallback) == [False] * 5 + [True], extra[0]


def test_a_lone_surrogate_is_replaced_at_the_engine_boundary_and_cached(tmp_path):
    engine = ScriptedEngine("scripted", lambda r: "Answer: B \ud800 done")
    cache = GenerationCache(str(tmp_path))
    driver = Driver([Member.from_config(driver_config(method="single"))], engine, cache)
    graded = [r for _, r in driver.finish(driver.run(SAMPLES[:2]))]
    assert all(r.correct for r in graded)
    assert len(cache) == 2  # every completion cached (the batch is not lost)
    again = GenerationCache(str(tmp_path))
    texts = [again.get(k).text for k in list(again._entries)]
    assert texts == ["Answer: B \ufffd done"] * 2
    calls = json.loads(graded[0].detail)["calls"]
    assert calls[0]["repaired"] == 1
    # a later prompt that quotes such an output still has a key
    r = ChatRequest(model="m", messages=(Message("user", "you said \ud800"),))
    assert len(r.key()) == 64
    assert repair_text("a\udfffb") == ("a\ufffdb", 1)
    assert cache.put_many([(r, Completion("x \udc80", 1, 1))]) == 1


def test_surrogate_repairs_are_counted_as_a_run_metric():
    # q1's answer holds two lone surrogates, q2's one, the others none
    lone = {"[q1]": " \ud800 and \udfff", "[q2]": " \udc80"}

    def respond(request):
        u = last_user_content(request)
        return "Answer: B" + next((v for k, v in lone.items() if k in u), "")

    samples = SAMPLES[:4]
    driver = Driver([Member.from_config(driver_config(method="single"))],
                    ScriptedEngine("scripted", respond))
    graded = [r for _, r in driver.finish(driver.run(samples))]
    assert {r.sample_id: r.n_repaired for r in graded} == {"q0": 0, "q1": 2, "q2": 1, "q3": 0}
    assert all(r.correct for r in graded)
    acc = MetricsAccumulator()
    for r in graded:
        acc.add(r.to_dict())
    assert acc.result()["repaired_surrogates"] == 3
    clean = MetricsAccumulator()
    clean.add({**graded[0].to_dict()})
    assert clean.result()["repaired_surrogates"] == 0


@pytest.mark.slow
def test_a_lone_surrogate_through_the_pipeline_finishes_and_reruns_from_cache(tmp_path,
                                                                             ray_local):
    from df_ray.pipeline.runner import run_sweep

    source = write_mmlu_goa(tmp_path / "mmlu.json", 4)
    base = base_config(tmp_path, source, concurrency=1, batch_size=4)
    for b in base["backbones"].values():
        b["script"] = "tests.reliability.responders:surrogate_on_q2"
    sweep = SweepConfig.model_validate({"name": "iso-sur", "base": base, "runs": [{}]})
    (first,) = run_sweep(sweep, progress=lambda m: None)  # logged to the real sqlite store
    assert first.metrics["n_samples"] == 4 and first.metrics["failed_calls"] == 0
    # every answer about q2 (its agents' and its coordinator's) holds one lone surrogate
    rows = pd.read_parquet(first.samples_path)
    calls = [json.loads(d)["calls"] for d in rows["detail"]]
    (q2_calls,) = [cs for cs in calls if any(c.get("repaired") for c in cs)]
    assert len(q2_calls) >= 3 and all(c["repaired"] == 1 for c in q2_calls)
    assert sorted(rows["n_repaired"]) == [0, 0, 0, len(q2_calls)]
    assert first.metrics["repaired_surrogates"] == len(q2_calls)
    run = MlflowClient(tracking_uri=base["tracking"]["uri"]).get_run(first.run_id)
    assert run.data.metrics["repaired_surrogates"] == len(q2_calls)
    from df_ray.cli import format_outcome

    closing, failed = format_outcome([first])
    assert not failed
    assert (f"{len(q2_calls)} lone UTF-16 surrogate(s) in engine outputs were replaced by "
            f"U+FFFD before grading (df: {len(q2_calls)})") in closing
    (again,) = run_sweep(sweep, tracker=None, progress=lambda m: None)
    assert again.metrics["fresh_calls"] == 0  # every call came back from the cache
    assert again.metrics["repaired_surrogates"] == 0  # repaired once, when it was made


@pytest.mark.parametrize("spec", [ParseSpec("choice", n_options=4), ParseSpec("math"),
                                  ParseSpec("label", labels=("Yes", "No"))])
def test_a_200kb_nested_box_output_parses_within_its_bound(spec):
    # The bound is structural (times: jobs/perf/parse_hostile.py): only boxes of at most
    # MAX_BOX_CHARS are ever sliced, so the work around math-verify (itself under its time
    # limit) does not grow with the nesting.
    text = "\\boxed{" * 24_000 + "C" + "}" * 24_000
    assert 190_000 < len(text) <= 200_000
    spans = boxed_spans(text)
    assert spans and all(len(c) <= MAX_BOX_CHARS for _, c in spans)
    assert len(spans) <= MAX_BOX_CHARS // len("\\boxed{}") + 1
    assert len(box_positions(text)) == 24_000
    obs = parse(text, spec)
    assert obs.valid or obs.reason  # an answer, or why not (e.g. the time limit): no hang
    if spec.kind == "choice":
        assert obs.answer == "C"
