"""Sampling fields of a request: ``ignore_eos`` keys a request apart, leaves every request
that does not ask for it keyed as before the field existed, is honoured by the engines that
can and refused, as a final error, by those that cannot."""

from __future__ import annotations

import dataclasses

import pytest

from df_ray.config import RunConfig
from df_ray.engines import ChatRequest, Message, SamplingParams, make_spec
from df_ray.engines.base import UNSUPPORTED_SAMPLING_ERROR
from df_ray.engines.openai_http import OpenAIEngine
from df_ray.engines.scripted import ScriptedEngine
from df_ray.engines.simulated import SimulatedEngine
from df_ray.methods.base import agent_view

#: The key of this request as written before ``ignore_eos`` existed: cached generations
#: must keep theirs.
KEY_BEFORE_IGNORE_EOS = "f35e723472b4d44e62e52e004ba0216b3fd13a04e215982ef5ac1b51fa060f4e"
#: A configuration's fingerprint as computed before agents had ``ignore_eos``.
FINGERPRINT_BEFORE_IGNORE_EOS = "fe9fdde72c700f96"


def req(**sampling) -> ChatRequest:
    s = {"temperature": 0.5, "max_tokens": 7, "stop": ("x",), **sampling}
    return ChatRequest(model="m", messages=(Message("user", "hi"),),
                       sampling=SamplingParams(**s), seed=3)


def config(**agent) -> RunConfig:
    return RunConfig.model_validate({
        "name": "n", "benchmark": "math", "method": "single",
        "backbones": {"b1": {"kind": "scripted", "model": "m1"}},
        "agents": [{"id": "a1", "backbone": "b1", **agent}],
        "coordinator": {"id": "c", "backbone": "b1"}})


def test_a_field_at_its_default_keys_as_before():
    assert req().key() == KEY_BEFORE_IGNORE_EOS
    assert req(ignore_eos=False).key() == KEY_BEFORE_IGNORE_EOS
    assert "ignore_eos" not in req().to_dict()["sampling"]


def test_ignore_eos_is_part_of_the_key_and_round_trips():
    r = req(ignore_eos=True)
    assert r.key() != KEY_BEFORE_IGNORE_EOS
    assert r.to_dict()["sampling"]["ignore_eos"] is True
    assert ChatRequest.from_dict(r.to_dict()) == r
    assert ChatRequest.from_dict(req().to_dict()) == req()


def test_agents_ignore_eos_reaches_the_request_and_leaves_old_fingerprints():
    assert config().fingerprint() == FINGERPRINT_BEFORE_IGNORE_EOS
    assert "ignore_eos" not in config().agent_identities()["a1"]
    cfg = config(ignore_eos=True)
    assert cfg.fingerprint() != FINGERPRINT_BEFORE_IGNORE_EOS
    assert cfg.agent_identities()["a1"]["ignore_eos"] is True
    view = agent_view(cfg, "a1")
    assert view.sampling.ignore_eos is True
    # a method's temperature override keeps every other sampling field
    again = dataclasses.replace(view.sampling, temperature=0.0)
    assert again.ignore_eos is True and again.max_tokens == view.sampling.max_tokens


def test_simulated_engine_generates_exactly_max_tokens_with_ignore_eos():
    eng = SimulatedEngine(make_spec(kind="simulated", model="m",
                                    engine_args={"step_s": 0.0, "mean_tokens": 5.0}))
    lengths = [30, 40, 200, 64]  # (never under the answer's own 23 words)
    out = eng.generate([dataclasses.replace(req(max_tokens=n, ignore_eos=True), seed=i)
                        for i, n in enumerate(lengths)])
    assert [c.completion_tokens for c in out] == lengths
    assert {c.finish_reason for c in out} == {"length"}


@pytest.mark.parametrize("kind", ["scripted", "openai"])
def test_engines_that_cannot_honour_ignore_eos_refuse_it(kind):
    if kind == "scripted":
        eng = ScriptedEngine("m", lambda r: "an answer")
    else:  # refused before any request is sent: no server needed
        eng = OpenAIEngine(make_spec(kind="openai", model="m", base_url="http://127.0.0.1:9"))
    out = eng.generate([req(ignore_eos=True)])
    assert out[0].error.startswith(f"{UNSUPPORTED_SAMPLING_ERROR}: the {kind} engine")
    assert "ignore_eos" in out[0].error
    assert out[0].text == "" and out[0].completion_tokens == 0
    if kind == "scripted":
        assert eng.generate([req()])[0].text == "an answer"
