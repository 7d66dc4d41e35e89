"""Engines: chat requests in, texts and token counts out.

``make_engine(spec)`` builds one from an :class:`EngineSpec`; heavy backends (llama.cpp, vLLM,
httpx) are imported only when their kind is asked for.
"""

from __future__ import annotations

import importlib

from df_ray.engines.base import ChatRequest, Completion, Engine, Message, SamplingParams
from df_ray.engines.spec import EMBEDDED_MODELS, ENGINE_KINDS, EngineSpec

__all__ = [
    "EMBEDDED_MODELS",
    "ENGINE_KINDS",
    "ChatRequest",
    "Completion",
    "Engine",
    "EngineSpec",
    "Message",
    "SamplingParams",
    "make_engine",
]


def make_engine(spec: EngineSpec | dict) -> Engine:
    """A live engine for ``spec`` (a dict is validated into an EngineSpec first): the class
    its kind names in ``ENGINE_KINDS``, built with ``from_spec`` (or the spec itself)."""
    if not isinstance(spec, EngineSpec):
        spec = EngineSpec.model_validate(spec)
    module, name = ENGINE_KINDS[spec.kind].split(":")
    cls = getattr(importlib.import_module(module), name)
    return cls.from_spec(spec) if hasattr(cls, "from_spec") else cls(spec)
