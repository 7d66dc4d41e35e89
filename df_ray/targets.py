"""``"module:Name"`` targets: how a registry names a class (a benchmark, an engine kind, a
method) and how a run plan carries it to a worker, which imports it without a registry."""

from __future__ import annotations

import importlib
from typing import Any


def import_target(target: str) -> Any:
    """The object a ``"module:Name"`` target names (``"module"`` alone: the module;
    ``"module:Outer.Inner"``: an attribute path)."""
    module, _, name = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split(".") if name else []:
        obj = getattr(obj, part)
    return obj
