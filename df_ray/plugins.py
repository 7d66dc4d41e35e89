"""Plugins: modules that add benchmarks, answer kinds, methods or engine kinds to df_ray by
registering them when imported (``register_task``, ``register_kind``, ...).

Three ways to name one, all imported by the driver before any configuration is validated:

- a config's top-level ``plugins:`` list (in a sweep file: top-level or in ``base``);
- ``df-ray run --plugin MODULE`` (repeatable; also ``validate``, ``show``, ``list`` and
  ``analyze``);
- an installed package's entry point in the group ``df_ray.plugins``
  (``[project.entry-points."df_ray.plugins"] parity = "parity_plugin"``).

The resolved plan (``df_ray.evaluation.plan.RunPlan``) carries every plugin the driver
imported and the folder each came from; a Ray worker imports them (that folder on its path
when it exists there) before it builds anything from the plan. A plugin in the working
directory travels with ``ray job submit`` (the job's working dir is on every worker's path);
the driver imports from its current directory as ``python -m`` does. A plugin that fails to
import stops the run before any engine starts, in one line (``PluginError``).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from df_ray.errors import ConfigError

#: The help of every command's ``--plugin MODULE``.
PLUGIN_HELP = ("import MODULE before the config is validated, in the driver and in every Ray "
               "worker (a plugin registering benchmarks, answer kinds, methods or engine "
               "kinds); repeatable")

#: The entry-point group an installed package names its plugin module in.
ENTRY_POINT_GROUP = "df_ray.plugins"

#: The plugins this process imported, in order (entry points first).
_loaded: dict[str, None] = {}
_entry_points_done = False


class PluginError(ConfigError):
    """A plugin that cannot be imported; ``str()`` names the module and the error."""


def plugin_names(data: Any) -> list[str]:
    """The plugins a raw run or sweep mapping names: its top-level ``plugins``, its
    ``base``'s and each of its ``runs``'."""
    out: list[str] = []
    if not isinstance(data, Mapping):
        return out
    runs = data.get("runs")
    parts = [data, data.get("base"), *(runs if isinstance(runs, list) else [])]
    for part in parts:
        names = part.get("plugins") if isinstance(part, Mapping) else None
        if isinstance(names, str):
            names = [names]
        if isinstance(names, list):
            out += [str(n).strip() for n in names if str(n).strip()]
    return list(dict.fromkeys(out))


def import_plugin(name: str) -> None:
    """Import one plugin module; a ``PluginError`` naming it and its error when that fails."""
    try:
        importlib.import_module(name)
    except Exception as e:
        first = " ".join(str(e).split()) or type(e).__name__
        raise PluginError(f"plugin {name!r} failed to import: {type(e).__name__}: {first}"
                          ) from None
    _loaded.setdefault(name, None)


def entry_point_plugins() -> list[str]:
    """The modules installed packages name in the ``df_ray.plugins`` entry-point group."""
    return [ep.module for ep in entry_points(group=ENTRY_POINT_GROUP)]


def load_plugins(names: Iterable[str] = ()) -> tuple[str, ...]:
    """In the driver: import the installed packages' plugins (once per process) and
    ``names``, the current directory importable as under ``python -m``. Returns every plugin
    this process has imported."""
    global _entry_points_done
    if not _entry_points_done:
        _entry_points_done = True
        for name in entry_point_plugins():
            import_plugin(name)
    names = [n for n in names if n not in _loaded]
    if names and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    for name in names:
        import_plugin(name)
    return loaded()


def loaded() -> tuple[str, ...]:
    """The plugins this process imported, in order."""
    return tuple(_loaded)


def worker_plugins() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The plugins this driver imported and the folders they came from: what an engine
    actor or a Serve replica is given, for :func:`load_in_worker`."""
    return loaded(), import_roots(loaded())


def import_roots(names: Iterable[str]) -> tuple[str, ...]:
    """The folders the plugins ``names`` were imported from (the ``sys.path`` entry each
    module's file sits under): where a worker on the same file system finds them."""
    roots: dict[str, None] = {}
    for name in names:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve().parent
        depth = name.count(".") + (Path(file).stem == "__init__")
        roots.setdefault(str(path.parents[depth - 1] if depth else path), None)
    return tuple(roots)


def load_in_worker(names: Iterable[str], roots: Iterable[str] = ()) -> None:
    """In a Ray worker: the driver's plugin folders that exist here on the path (and on the
    ``PYTHONPATH`` of the helper processes it starts), then the plugins imported."""
    for root in roots:
        if root not in sys.path and os.path.isdir(root):
            sys.path.append(root)
            parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            os.environ["PYTHONPATH"] = os.pathsep.join([*parts, root])
    for name in names:
        if name not in _loaded:
            import_plugin(name)
