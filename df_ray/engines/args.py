"""``engine_args`` checked against the engine's own parameters, before any engine starts.

A misspelt engine argument (``latncy_s``) would otherwise surface only when the engine is
constructed, inside its Ray actor, after the run has started. Each kind's accepted names are
read from the engine itself (its spec's ``accepted_engine_args``): the scripted engine's and ``llama_cpp.Llama``'s constructor
signatures, the OpenAI client's allowed options, and vLLM's ``EngineArgs`` fields (when vLLM
is installed here; on a driver without it the check is left to the engine). A served
backbone takes no engine arguments from the job.
"""

from __future__ import annotations

import difflib

from df_ray.engines.spec import spec_class


def accepted_engine_args(kind: str) -> set[str] | None:
    """The ``engine_args`` names an engine kind accepts (its spec says:
    ``EngineSpec.accepted_engine_args``); None when they cannot be known here (the engine's
    package is not installed on this machine)."""
    return spec_class(kind).accepted_engine_args()


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
    if spec.served:
        return (f"backbones.{backbone}.engine_args: a served backbone takes no engine "
                f"arguments from the job (got {', '.join(hints)}); set them where the service "
                "is deployed (df-ray serve)")
    return (f"backbones.{backbone}.engine_args: unknown argument(s) for engine kind "
            f"{spec.kind!r}: {', '.join(hints)}")

