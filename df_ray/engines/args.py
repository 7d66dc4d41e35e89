"""``engine_args`` checked against the engine's own parameters, before any engine starts.

A misspelt engine argument (``latncy_s``) would otherwise surface only when the engine is
constructed, inside its Ray actor, after the run has started. Each kind's accepted names are
read from the engine itself: the scripted engine's and ``llama_cpp.Llama``'s constructor
signatures, the OpenAI client's allowed options, and vLLM's ``EngineArgs`` fields (when vLLM
is installed here; on a driver without it the check is left to the engine). A served
backbone takes no engine arguments from the job.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import inspect
from collections.abc import Callable

#: Arguments df_ray's embedded engine reads itself before the rest go to llama_cpp.Llama.
EMBEDDED_OWN = frozenset({"sampling", "n_parallel"})


def _params(fn: Callable) -> set[str] | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return None  # takes anything
    return {n for n, p in sig.parameters.items()
            if n != "self" and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                          inspect.Parameter.KEYWORD_ONLY)}


def accepted_engine_args(kind: str) -> set[str] | None:
    """The ``engine_args`` names an engine kind accepts; None when they cannot be known here
    (the engine's package is not installed on this machine)."""
    if kind == "scripted":
        from df_ray.engines.scripted import ScriptedEngine

        names = _params(ScriptedEngine.__init__)
        return None if names is None else names - {"model", "responder"}
    if kind == "openai":
        from df_ray.engines.openai_http import _ALLOWED_ARGS

        return set(_ALLOWED_ARGS)
    if kind == "embedded":
        if importlib.util.find_spec("llama_cpp") is None:
            return None
        from llama_cpp import Llama

        names = _params(Llama.__init__)
        return None if names is None else (names - {"model_path"}) | EMBEDDED_OWN
    if kind == "vllm":
        if importlib.util.find_spec("vllm") is None:
            return None
        try:
            from vllm.engine.arg_utils import EngineArgs
        except Exception:
            return None
        return {f.name for f in dataclasses.fields(EngineArgs)} - {"model"}
    if kind == "serve":
        return set()
    return None


def check_engine_args(backbone: str, spec) -> str | None:
    """Why ``spec.engine_args`` would fail when the engine starts, naming the backbone and
    the nearest valid names; None when they are fine (or cannot be checked here)."""
    if not spec.engine_args:
        return None
    accepted = accepted_engine_args(spec.kind)
    if accepted is None:
        return None
    unknown = sorted(set(spec.engine_args) - accepted)
    if not unknown:
        return None
    hints = []
    for name in unknown:
        near = difflib.get_close_matches(name, sorted(accepted), n=1)
        hints.append(f"{name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
    if spec.kind == "serve":
        return (f"backbones.{backbone}.engine_args: a served backbone takes no engine "
                f"arguments from the job (got {', '.join(hints)}); set them where the service "
                "is deployed (df-ray serve)")
    return (f"backbones.{backbone}.engine_args: unknown argument(s) for engine kind "
            f"{spec.kind!r}: {', '.join(hints)}")


def check_configs(configs) -> None:
    """Every backbone's ``engine_args`` in these RunConfigs; raises ConfigError naming the
    configuration, the backbone and the argument."""
    from df_ray.config import ConfigError

    seen: set[str] = set()
    for cfg in configs:
        for name, spec in cfg.backbones.items():
            key = f"{name}:{spec.model_dump_json()}"
            if key in seen:
                continue
            seen.add(key)
            problem = check_engine_args(name, spec)
            if problem:
                raise ConfigError(f"{cfg.name}: {problem}")
