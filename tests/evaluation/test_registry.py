"""One registration per method: a toy method is one new module and one registry line, and
``df-ray validate`` checks every configuration's method_args against the method's Args."""

from __future__ import annotations

import pytest
import yaml

import df_ray
from df_ray.cli import main
from df_ray.methods import REGISTRY, method_class
from tests.helpers import driver_config, make_sample

TOY = '''
"""A toy method: the chosen agent's independent answer; a column and a metric of its own."""

from pydantic import Field

from df_ray.methods.base import Method, MethodArgs, Outcome
from df_ray.methods.common import independent_calls, independent_observations
from df_ray.methods.result_columns import RowMean


class Toy(Method):
    name = "toy"
    result_columns = {"unanimous": "bool"}  # every agent gave the chosen answer
    metrics = {"unanimous_rate": RowMean("unanimous")}

    class Args(MethodArgs):
        pick: int = Field(0, strict=True, ge=0, le=2, description="whose answer is final")

    @property
    def rounds(self):
        return 1

    def plan(self, round, state, ctx):
        return independent_calls(ctx, ctx.agents, state) if round == 0 else []

    def finish(self, state, ctx):
        obs = independent_observations(state, ctx)
        chosen = obs[self.args.pick]
        unanimous = chosen.valid and all(o.answer == chosen.answer for o in obs)
        return Outcome(final=chosen if chosen.valid else None, agent_observations=obs,
                       columns={"unanimous": unanimous})
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "toy_method.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(REGISTRY, "toy", "toy_method:Toy")  # the one registration line
    return "toy"


def test_a_toy_method_is_one_module_and_one_line(toy):
    from tests.helpers import Script, answer

    cfg = driver_config(method=toy, coordinator=False, method_args={"pick": 1})
    assert cfg.build_method().args.pick == 1
    from df_ray.engines.scripted import ScriptedEngine

    script = Script({("a1", "independent"): answer("A"), ("a2", "independent"): answer("B"),
                     ("a3", "independent"): answer("C")})
    engines = {a: ScriptedEngine(m, script) for a, m in (("a1", "m1"), ("a2", "m2"), ("a3", "m3"))}
    ev = df_ray.evaluate((cfg.build_method(), "mmlu_pro", engines), [make_sample()])
    assert ev.rows[0].final_answer == "B" and ev.rows[0].correct
    assert ev.rows[0].method_columns == {"unanimous": False}
    assert ev.metrics["unanimous_rate"] == 0.0 and "trusted_rate" not in ev.metrics
    with pytest.raises(ValueError, match=r"method 'toy'.*pick"):
        driver_config(method=toy, coordinator=False, method_args={"pick": 7})


def test_a_toy_methods_column_and_metric_reach_samples_parquet_and_mlflow(toy, tmp_path):
    """The toy and a method without columns of its own, fused in one driver: each
    configuration's samples.parquet has the generic columns plus its method's, and its MLflow
    run the method's metrics beside the generic ones."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from mlflow.tracking import MlflowClient

    from df_ray.engines.scripted import ScriptedEngine
    from df_ray.evaluation import Driver, Member
    from df_ray.evaluation.scoring import RESULT_COLUMNS
    from df_ray.pipeline.results import ResultsFile, read_results
    from df_ray.pipeline.rows import encode_results
    from df_ray.tracking import Tracker, metric_name
    from tests.helpers import Script, answer

    where = {"results_dir": str(tmp_path / "results"), "cache_root": str(tmp_path / "cache")}
    cfgs = [driver_config(method=toy, coordinator=False, name="toy", **where),
            driver_config(method="single", coordinator=False, name="single", **where)]
    # q1: every agent says B (unanimous); q2: a2 says C
    script = Script({("a2", "independent"): lambda req: answer(
        "C" if "q2" in str(req.messages) else "B")}, default=answer("B"))
    samples = [make_sample("q1"), make_sample("q2", question="q2: " + make_sample().question)]
    driver = Driver([Member.from_config(c) for c in cfgs], ScriptedEngine("scripted", script))
    table = pa.table(encode_results(driver.finish(driver.run(samples))))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    MlflowClient(tracking_uri=uri).create_experiment("toy", str(tmp_path / "artifacts"))
    tracker = Tracker(uri, "toy")
    logged = {}
    for k, cfg in enumerate(cfgs):
        out = ResultsFile(cfg, "toy-sweep")
        out.add(table.filter(pc.equal(table["config"], k)))
        out.close()
        path = out.commit()
        if k == 0:  # the digest its writer computed, passed on: the .sha256 file is not read
            (path.parent / "samples.parquet.sha256").rename(path.parent / "side")
            run_id = tracker.log_run(cfg, out.acc.result(), path, samples_sha256=out.sha256)
            (path.parent / "side").rename(path.parent / "samples.parquet.sha256")
        else:  # without it, the writer's .sha256 file is read
            run_id = tracker.log_run(cfg, out.acc.result(), path)
        assert tracker.client.get_run(run_id).data.tags["df_ray.samples_sha256"] == out.sha256
        logged[cfg.name] = (read_results(path), tracker.client.get_run(run_id).data.metrics)
    toy_rows, toy_metrics = logged["toy"]
    assert toy_rows.column_names == [*RESULT_COLUMNS, "unanimous"]
    assert str(toy_rows.schema.field("unanimous").type) == "bool"
    assert toy_rows.column("unanimous").to_pylist() == [True, False]
    assert toy_metrics[metric_name("unanimous_rate")] == 0.5
    assert toy_metrics["accuracy"] == 1.0 and "trusted_rate" not in toy_metrics
    single_rows, single_metrics = logged["single"]
    assert single_rows.column_names == list(RESULT_COLUMNS)  # no column of another method
    assert not {"unanimous_rate", "trusted_rate", "override_rate"} & set(single_metrics)


# One bad method_args per method: (method, args, the field the message must name).
BAD = [
    ("darkforest", {"disclosure": "loud"}, "disclosure"),
    ("darkforest", {"guardrail": {"tau_p": 1.5}}, "tau_p"),
    ("darkforest", {"lazzy": True}, "lazzy"),
    ("single", {"agent": 3}, "agent"),
    ("single", {"agent": "a9"}, "agent"),
    ("self_consistency", {"samples": 0}, "samples"),
    ("weighted_vote", {"majority": "yes"}, "majority"),
    ("debate", {"roundz": 2}, "roundz"),
    ("reconcile", {"rounds": -1}, "rounds"),
    ("moa", {"layers": 1}, "layers"),
    ("goa_mean", {"threshold": 1.5}, "threshold"),
    ("goa_max", {"top_k": "all"}, "top_k"),
    ("self_refine", {"iterations": 2.5}, "iterations"),
]


def test_every_registered_method_has_a_bad_args_case():
    assert {m for m, _, _ in BAD} == set(REGISTRY)


def test_method_args_name_agents_of_the_run():
    with pytest.raises(ValueError, match="'a9' is not one of the run's agents"):
        driver_config(method="self_refine", method_args={"agent": "a9"})
    assert driver_config(method="single", method_args={"agent": "coord"}).build_method().args.agent


@pytest.mark.parametrize(("method", "args", "field"), BAD, ids=[f"{m}-{f}-{i}" for i, (m, _, f) in enumerate(BAD)])
def test_validate_rejects_bad_method_args(tmp_path, capsys, method, args, field):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "benchmark": "mmlu_pro", "method": method, "method_args": args,
        "backbones": {"b": {"kind": "scripted", "model": "m"}},
        "agents": [{"id": "a1", "backbone": "b"}],
        "coordinator": {"id": "c", "backbone": "b"},
    }))
    assert main(["validate", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"method {method!r}" in err and field in err
    assert "allowed" in err.lower()


def test_every_args_field_is_described():
    for name in REGISTRY:
        cls = method_class(name)
        assert cls.Args.model_fields.keys() == set(cls.arg_names())
        for f in cls.Args.model_fields.values():
            assert f.description, f"{name}: every Args field has a description"


def test_darkforest_knobs_live_in_method_args_only():
    a = driver_config(method_args={"disclosure": "moderate", "lazy": True, "gamma": 0.3})
    assert a.build_method().args.disclosure == "moderate" and a.build_method().args.lazy
    # every Args field is kept (defaults too): equal settings are equal configurations
    b = driver_config(method_args={"disclosure": "moderate", "lazy": True, "gamma": 0.3,
                                   "guardrail": {"k": 2}, "belief_only": False})
    assert a.method_args == b.method_args and a.fingerprint() == b.fingerprint()
    assert a.method_args["guardrail"] == {"k": 2, "tau_p": 0.66, "tau_m": 0.3, "enabled": True,
                                          "fit": False, "max_wrong_override": 0.05,
                                          "delta": 0.1, "testing": "fixed_sequence"}
    assert not {"disclosure", "lazy_coordinator", "ablation", "gamma", "guardrail",
                "belief_only"} & set(type(a).model_fields)


@pytest.mark.parametrize(("key", "value", "moved_to"), [
    ("disclosure", "moderate", "method_args.disclosure"),
    ("guardrail", {"tau_p": 0.8}, "method_args.guardrail"),
    ("lazy_coordinator", True, "method_args.lazy"),
    ("ablation", "no_calibration", "method_args.ablation"),
    ("gamma", 0.3, "method_args.gamma"),
    ("belief_only", True, "method_args.belief_only"),
])
def test_a_top_level_knob_of_an_old_file_says_where_it_moved(tmp_path, capsys, key, value,
                                                             moved_to):
    with pytest.raises(ValueError, match=rf"{key}: darkforest's knobs moved to method_args; "
                                         rf"write {moved_to} "):
        driver_config(**{key: value})
    # an old sweep file: df-ray validate names the run, the field and where it went
    path = tmp_path / "old_sweep.yaml"
    path.write_text(yaml.safe_dump({
        "name": "old", "runs": [{"name": "r", key: value}],
        "base": {"benchmark": "mmlu_pro", "backbones": {"b": {"kind": "scripted", "model": "m"}},
                 "agents": [{"id": "a1", "backbone": "b"}],
                 "coordinator": {"id": "c", "backbone": "b"}}}))
    assert main(["validate", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{key}: darkforest's knobs moved to method_args; write {moved_to}" in err, err


def test_unknown_names_list_the_registered_ones():
    with pytest.raises(ValueError, match="allowed: 'darkforest'"):
        driver_config(method="nope")
    with pytest.raises(ValueError, match="allowed: 'math'"):
        driver_config(benchmark="nope")
    with pytest.raises(ValueError, match="allowed: 'embedded'"):
        driver_config(backbones={"b": {"kind": "nope", "model": "m"}})


def test_the_method_and_the_task_are_built_once_per_configuration(monkeypatch):
    import pickle

    from df_ray.engines.scripted import ScriptedEngine
    from df_ray.methods.darkforest import DarkForest
    from df_ray.tasks.mmlu_pro import MMLUProTask
    from tests.helpers import Script, answer, count_constructions

    built = count_constructions(monkeypatch, method=DarkForest, task=MMLUProTask)
    cfg = driver_config()
    script = Script(default=answer("B"))
    engines = {f"b{a}": ScriptedEngine(m, script) for a, m in
               (("a1", "m1"), ("a2", "m2"), ("a3", "m3"), ("coord", "mc"))}
    ev = df_ray.evaluate(cfg, [make_sample("q1"), make_sample("q2")], engines=engines)
    assert ev.metrics["accuracy"] == 1.0
    # validation, the calibration check, the member and its context share one of each
    assert built == {"method": 1, "task": 1}
    assert cfg.build_method() is cfg.build_method() and cfg.build_task() is cfg.build_task()
    # a copy with other settings gets its own; a pickled copy builds again where it lands
    lazy = cfg.model_copy(update={"method_args": {**cfg.method_args, "lazy": True}})
    assert lazy.build_method().args.lazy and not cfg.build_method().args.lazy
    assert pickle.loads(pickle.dumps(cfg))._built == {}


def test_a_results_file_of_an_older_schema_is_rewritten_not_read(tmp_path):
    """Before methods declared their own columns every row had DarkForest's. A rerun that
    finds such a samples.parquet does not read it: the configuration runs again (its calls
    from the generation cache) and the file is replaced whole, in the new schema; until
    then readers, which select columns by name, still read the old one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from df_ray.engines.scripted import ScriptedEngine
    from df_ray.evaluation import Driver, Member, arrow_schema
    from df_ray.evaluation.scoring import RESULT_COLUMNS
    from df_ray.methods.darkforest import DarkForest
    from df_ray.pipeline.outcome import agent_answers
    from df_ray.pipeline.results import ResultsFile, file_sha256, read_results, results_path
    from df_ray.pipeline.rows import encode_results
    from tests.helpers import Script, answer

    cfg = driver_config(method="single", coordinator=False, name="single",
                        results_dir=str(tmp_path / "results"))
    driver = Driver([Member.from_config(cfg)], ScriptedEngine("scripted", Script(
        default=answer("B"))))
    graded = driver.finish(driver.run([make_sample("q1")]))
    old = results_path(cfg, "sweep") / "samples.parquet"
    old.parent.mkdir(parents=True)
    row = {**graded[0][1].to_dict(), "trusted": False, "overridden": False,
           "coordinator_called": False}
    pq.write_table(pa.Table.from_pylist(
        [row], schema=arrow_schema(DarkForest.result_columns)), old)
    old.with_name("samples.parquet.sha256").write_text(file_sha256(old) + "\n")
    assert "trusted" in read_results(old).column_names
    assert agent_answers(str(old))[0]["final"] == "B"

    out = ResultsFile(cfg, "sweep")
    out.add(pa.table(encode_results(graded)))
    out.close()
    path = out.commit()
    assert path == old
    table = read_results(path)  # the digest beside it is the new file's
    assert table.column_names == list(RESULT_COLUMNS)
    assert table.column("final_answer").to_pylist() == ["B"]
