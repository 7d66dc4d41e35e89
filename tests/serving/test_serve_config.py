"""The engine service's building blocks without a cluster: what `df-ray serve` deploys for each
backbone kind (vLLM through ray.serve.llm, the others through EngineServer), pool files, the
and the wire formats (the replica's request handling: tests/engines/test_batching.py)."""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from df_ray.config import ConfigError, RunConfig
from df_ray.engines.base import ChatRequest, Completion, Message, SamplingParams
from df_ray.engines.spec import make_spec
from df_ray.serving import ENGINE_DEPLOYMENT
from df_ray.serving.apps import (
    ReplicaOptions,
    ServeOptions,
    deployment_options,
    llm_config_dict,
    llm_deployment_name,
    load_pool,
)
from df_ray.serving.client import chat_completion_fields, from_chat_completion
from df_ray.serving.deployment import completion_to_openai, openai_to_request

VLLM = make_spec(kind="vllm", model="Qwen/Qwen2.5-7B-Instruct", dtype="bfloat16",
                 max_model_len=8192, replicas=2, max_batch_size=64, revision="abc123",
                 engine_args={"enable_prefix_caching": True})


def req(text: str, seed: int = 0, model: str = "m") -> ChatRequest:
    return ChatRequest(model=model, messages=(Message("user", text),), seed=seed)


# --------------------------------------------------------------------------- specs and configs


def test_serve_kind_names_a_deployed_backbone():
    s = make_spec(kind="serve", model="Qwen/Qwen2.5-7B-Instruct", app="qwen")
    assert s.resolved_num_gpus == 0.0  # the service holds the GPUs, not the job
    assert s.identity_kind == "serve"
    assert make_spec(kind="serve", model="m", engine="vllm").identity_kind == "vllm"
    with pytest.raises(ValueError, match=r"app is not a setting of kind 'scripted' \(it is a "
                       r"setting of kind 'serve'\)"):
        make_spec(kind="scripted", model="m", app="x")
    cfg = RunConfig.model_validate({
        "benchmark": "gpqa", "backbones": {"q": {"kind": "serve", "model": "m"}},
        "agents": [{"id": "a", "backbone": "q"}], "coordinator": {"id": "c", "backbone": "q"}})
    assert cfg.backbones["q"].app is None  # defaults to the backbone's name at run time


def test_vllm_backbone_becomes_an_llm_config():
    d = llm_config_dict("qwen", VLLM, ReplicaOptions(max_replicas=4, resources={"h100": 1},
                                                     accelerator_type="H100"))
    assert d["model_loading_config"] == {"model_id": VLLM.model, "model_source": VLLM.model}
    assert d["engine_kwargs"] == {"dtype": "bfloat16", "tensor_parallel_size": 1,
                                  "gpu_memory_utilization": 0.9, "max_model_len": 8192,
                                  "revision": "abc123", "enable_prefix_caching": True,
                                  # max_batch_size is vLLM's own max_num_seqs
                                  "max_num_seqs": 64}
    auto = d["deployment_config"]["autoscaling_config"]
    assert (auto["min_replicas"], auto["max_replicas"]) == (2, 4)
    assert d["deployment_config"]["ray_actor_options"] == {"resources": {"h100": 1}}
    assert d["accelerator_type"] == "H100"
    # no bound given: a fixed count (min = max = replicas)
    auto = llm_config_dict("qwen", VLLM, ReplicaOptions())["deployment_config"][
        "autoscaling_config"]
    assert (auto["min_replicas"], auto["max_replicas"]) == (2, 2)
    assert llm_deployment_name("Qwen/Qwen2.5-7B-Instruct") == "LLMServer:Qwen--Qwen2_5-7B-Instruct"
    with pytest.raises(ValueError):
        llm_config_dict("s", make_spec(kind="scripted", model="m"), ReplicaOptions())


def test_served_vllm_engine_and_deployment_agree_on_its_sequences():
    """Sampling defaults are no engine argument; the deployment is sized for the sequences
    the engine is told to run: the spec's, else vLLM's default on the accelerator."""
    spec = make_spec(kind="vllm", model="Qwen/Qwen2.5-7B-Instruct",
                     engine_args={"sampling": {"ignore_eos": True}})
    for opts, seqs in ((ReplicaOptions(accelerator_type="H100"), 1024),
                       (ReplicaOptions(accelerator_type="H200"), 1024),
                       (ReplicaOptions(accelerator_type="A100-80G"), 256),
                       (ReplicaOptions(), 256)):
        d = llm_config_dict("qwen", spec, opts)
        assert "sampling" not in d["engine_kwargs"]
        assert d["engine_kwargs"]["max_num_seqs"] == seqs
        assert d["deployment_config"]["autoscaling_config"]["target_ongoing_requests"] == seqs
        assert d["deployment_config"]["max_ongoing_requests"] == 4 * seqs
    own = make_spec(kind="vllm", model="m/m", engine_args={"max_num_seqs": 512})
    d = llm_config_dict("m", own, ReplicaOptions(accelerator_type="H100"))
    assert d["engine_kwargs"]["max_num_seqs"] == 512
    assert d["deployment_config"]["max_ongoing_requests"] == 2048


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="ray.serve.llm's LLMConfig validates against vLLM")
def test_llm_config_is_accepted_by_ray_serve_llm():
    from ray.serve.llm import LLMConfig

    cfg = LLMConfig(**llm_config_dict("qwen", VLLM, ReplicaOptions(max_replicas=3)))
    assert cfg.model_id == VLLM.model


