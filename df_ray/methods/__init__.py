"""Coordination methods: DarkForest and the baselines it is measured against.

Each method is one module; ``get_method(name, **method_args)`` builds one by name.
"""

from __future__ import annotations

import importlib

from df_ray.methods.base import Call, CallRecord, Method, MethodContext, Outcome, SampleState

# name -> "module:Class"; modules are imported on demand.
REGISTRY: dict[str, str] = {
    "darkforest": "df_ray.methods.darkforest:DarkForest",
}


def get_method(name: str, **args) -> Method:
    try:
        target = REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown method {name!r}; available: {sorted(REGISTRY)}") from None
    mod, cls = target.split(":")
    return getattr(importlib.import_module(mod), cls)(**args)


__all__ = ["REGISTRY", "Call", "CallRecord", "Method", "MethodContext", "Outcome", "SampleState",
           "get_method"]
