"""Engines: chat requests in, texts and token counts out.

``make_engine(spec)`` builds one from an :class:`EngineSpec`; heavy backends (llama.cpp, vLLM,
httpx) are imported only when their kind is asked for.
"""

from __future__ import annotations

from df_ray.engines.base import ChatRequest, Completion, Engine, Message, SamplingParams
from df_ray.engines.spec import EMBEDDED_MODELS, EngineSpec

__all__ = [
    "EMBEDDED_MODELS",
    "ChatRequest",
    "Completion",
    "Engine",
    "EngineSpec",
    "Message",
    "SamplingParams",
    "make_engine",
]


def make_engine(spec: EngineSpec | dict) -> Engine:
    """A live engine for ``spec`` (a dict is validated into an EngineSpec first)."""
    if not isinstance(spec, EngineSpec):
        spec = EngineSpec.model_validate(spec)
    if spec.kind == "scripted":
        from df_ray.engines.scripted import ScriptedEngine

        kwargs = dict(spec.engine_args)
        if spec.max_model_len is not None:
            kwargs.setdefault("max_prompt_tokens", spec.max_model_len)
        return ScriptedEngine(spec.model, spec.script or "echo", **kwargs)
    if spec.kind == "embedded":
        from df_ray.engines.llama_cpp import EmbeddedEngine

        return EmbeddedEngine(spec)
    if spec.kind == "openai":
        from df_ray.engines.openai_http import OpenAIEngine

        return OpenAIEngine(spec)
    if spec.kind == "vllm":
        from df_ray.engines.vllm import VLLMEngine

        return VLLMEngine(spec)
    raise ValueError(f"unknown engine kind {spec.kind!r}")  # pragma: no cover