def test_engine_deployment_options():
    emb = make_spec(kind="embedded", model="smollm2-135m-instruct", n_threads=2, replicas=1)
    o = deployment_options("e", emb, ReplicaOptions())
    assert o["name"] == ENGINE_DEPLOYMENT and o["num_replicas"] == 1
    assert o["ray_actor_options"] == {"num_cpus": 2.0, "num_gpus": 0.0}
    assert o["max_ongoing_requests"] >= 8 * emb.capacity
    s = make_spec(kind="scripted", model="m", replicas=2, max_batch_size=8)
    o = deployment_options("s", s, ReplicaOptions(num_cpus=0, resources={"gpu_slot": 1},
                                                   max_replicas=5))
    assert o["ray_actor_options"] == {"num_cpus": 0, "num_gpus": 0.0,
                                      "resources": {"gpu_slot": 1}}
    assert "num_replicas" not in o
    assert o["autoscaling_config"]["min_replicas"] == 2
    assert o["autoscaling_config"]["max_replicas"] == 5


def test_pool_file_and_config_file(tmp_path):
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump({
        "backbones": {"a": {"kind": "scripted", "model": "m1"},
                      "b": {"kind": "scripted", "model": "m2"}},
        "serve": {"num_cpus": 0, "backbones": {"b": {"resources": {"gpu_slot": 1}}}}}))
    backbones, opts = load_pool(pool)
    assert sorted(backbones) == ["a", "b"]
    assert opts.for_backbone("a").resources is None and opts.for_backbone("a").num_cpus == 0
    assert opts.for_backbone("b").resources == {"gpu_slot": 1}
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(yaml.safe_dump({"name": "s", "base": {
        "benchmark": "gpqa", "backbones": {"x": {"kind": "scripted", "model": "m"}},
        "agents": [{"id": "a", "backbone": "x"}], "coordinator": {"id": "c", "backbone": "x"}},
        "serve": {"max_replicas": 2}}))
    backbones, opts = load_pool(cfg)
    assert list(backbones) == ["x"] and opts.max_replicas == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"backbones": {"a": {"kind": "serve", "model": "m"}}}))
    with pytest.raises(ConfigError, match="already a deployed"):
        load_pool(bad)
    bad.write_text(yaml.safe_dump({"backbones": {"a": {"kind": "scripted", "model": "m"}},
                                   "serve": {"backbones": {"zz": {}}}}))
    with pytest.raises(ConfigError, match="unknown backbones"):
        load_pool(bad)
    bad.write_text("colour: blue\n")
    with pytest.raises(ConfigError, match="backbones"):
        load_pool(bad)


