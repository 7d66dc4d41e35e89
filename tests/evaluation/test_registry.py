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
"""A toy method: the chosen agent's independent answer."""

from pydantic import Field

from df_ray.methods.base import Method, MethodArgs, Outcome
from df_ray.methods.common import independent_calls, independent_observations


class Toy(Method):
    name = "toy"

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
        return Outcome(final=chosen if chosen.valid else None, agent_observations=obs)
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
    with pytest.raises(ValueError, match=r"method 'toy'.*pick"):
        driver_config(method=toy, coordinator=False, method_args={"pick": 7})


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


def test_top_level_darkforest_keys_are_still_accepted():
    a = driver_config(disclosure="moderate", lazy_coordinator=True, gamma=0.3)
    b = driver_config(method_args={"disclosure": "moderate", "lazy": True, "gamma": 0.3})
    assert a.build_method().args == b.build_method().args
    assert a.fingerprint() == b.fingerprint()
    with pytest.raises(ValueError, match="set one of them"):
        driver_config(disclosure="strict", method_args={"disclosure": "moderate"})


def test_unknown_names_list_the_registered_ones():
    with pytest.raises(ValueError, match="allowed: 'darkforest'"):
        driver_config(method="nope")
    with pytest.raises(ValueError, match="allowed: 'math'"):
        driver_config(benchmark="nope")
    with pytest.raises(ValueError, match="allowed: 'embedded'"):
        driver_config(backbones={"b": {"kind": "nope", "model": "m"}})
