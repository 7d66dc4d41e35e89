"""The six benchmarks behind one protocol (see ``df_ray.tasks.base.Task``).

``get_task(name, **options) -> Task`` builds a benchmark by name. ``REGISTRY`` is the one
place a benchmark is listed (name -> "module:Class"; adding one: one module, one line);
``TASKS`` is its names. Modules are imported lazily so that importing the registry stays cheap.
"""

from __future__ import annotations

from typing import Any

from df_ray.errors import UnknownNameError, register_name
from df_ray.targets import import_target
from df_ray.tasks.base import BaseTask, DataSchemaError, Grade, Sample, Split, Task

REGISTRY: dict[str, str] = {
    "math": "df_ray.tasks.math:MathTask",
    "humaneval": "df_ray.tasks.humaneval:HumanEvalTask",
    "mmlu_pro": "df_ray.tasks.mmlu_pro:MMLUProTask",
    "gpqa": "df_ray.tasks.gpqa:GPQATask",
    "finqa": "df_ray.tasks.finqa:FinQATask",
    "legalbench": "df_ray.tasks.legalbench:LegalBenchTask",
    "file": "df_ray.tasks.file:FileTask",
}

TASKS: tuple[str, ...] = tuple(REGISTRY)


class UnknownTaskError(UnknownNameError):
    """No benchmark of that name; the message lists the valid names."""


def register_task(name: str, target: str, *, replace: bool = False) -> None:
    """Register a benchmark class ("module:Class") under ``name`` (a plugin's one line); a
    taken name is refused (``df_ray.errors.RegistryError``) unless ``replace``. A config
    validated before the line ran does not see it: register at import time."""
    register_name(REGISTRY, name, target, "benchmark", replace=replace)


def task_class(name: str) -> type:
    """The class of benchmark ``name`` (one of ``TASKS``), imported on demand."""
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else name
    if key not in REGISTRY:
        raise UnknownTaskError(f"unknown task {name!r}; valid names: {', '.join(REGISTRY)}")
    return import_target(REGISTRY[key])


def data_location(benchmark: str, source: str | None) -> tuple[str, str]:
    """("local <path>" or the hub description, what to fetch when it is missing)."""
    return get_task(benchmark).data_location(source)


def get_task(name: str, **options: Any) -> Task:
    """The benchmark ``name`` (one of ``TASKS``); ``options`` go to its constructor."""
    return task_class(name)(**options)


def task_for(cfg: Any, cls: type | None = None) -> Task:
    """The benchmark of a run configuration, with the options the configuration sets (a
    sandboxed benchmark: the sandbox's isolation level); ``cls``: its class, when the caller
    resolved it (a run plan's target), else the registry's."""
    cls = cls or task_class(cfg.benchmark)
    options: dict[str, Any] = {}
    sandbox = getattr(cfg, "sandbox", None)
    if getattr(cls, "sandboxed", False) and sandbox is not None:
        options["isolation"] = sandbox.isolation
    if getattr(cls, "takes_cache_root", False) and getattr(cfg, "cache_root", None):
        options["cache_root"] = cfg.cache_root
    # the configuration's benchmark_args (HumanEval's candidates: text | behaviour)
    options.update(getattr(cfg, "benchmark_args", None) or {})
    try:
        return cls(**options)
    except TypeError as e:
        raise ValueError(f"benchmark_args of {cfg.benchmark}: {e}") from None


__all__ = ["REGISTRY", "TASKS", "BaseTask", "DataSchemaError", "Grade", "Sample", "Split",
           "Task", "UnknownTaskError", "data_location", "get_task", "register_task", "task_class",
           "task_for"]