@pytest.fixture
def oracle_kind_plugin(tmp_path, monkeypatch):
    """``served_oracle``: tests/engines/test_engine_plugin.py's oracle engine kind in a module
    of its own that registers the kind when imported (no registry line before that)."""
    import sys

    import df_ray.plugins
    from df_ray.engines.spec import ENGINE_KINDS
    from tests.engines.test_engine_plugin import ORACLE_PLUGIN

    (tmp_path / "served_oracle.py").write_text(
        ORACLE_PLUGIN + "\n\nfrom df_ray.engines.spec import register_engine_kind\n\n"
        'register_engine_kind("oracle", "served_oracle:OracleEngine")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(df_ray.plugins, "_loaded", {})
    kinds = dict(ENGINE_KINDS)
    sys.modules.pop("served_oracle", None)
    assert "oracle" not in ENGINE_KINDS
    yield tmp_path
    sys.modules.pop("served_oracle", None)
    ENGINE_KINDS.clear()
    ENGINE_KINDS.update(kinds)


def test_a_pool_file_s_plugins_are_imported_before_it_is_validated(oracle_kind_plugin):
    """A plugin engine kind in a pool file: its ``plugins:`` list, or ``--plugin``
    (``load_pool``'s ``plugins``), is imported first, so the backbone validates with the
    kind's own spec; one that cannot be imported is one line naming it."""
    from df_ray.plugins import PluginError, loaded

    tmp = oracle_kind_plugin
    backbones = {"o": {"kind": "oracle", "model": "oracle-a", "workers": 2}}
    listed = tmp / "listed.yaml"
    listed.write_text(yaml.safe_dump({"plugins": ["served_oracle"], "backbones": backbones}))
    (spec,) = load_pool(listed)[0].values()
    assert type(spec).__name__ == "OracleSpec" and spec.workers == 2
    assert loaded() == ("served_oracle",)
    unlisted = tmp / "unlisted.yaml"
    unlisted.write_text(yaml.safe_dump({"backbones": backbones}))
    assert type(load_pool(unlisted, ["served_oracle"])[0]["o"]).__name__ == "OracleSpec"
    unlisted.write_text(yaml.safe_dump({"plugins": ["no_such_engines"], "backbones": backbones}))
    with pytest.raises(PluginError, match="plugin 'no_such_engines' failed to import: "
                                          "ModuleNotFoundError") as e:
        load_pool(unlisted)
    assert "\n" not in str(e.value)


def test_every_paper_sweep_file_is_a_valid_pool():
    from pathlib import Path

    for f in sorted((Path(__file__).resolve().parents[2] / "jobs" / "configs").glob("*.yaml")):
        backbones, opts = load_pool(f)
        assert backbones and isinstance(opts, ServeOptions)
        for name, spec in backbones.items():
            if spec.kind == "vllm":
                assert llm_config_dict(name, spec, opts.for_backbone(name))


# --------------------------------------------------------------------------- wire formats


def test_openai_wire_format_round_trip():
    body = {"model": "ignored", "messages": [{"role": "system", "content": "be brief"},
                                             {"role": "user", "content": "hi"}],
            "temperature": 0.2, "max_tokens": 7, "stop": "\n\n", "seed": 3}
    r = openai_to_request(body, "m1")
    assert r.model == "m1" and r.seed == 3 and r.sampling.max_tokens == 7
    assert r.sampling.stop == ("\n\n",) and r.messages[0] == Message("system", "be brief")
    out = completion_to_openai(Completion("hello", 4, 1), "m1")
    assert out["choices"][0]["message"]["content"] == "hello"
    assert out["usage"] == {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}
    with pytest.raises(ValueError):
        openai_to_request({"messages": []}, "m1")


def test_vllm_chat_completion_conversion():
    r = ChatRequest(model="Qwen/Q", messages=(Message("user", "2+2?"),),
                    sampling=SamplingParams(temperature=0.7, top_p=0.9, max_tokens=32,
                                            stop=("END",)), seed=5)
    f = chat_completion_fields(r)
    assert f == {"model": "Qwen/Q", "messages": [{"role": "user", "content": "2+2?"}],
                 "temperature": 0.7, "top_p": 0.9, "max_tokens": 32, "seed": 5,
                 "stream": False, "stop": ["END"]}
    c = from_chat_completion({"choices": [{"message": {"content": "4"}}],
                              "usage": {"prompt_tokens": 9, "completion_tokens": 1}})
    assert c == Completion("4", 9, 1)
    err = from_chat_completion({"object": "error", "message": "prompt too long"})
    assert err.error and "prompt too long" in err.error


def test_a_sweep_uses_the_service_by_backbone_name(tmp_path):
    from df_ray.cli import load_with_overrides
    from df_ray.engines import ENGINE_KINDS

    assert "serve" in ENGINE_KINDS
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"name": "s", "base": {
        "benchmark": "gpqa",
        "backbones": {"q": {"kind": "vllm", "model": "Qwen/Q", "revision": "r1",
                            "max_model_len": 4096, "max_batch_size": 48}},
        "agents": [{"id": "a", "backbone": "q"}], "coordinator": {"id": "c", "backbone": "q"}},
        "runs": [{"name": "x"}, {"name": "y", "backbones": {
            "q": {"kind": "vllm", "model": "Qwen/Q", "revision": "r1"},
            "z": {"kind": "scripted", "model": "m"}}}]}))
    sweep = load_with_overrides(str(f), [], None, served=True)
    x, y = sweep.expand()
    assert x.backbones["q"] == make_spec(kind="serve", model="Qwen/Q", revision="r1",
                                         max_batch_size=48, app="q", engine="vllm")
    assert y.backbones["z"].kind == "serve" and y.backbones["z"].app == "z"
    # served and job-owned agents are the same agents to calibration files
    owned = load_with_overrides(str(f), [], None).expand()[0]
    assert x.agent_identities() == owned.agent_identities()
