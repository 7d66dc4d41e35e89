"""The engine service on a real (local) Ray: scripted backbones deployed as Serve applications,
a sweep whose backbones are ``kind: serve`` gives exactly the job-owned engines' results
(tests/pipeline/test_pipeline_ray.py's hand-computed metrics), and a second job asking the same
calls is answered without generating them again; a served stage's answers come marked
journaled, so its batches' ends write no cache part, and the run's end folds them."""

from __future__ import annotations

import pytest

from df_ray.config import ConfigError
from df_ray.engines.spec import make_spec
from df_ray.pipeline.cache import GenerationCache
from df_ray.pipeline.cache import journal as J
from df_ray.pipeline.runner import Runner, shared_backbones
from df_ray.serving.apps import ServeOptions, deploy, status, stop
from tests.helpers import (
    PIPELINE_SCRIPT,
    cache_parts,
    pipeline_config,
    pipeline_samples,
    run_pipeline,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def service(ray_local):
    from ray import serve

    backbones = {f"b{i}": make_spec(kind="scripted", model=f"m{i}", script=PIPELINE_SCRIPT)
                 for i in (1, 2, 3)}
    backbones["bc"] = make_spec(kind="scripted", model="mc", script=PIPELINE_SCRIPT)
    deploy(backbones, ServeOptions(num_cpus=0), proxy_location="Disabled", say=lambda m: None)
    yield backbones
    stop(list(backbones), say=lambda m: None)
    serve.shutdown()


def served_config(tmp_path, **over):
    backbones = {f"b{i}": {"kind": "serve", "model": f"m{i}"} for i in (1, 2, 3)}
    backbones["bc"] = {"kind": "serve", "model": "mc"}
    return pipeline_config(tmp_path, backbones=backbones, **over)


def engine_stats(app: str) -> dict:
    from ray import serve

    return serve.get_deployment_handle("EngineServer", app).stats.remote().result(timeout_s=30)


def test_served_backbones_give_the_job_owned_results(service, tmp_path):
    st = status()
    assert {n: (e["status"], e["running"], e["model"]) for n, e in st.items()
            if n in service} == {n: ("RUNNING", 1, s.model) for n, s in service.items()}
    before = {n: engine_stats(n)["generated"] for n in service}
    res = run_pipeline(served_config(tmp_path), pipeline_samples())
    m = res.metrics
    # exactly tests/pipeline/test_pipeline_ray.py::test_metrics_match_hand_computation
    assert m["n_samples"] == 5
    assert m["accuracy"] == pytest.approx(0.8)
    assert m["reachability"] == pytest.approx(0.6)
    assert m["override_rate"] == pytest.approx(0.4)
    assert m["llm_calls_per_sample"] == pytest.approx(4.0)
    assert m["fresh_calls"] == 20
    assert m["t_cross_per_sample"] > 0  # counted by the served coordinator's tokenizer
    after = {n: engine_stats(n)["generated"] for n in service}
    assert sum(after.values()) - sum(before.values()) == 20
    # the service finished the run's journals once its calls were answered, and the run's
    # end folded them: every answer in a part, no journal left
    assert J.journal_paths(str(tmp_path / "cache")) == []
    assert len(GenerationCache(str(tmp_path / "cache"))) == 20

    # Another job (its own cache, its own MLflow store): the service answers every call from
    # the requests it has just generated; the engines generate nothing.
    other = tmp_path / "other"
    cfg2 = served_config(other, name="again")
    res2 = run_pipeline(cfg2, pipeline_samples())
    assert res2.metrics["accuracy"] == pytest.approx(0.8)
    assert res2.metrics["fresh_calls"] == 20  # fresh to that job (not in its cache) ...
    assert {n: engine_stats(n)["generated"] for n in service} == after  # ... generated once
    assert sum(engine_stats(n)["coalesced"] for n in service) >= 20


def test_a_served_stage_writes_no_part_at_a_batch_end_when_every_answer_is_journaled(
        service, tmp_path, monkeypatch):
    """A stage (in this process, as a Ray Data actor runs it) over the service's agents and a
    job-owned coordinator: every answer, from either side, comes marked journaled, so a
    batch's end writes no part; the journals finished, the fold puts every answer in one
    part. A service that does not mark its answers (deployed by an earlier df_ray) still
    answers, and its stage writes a part at the batch's end."""
    import dataclasses

    import numpy as np

    from df_ray.evaluation.plan import RunPlan
    from df_ray.pipeline import faults, signals, stages
    from df_ray.pipeline.cache import fold_root, write_behind
    from df_ray.pipeline.rows import encode_sample
    from df_ray.serving.client import ServingPool

    # what a stage actor sets up for its process, left as it is here; and only a batch's
    # end decides when a part is written
    monkeypatch.setattr(faults, "install", lambda label: None)
    monkeypatch.setattr(signals, "on_interrupt", lambda owner, fn: None)
    monkeypatch.setattr(stages.pa, "set_memory_pool", lambda pool: None)
    monkeypatch.setattr(write_behind, "FLUSH_S", float("inf"))
    cfg = served_config(tmp_path)
    cfg = cfg.model_copy(update={"backbones": {**cfg.backbones, "bc": make_spec(
        kind="scripted", model="mc", script=PIPELINE_SCRIPT)}})
    samples = pipeline_samples()
    batches = [{"sample": np.array([encode_sample(s) for s in samples[i:i + 3]], dtype=object)}
               for i in (0, 3)]
    pool = ServingPool(shared_backbones([cfg]))
    try:
        pool.wait_ready()
        stage = stages.EvaluationStage([RunPlan.of(cfg, samples)], pool.handles)
        for b in batches:
            stage(b)
            assert cache_parts(tmp_path / "cache") == []  # held, on disk in the journals
        assert len(stage.cache.pending) == 20 and set(stage.cache.pending) <= \
            stage.client.journaled

        old = cfg.model_copy(update={"cache_root": str(tmp_path / "old")})
        unmarked = {n: [dataclasses.replace(h[0], marks=False)] if n != "bc" else h
                    for n, h in pool.handles.items()}
        stage2 = stages.EvaluationStage([RunPlan.of(old, samples)], unmarked)
        stage2(batches[0])
        assert len(cache_parts(tmp_path / "old")) == 1
        assert len(GenerationCache(str(tmp_path / "old"))) == 12
    finally:
        pool.shutdown()  # the job-owned replica's journals finished
    assert fold_root(str(tmp_path / "cache")) >= 2  # the service's and the coordinator's
    assert len(cache_parts(tmp_path / "cache")) == 1
    cache = GenerationCache(str(tmp_path / "cache"))
    assert {k: cache.get(k) for k in stage.cache.pending} == {
        k: stage.cache.get(k) for k in stage.cache.pending}


def test_a_missing_or_mismatched_application_fails_before_anything_runs(service, tmp_path):
    cfg = served_config(tmp_path)
    bad = cfg.model_copy(update={"backbones": {**cfg.backbones,
                                               "b1": make_spec(kind="serve", model="m1",
                                                               app="nope")}})
    with pytest.raises(ConfigError, match="no Serve application 'nope'"):
        Runner(shared_backbones([bad]), tracker=None, progress=lambda m: None).pool  # noqa: B018
    wrong = cfg.model_copy(update={"backbones": {**cfg.backbones,
                                                 "b1": make_spec(kind="serve", model="m2",
                                                                 app="b1")}})
    with pytest.raises(ConfigError, match="serves model 'm1'"):
        Runner(shared_backbones([wrong]), tracker=None, progress=lambda m: None).pool  # noqa: B018


def test_a_replica_that_cannot_start_fails_its_deployment_with_the_cause(service, tmp_path,
                                                                          capsys):
    # `df-ray serve` of its own application beside the module's service (which it must leave
    # running): one line with the replica's exception, exit status 1.
    import yaml

    from df_ray.cli import main

    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump({"backbones": {"broken": {
        "kind": "scripted", "model": "mb", "script": PIPELINE_SCRIPT,
        "engine_args": {"raise_on_start": "the model file is corrupt"}}}}))
    try:
        rc = main(["serve", "--config", str(pool), "--num-cpus", "0",
                   "--proxy-location", "Disabled"])
    finally:
        stop(["broken"], say=lambda m: None)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("df-ray serve:")]
    assert rc == 1
    assert len(err) == 1 and "broken: scripted mb failed to start:" in err[0] \
        and "the model file is corrupt" in err[0], err
    assert {n: e["status"] for n, e in status().items() if n in service} == \
        {n: "RUNNING" for n in service}


