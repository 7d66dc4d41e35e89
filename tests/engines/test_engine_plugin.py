"""An engine kind df_ray has never seen: one temporary module (its engine and its spec, with
settings, validation, Ray resources and capacity of its own) plus one line in
``ENGINE_KINDS``, validated by ``df-ray validate`` and run end to end by ``df_ray.evaluate``
on the toy benchmark of ``tests/evaluation/test_plugins.py``, with no edit to df_ray."""

from __future__ import annotations

import sys

import pytest
import yaml
from pydantic import ValidationError

import df_ray
import df_ray.plugins
from df_ray.cli import main
from df_ray.config import RunConfig
from df_ray.core.parsing import KINDS
from df_ray.engines import ENGINE_KINDS, EngineSpec, make_engine, make_spec, spec_class
from df_ray.pipeline.engine_pool import _actor_options, resource_problems
from df_ray.tasks import REGISTRY
from tests.evaluation.test_plugins import PLUGIN as PARITY_PLUGIN
from tests.evaluation.test_plugins import config as parity_config

ORACLE_PLUGIN = '''
"""The oracle: knows whether n is even, and says so (or, contrary, says the opposite)."""

from pydantic import Field, field_validator

from df_ray.engines.base import Completion
from df_ray.engines.scripted import last_user_content
from df_ray.engines.spec import EngineSpec


class OracleSpec(EngineSpec):
    #: answer the opposite of the truth, less confidently
    contrary: bool = False
    #: threads an oracle thinks with: one CPU each
    workers: int = Field(1, ge=1, le=8)

    @field_validator("model")
    @classmethod
    def _an_oracle(cls, v):
        if not v.startswith("oracle-"):
            raise ValueError(f"an oracle's model is named oracle-<name>, not {v!r}")
        return v

    def ray_resources(self):
        return {"num_gpus": self.resolved_num_gpus, "num_cpus": float(self.workers)}

    @property
    def capacity(self):
        return 4 * self.workers


class OracleEngine:
    Spec = OracleSpec

    def __init__(self, spec):
        self.spec = spec
        self.model = spec.model

    def generate(self, requests):
        out = []
        for r in requests:
            n = int(last_user_content(r).split("Is ", 1)[1].split(" ", 1)[0])
            even = (n % 2 == 0) != self.spec.contrary
            conf = 0.6 if self.spec.contrary else 0.9
            text = f"Verdict: {'yes' if even else 'no'}\\nConfidence: {conf}"
            out.append(Completion(text, self.count_tokens(r.messages[-1].content),
                                  self.count_tokens(text), finish_reason="stop"))
        return out

    def count_tokens(self, text):
        return len(text.split())
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    (tmp_path / "parity_plugin.py").write_text(PARITY_PLUGIN)
    (tmp_path / "oracle_plugin.py").write_text(ORACLE_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    # modules of these names from another test's folder are not these, nor ours theirs
    names = ("parity_plugin", "oracle_plugin")
    for name in names:
        sys.modules.pop(name, None)
    # the parity config's plugins: list is recorded as imported only for this test
    monkeypatch.setattr(df_ray.plugins, "_loaded", dict(df_ray.plugins._loaded))
    monkeypatch.setitem(REGISTRY, "parity", "parity_plugin:ParityTask")
    monkeypatch.setitem(KINDS, "verdict", "parity_plugin")
    # the engine kind's registry line
    monkeypatch.setitem(ENGINE_KINDS, "oracle", "oracle_plugin:OracleEngine")
    yield tmp_path
    for name in names:
        sys.modules.pop(name, None)


def oracle_config(tmp_path) -> dict:
    cfg = parity_config(tmp_path)
    cfg["backbones"] = {"b1": {"kind": "oracle", "model": "oracle-a", "workers": 2},
                        "b2": {"kind": "oracle", "model": "oracle-b"},
                        "b3": {"kind": "oracle", "model": "oracle-c", "contrary": True}}
    return cfg


def test_the_kind_declares_its_spec(plugins):
    spec = make_spec(kind="oracle", model="oracle-a", workers=3)
    assert type(spec).__name__ == "OracleSpec" and spec_class("oracle") is type(spec)
    assert isinstance(spec, EngineSpec) and (spec.workers, spec.contrary) == (3, False)
    assert EngineSpec.model_validate({"kind": "oracle", "model": "oracle-a"}) == \
        make_spec(kind="oracle", model="oracle-a")
    # its own Ray resources and capacity, asked of the spec by the pipeline
    assert _actor_options(spec) == {"num_gpus": 0.0, "num_cpus": 3.0}
    assert spec.capacity == 12 and spec.identity_kind == "oracle"
    (msg,) = resource_problems({"o": spec}, [{"CPU": 2.0}])
    assert "backbone 'o' (oracle: oracle-a) asks for 0 GPUs and 3 CPUs per replica" in msg
    assert resource_problems({"o": spec}, [{"CPU": 4.0}]) == []


def test_the_kind_validates_its_own_settings(plugins):
    with pytest.raises(ValidationError, match="an oracle's model is named oracle-<name>"):
        make_spec(kind="oracle", model="delphi")
    with pytest.raises(ValidationError, match="less than or equal to 8"):
        make_spec(kind="oracle", model="oracle-a", workers=9)
    with pytest.raises(ValidationError, match=r"n_threads is not a setting of kind 'oracle' "
                                              r"\(it is a setting of kind 'embedded'\)"):
        make_spec(kind="oracle", model="oracle-a", n_threads=2)
    with pytest.raises(ValidationError, match=r"workers is not a setting of kind 'vllm' "
                                              r"\(it is a setting of kind 'oracle'\)"):
        make_spec(kind="vllm", model="m", workers=2)
    with pytest.raises(ValidationError, match="'simulated', 'serve' or 'oracle'"):
        make_spec(kind="sibyl", model="oracle-a")


def test_a_config_keeps_the_kind_through_its_json(plugins, tmp_path):
    cfg = RunConfig.model_validate(oracle_config(tmp_path))
    assert cfg.backbones["b3"].contrary is True
    again = RunConfig.model_validate_json(cfg.model_dump_json())  # as stages receive it
    assert again.backbones == cfg.backbones and again.fingerprint() == cfg.fingerprint()
    contrary_b2 = oracle_config(tmp_path)
    contrary_b2["backbones"]["b2"]["contrary"] = True
    assert RunConfig.model_validate(contrary_b2).fingerprint() != cfg.fingerprint()
    bad = oracle_config(tmp_path)
    bad["backbones"]["b2"]["script"] = "echo"
    with pytest.raises(ValidationError, match="script is not a setting of kind 'oracle'") as e:
        RunConfig.model_validate(bad)
    assert e.value.errors()[0]["loc"] == ("backbones", "b2")


def test_a_new_engine_kind_runs_end_to_end_with_no_df_ray_edit(plugins, tmp_path, capsys):
    engine = make_engine({"kind": "oracle", "model": "oracle-a"})
    assert type(engine).__name__ == "OracleEngine"
    path = tmp_path / "oracle.yaml"
    path.write_text(yaml.safe_dump(oracle_config(tmp_path)))
    assert main(["validate", "--config", str(path)]) == 0, capsys.readouterr().err
    ev = df_ray.evaluate(oracle_config(tmp_path))
    assert [r.sample_id for r in ev.rows] == [f"n{n}" for n in range(6)]
    # b1 and b2 are right and agree: the guardrail trusts them over the contrary b3
    assert [r.final_answer for r in ev.rows] == ["yes", "no", "yes", "no", "yes", "no"]
    assert ev.metrics["accuracy"] == 1.0


# ---------------------------------------------------------------- built from the plan's target


def test_a_replica_builds_the_kind_from_its_target_not_a_registry(plugins, tmp_path):
    """The plan keeps each backbone's engine kind as its ``"module:Class"``; a process with
    no registry line for the kind (a Ray worker) validates the spec with the target's Spec
    and builds the target's engine."""
    from df_ray.evaluation.plan import resolve

    (plan,) = resolve(oracle_config(tmp_path))
    assert plan.engines == {"oracle": "oracle_plugin:OracleEngine"}
    del ENGINE_KINDS["oracle"]  # as in a worker that never ran the registry line
    spec = {"kind": "oracle", "model": "oracle-c", "contrary": True, "workers": 2}
    with pytest.raises(ValueError, match="unknown engine kind 'oracle'"):
        make_engine(spec)
    engine = make_engine(spec, plan.engines["oracle"])
    assert type(engine).__name__ == "OracleEngine"
    assert type(engine.spec).__name__ == "OracleSpec" and engine.spec.workers == 2
    with pytest.raises(ValidationError, match="less than or equal to 8"):
        make_engine({**spec, "workers": 9}, plan.engines["oracle"])


PARITY_ENGINE = '''
"""The engine kind of a plugin: a scripted engine that knows whether n is even."""

