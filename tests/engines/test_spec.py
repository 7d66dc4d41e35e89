from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from df_ray.engines import EMBEDDED_MODELS, EngineSpec, make_engine, make_spec


def test_defaults():
    s = make_spec(kind="vllm", model="Qwen/Qwen2.5-7B-Instruct")
    assert s.dtype == "auto"
    assert s.tensor_parallel_size == 1
    assert s.gpu_memory_utilization == 0.9
    assert s.engine_args == {}
    assert make_spec(kind="embedded", model="gemma3-270m").n_ctx == 2048
    assert s.replicas == 1
    # max_batch_size is unset: each engine holds what its own scheduler takes
    assert s.max_batch_size is None
    assert s.capacity == 256  # vLLM's default off H100/H200 (a replica reports its own)
    assert make_spec(kind="vllm", model="m", max_batch_size=512).capacity == 512
    assert make_spec(kind="vllm", model="m", max_batch_size=8,
                     engine_args={"max_num_seqs": 64}).capacity == 64
    assert make_spec(kind="embedded", model="gemma3-270m").capacity == 8
    assert make_spec(kind="embedded", model="gemma3-270m",
                     engine_args={"n_parallel": 4}).capacity == 4
    assert make_spec(kind="scripted", model="m").capacity == 32
    assert make_spec(kind="scripted", model="m", max_batch_size=4).batch_size_cap == 4
    assert make_spec(kind="simulated", model="m", engine_args={"capacity": 128}).capacity == 128
    assert s.request_timeout_s == 600
    assert s.resolved_num_gpus == 1.0
    assert make_spec(kind="vllm", model="m", tensor_parallel_size=2).resolved_num_gpus == 2.0
    assert make_spec(kind="embedded", model="gemma3-270m").resolved_num_gpus == 0.0
    assert make_spec(kind="vllm", model="m", num_gpus=0).resolved_num_gpus == 0.0
    assert make_spec(kind="embedded", model="gemma3-270m").resolved_num_cpus == 1.0
    assert make_spec(kind="embedded", model="gemma3-270m", n_threads=4).resolved_num_cpus == 4.0


def test_from_yaml():
    doc = yaml.safe_load(
        """
        kind: openai
        model: Qwen/Qwen2.5-7B-Instruct
        base_url: http://head:8000/v1
        engine_args: {max_retries: 2}
        replicas: 2
        """
    )
    s = EngineSpec.model_validate(doc)
    assert s.base_url == "http://head:8000/v1"
    assert s.engine_args == {"max_retries": 2}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "openai", "model": "m"}, "requires base_url"),
        ({"kind": "openai", "model": "m", "base_url": "head:8000"}, "http://"),
        ({"kind": "embedded", "model": "llama-70b"}, "smollm2-135m-instruct, gemma3-270m"),
        ({"kind": "vllm", "model": "m", "tensor_parallel_size": 0}, "greater than or equal"),
        ({"kind": "vllm", "model": "m", "gpu_memory_utilization": 1.5}, "less than or equal"),
        ({"kind": "vllm", "model": "m", "bogus": 1},
         r"bogus is not a setting of kind 'vllm' \(no engine kind has it\)"),
        ({"kind": "tgi", "model": "m"},
         "'embedded', 'vllm', 'openai', 'scripted', 'simulated' or 'serve'"),
        ({"kind": "vllm", "model": "m", "script": "echo"},
         r"script is not a setting of kind 'vllm' \(it is a setting of kind 'scripted'\)"),
        ({"kind": "vllm", "model": "m", "n_threads": 2},
         r"n_threads is not a setting of kind 'vllm' \(it is a setting of kind 'embedded'\)"),
        ({"kind": "vllm", "model": "m", "base_url": "http://x/v1"},
         "base_url is not a setting of kind 'vllm'.*'dtype', 'max_model_len'"),
        ({"kind": "scripted", "model": "m", "script": " "}, "non-empty responder name"),
        ({"kind": "serve", "model": "m", "engine": "serve"},
         "engine must be one of 'embedded', 'vllm', 'openai', 'scripted' or 'simulated'"),
        ({"kind": "vllm", "model": "m", "prompt_format": "raw"}, "'chat' or 'completion'"),
        ({"kind": "vllm", "model": "m", "tensor_parallel_size": 4, "num_gpus": 2}, "less than"),
        ({"kind": "vllm", "model": ""}, "at least 1 character"),
    ],
)
def test_validation_errors(fields, message):
    with pytest.raises(ValidationError, match=message):
        make_spec(**fields)


def test_known_embedded_models():
    assert EMBEDDED_MODELS == ("smollm2-135m-instruct", "gemma3-270m",
                               "qwen25-coder-0.5b-instruct", "qwen25-coder-1.5b-instruct")
    for m in EMBEDDED_MODELS:
        make_spec(kind="embedded", model=m)


def test_make_engine_validates_dicts():
    with pytest.raises(ValidationError):
        make_engine({"kind": "openai", "model": "m"})


def test_make_engine_openai_rejects_unknown_args():
    with pytest.raises(ValueError, match="unknown engine_args"):
        make_engine(
            {"kind": "openai", "model": "m", "base_url": "http://x/v1", "engine_args": {"x": 1}}
        )


def test_every_kind_declares_its_spec_beside_its_engine():
    from df_ray.engines import ENGINE_KINDS, spec_class

    names = {k: spec_class(k).__name__ for k in ENGINE_KINDS}
    assert names == {"embedded": "LlamaCppSpec", "vllm": "VLLMSpec", "openai": "OpenAISpec",
                     "scripted": "ScriptedSpec", "simulated": "SimulatedSpec",
                     "serve": "ServeSpec"}
    for k in ENGINE_KINDS:
        assert spec_class(k).__module__ == ENGINE_KINDS[k].split(":")[0]
    with pytest.raises(TypeError, match="make_spec"):
        EngineSpec(kind="vllm", model="m")


def test_a_spec_of_every_kind_imports_no_backend():
    """Validating specs (a driver, df-ray validate) imports neither vLLM nor llama.cpp."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from df_ray.engines import make_spec\n"
        "for f in [dict(kind='vllm', model='m', tensor_parallel_size=2),\n"
        "          dict(kind='embedded', model='gemma3-270m', n_threads=2),\n"
        "          dict(kind='openai', model='m', base_url='http://x/v1'),\n"
        "          dict(kind='scripted', model='m'), dict(kind='simulated', model='m'),\n"
        "          dict(kind='serve', model='m', engine='vllm')]:\n"
        "    make_spec(**f).ray_resources()\n"
        "print(sorted(m for m in ('vllm', 'llama_cpp', 'torch', 'ray') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)
    assert out.stdout.strip() == "[]", out.stderr