def test_a_replica_that_dies_in_its_smoke_generation_is_named_by_its_signal(service, tmp_path):
    # The replica's one-token smoke generation kills it with SIGILL, as a build this CPU cannot
    # run would, once (the marker file): its fault log names the signal, and Serve's
    # replacement starts and serves.
    from df_ray.pipeline import faults

    marker = tmp_path / "fired"
    crashy = {"crashy": make_spec(kind="scripted", model="mx", script=PIPELINE_SCRIPT, engine_args={
        "signal_on_start": True, "fault_marker": str(marker)})}
    try:
        deploy(crashy, ServeOptions(num_cpus=0), proxy_location="Disabled", say=lambda m: None)
        assert marker.exists()
        died = [f for f in faults.read_faults() if f.label == "serve-crashy"]
        assert [f.signal for f in died] == [4], died  # SIGILL
        assert status()["crashy"]["status"] == "RUNNING"
    finally:
        stop(list(crashy), say=lambda m: None)


def test_an_engine_kind_registered_in_the_driver_alone_builds_in_a_deployment(
        service, tmp_path, monkeypatch, capsys):
    """``df-ray serve --plugin`` of a pool of an engine kind whose registry line ran in this
    process alone (as a plugin's line does): the replica imports the plugin and builds from
    the target the driver resolved, with the kind's own spec, and answers."""
    import sys

    import yaml
    from ray import serve

    import df_ray.plugins
    from df_ray.cli import main
    from df_ray.engines.base import ChatRequest, Message
    from df_ray.engines.spec import ENGINE_KINDS
    from tests.engines.test_engine_plugin import PARITY_ENGINE

    (tmp_path / "parity_engine.py").write_text(PARITY_ENGINE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(df_ray.plugins, "_loaded", {})  # this test's plugin alone
    monkeypatch.setitem(ENGINE_KINDS, "parity_engine", "parity_engine:ParityEngine")
    sys.modules.pop("parity_engine", None)
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump({"backbones": {"parity": {
        "kind": "parity_engine", "model": "mp", "confidence": 0.7}}}))
    try:
        rc = main(["serve", "--config", str(pool), "--plugin", "parity_engine",
                   "--num-cpus", "0", "--proxy-location", "Disabled"])
        assert rc == 0, capsys.readouterr().err
        handle = serve.get_deployment_handle("EngineServer", "parity")
        assert handle.info.remote().result(timeout_s=60)["spec"]["confidence"] == 0.7
        asked = ChatRequest(model="mp", messages=(Message("user", "Is 4 even?"),))
        (answer,) = handle.generate.remote([asked.to_dict()]).result(timeout_s=60)
        assert answer["text"] == "Verdict: yes\nConfidence: 0.7", answer
    finally:
        stop(["parity"], say=lambda m: None)
        sys.modules.pop("parity_engine", None)
