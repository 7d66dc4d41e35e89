"""Coordination methods: DarkForest and the baselines it is measured against.

Each method is one module and one line in ``REGISTRY`` (name -> "module:Class"); a config's
``method`` is checked against it and ``method_args`` against the method's ``Args``.
``get_method(name, **method_args)`` builds one by name. The vocabulary a method is written in
(``Method``, ``MethodArgs``, ``Call``, ``Outcome``, ...) is ``df_ray.methods.base``'s.
"""

from __future__ import annotations

from df_ray.errors import UnknownNameError, register_name
from df_ray.methods.base import Method, MethodArgsError
from df_ray.targets import import_target

# name -> "module:Class"; modules are imported on demand. Adding a method: one module, one line.
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


class UnknownMethodError(UnknownNameError):
    """No method of that name; the message lists the registered ones."""


def register_method(name: str, target: str, *, replace: bool = False) -> None:
    """Register a method class ("module:Class") under ``name`` (a plugin's one line); a
    taken name is refused (``df_ray.errors.RegistryError``) unless ``replace``."""
    register_name(REGISTRY, name, target, "method", replace=replace)


def method_class(name: str) -> type[Method]:
    try:
        target = REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownMethodError(f"unknown method {name!r}; available: "
                                 f"{', '.join(REGISTRY)}") from None
    return import_target(target)


def get_method(name: str, **args) -> Method:
    """The method ``name`` built from ``args`` (its ``method_args``)."""
    return method_class(name)(args)


__all__ = ["REGISTRY", "MethodArgsError", "UnknownMethodError", "get_method", "method_class",
           "register_method"]