from pydantic import Field

from df_ray.engines.scripted import ScriptedEngine, ScriptedSpec, last_user_content


class ParitySpec(ScriptedSpec):
    confidence: float = Field(0.9, ge=0.0, le=1.0, description="the confidence it states")


class ParityEngine(ScriptedEngine):
    Spec = ParitySpec

    @classmethod
    def from_spec(cls, spec):
        def respond(request):
            n = int(last_user_content(request).split("Is ", 1)[1].split(" ", 1)[0])
            verdict = "no" if n % 2 else "yes"
            return f"Verdict: {verdict}\\nConfidence: {spec.confidence}"

        return cls(spec.model, respond)
'''


@pytest.mark.slow
def test_an_engine_kind_registered_in_the_driver_runs_on_ray(plugins, tmp_path, ray_local,
                                                             monkeypatch, capsys):
    """``df-ray run`` on a local Ray with backbones of an engine kind whose registry line
    ran in the driver alone: the replicas build it from the plan's target (its module is a
    plugin of the config, so its folder reaches them; the line does not)."""
    import pyarrow.parquet as pq

    from tests.evaluation.test_plugins import _write_config

    (tmp_path / "parity_engine.py").write_text(PARITY_ENGINE)
    sys.modules.pop("parity_engine", None)
    monkeypatch.setitem(ENGINE_KINDS, "parity_engine", "parity_engine:ParityEngine")
    backbones = {f"b{i}": {"kind": "parity_engine", "model": f"m{i}"} for i in (1, 2, 3)}
    path = _write_config(tmp_path, plugins=["parity_plugin", "parity_engine"],
                         backbones=backbones)
    try:
        assert main(["run", "--config", str(path)]) == 0, capsys.readouterr().err
    finally:
        sys.modules.pop("parity_engine", None)
    (results,) = (tmp_path / "results").rglob("samples.parquet")
    rows = pq.read_table(results).to_pylist()
    assert len(rows) == 6 and all(r["correct"] for r in rows)
