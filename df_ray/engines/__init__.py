"""Engines: chat requests in, texts and token counts out.

``make_engine(spec)`` builds one from a backbone's spec (``make_spec(kind=..., ...)``, the
class its kind declares); heavy backends (llama.cpp, vLLM) are imported only when an engine is
built.
"""

from __future__ import annotations

from typing import Any

from df_ray.engines.base import ChatRequest, Completion, Engine, Message, SamplingParams
from df_ray.engines.spec import (
    ENGINE_KINDS,
    EngineSpec,
    engine_class,
    engine_target,
    make_spec,
    register_engine_kind,
    spec_class,
    validate_spec,
)

__all__ = [
    "EMBEDDED_MODELS",
    "ENGINE_KINDS",
    "ChatRequest",
    "Completion",
    "Engine",
    "EngineSpec",
    "Message",
    "SamplingParams",
    "engine_target",
    "make_engine",
    "make_spec",
    "register_engine_kind",
    "spec_class",
    "validate_spec",
]


def __getattr__(name: str) -> Any:
    """``EMBEDDED_MODELS`` is imported on first use: importing the package must not import
    ``df_ray.engines.models``, which also runs as a script (``python -m
    df_ray.engines.models``, in scripts/setup.sh), and runpy warns about a module that its
    package already imported."""
    if name == "EMBEDDED_MODELS":
        from df_ray.engines.models import EMBEDDED_MODELS

        return EMBEDDED_MODELS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_engine(spec: EngineSpec | dict, target: str | None = None) -> Engine:
    """A live engine for ``spec`` (a dict is validated into its kind's spec first): the
    class ``target`` names (``"module:Class"``: a run plan's, in a worker, which reads no
    registry), else the one its kind names in ``ENGINE_KINDS``; built with ``from_spec``
    (or the spec itself)."""
    if not isinstance(spec, EngineSpec):
        spec = validate_spec(spec, target)
    cls = engine_class(spec.kind, target)
    return cls.from_spec(spec) if hasattr(cls, "from_spec") else cls(spec)
