"""Coordination methods: DarkForest and the baselines it is measured against.

Each method is one module; ``get_method(name, **method_args)`` builds one by name.
"""

from __future__ import annotations

import importlib

from df_ray.methods.base import Call, CallRecord, Method, MethodContext, Outcome, SampleState

# name -> "module:Class"; modules are imported on demand.
REGISTRY: dict[str, str] = {
    "darkforest": "df_ray.methods.darkforest:DarkForest",
    "single": "df_ray.methods.single:SingleAgent",
    "self_consistency": "df_ray.methods.self_consistency:SelfConsistency",
    "weighted_vote": "df_ray.methods.weighted_vote:WeightedVote",
    "debate": "df_ray.methods.debate:Debate",
    "reconcile": "df_ray.methods.reconcile:ReConcile",
    "moa": "df_ray.methods.moa:MixtureOfAgents",
    "goa_mean": "df_ray.methods.goa:GoAMean",
    "goa_max": "df_ray.methods.goa:GoAMax",
    "self_refine": "df_ray.methods.self_refine:SelfRefine",
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
