"""The run plan: every name of a configuration resolved once, in the driver, and passed on.

``resolve(config) -> [RunPlan]`` is the one way from what a user wrote to what runs: the
plugins the config names are imported, its storage resolved on the raw mapping
(``df_ray.storage``), each configuration validated once (which builds its Method once),
its Task class, every answer kind and the engine kinds of its backbones resolved to their
``"module:Class"`` targets, and its fingerprint computed. Preflight
(``df_ray.pipeline.runner.preflight``) adds the samples (shared by the plans of one samples
key) and the calibration; the runner, the stage graph, the calibration passes,
``df_ray.evaluate`` and ``df-ray analyze`` take plans.

A Ray stage receives its plans pickled: unpickling one imports the driver's plugins first
(from the folders the driver imported them from, where those exist on the worker) and
installs its answer kinds, then the Method arrives whole and the Task is built from the
plan's target. The engine replicas build from the plans' engine-kind targets (the runner
hands them to the pool). No worker looks a name up in a registry of its own, so what runs in
the driver runs the same on a cluster.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from df_ray.targets import import_target
from df_ray.tasks.base import Sample


def samples_key(cfg: Any) -> tuple:
    """What decides a configuration's samples: configurations with equal keys share them
    (``benchmark_args`` too: a file benchmark's path, MMLU-Pro's prompt)."""
    args = json.dumps(getattr(cfg, "benchmark_args", None) or {}, sort_keys=True, default=str)
    return (cfg.benchmark, cfg.split, cfg.source, cfg.limit, cfg.data_revision, args)


@dataclass(frozen=True)
class RunPlan:
    """One configuration, resolved (see the module docstring). ``samples`` stay in the
    process that loaded them (a stage gets its samples row by row, not with the plan).

    ``task_target``: the benchmark's class; ``kinds``: every answer kind (name -> module);
    ``engines``: the engine kinds of its backbones (kind -> class); ``plugins`` and
    ``plugin_roots``: the modules the driver imported and the folders they came from."""

    cfg: Any
    method: Any
    fingerprint: str
    samples: Sequence[Sample] = field(default=(), repr=False, compare=False)
    calibration: Any = None
    task_target: str = ""
    kinds: Mapping[str, str] = field(default_factory=dict, repr=False)
    engines: Mapping[str, str] = field(default_factory=dict, repr=False)
    plugins: tuple[str, ...] = ()
    plugin_roots: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def of(cls, cfg: Any, samples: Sequence[Sample] = ()) -> RunPlan:
        """The plan of a validated RunConfig: its method (``cfg.build_method()``: the one
        its validation built), fingerprint and targets, resolved here once."""
        from df_ray.core.parsing import KINDS
        from df_ray.engines.spec import engine_targets
        from df_ray.plugins import import_roots, load_plugins
        from df_ray.tasks import REGISTRY

        plugins = tuple(dict.fromkeys([*load_plugins(getattr(cfg, "plugins", ()))]))
        return cls(cfg=cfg, method=cfg.build_method(), fingerprint=cfg.fingerprint(),
                   samples=samples, task_target=REGISTRY.get(cfg.benchmark, ""),
                   kinds=dict(KINDS),
                   engines=engine_targets(cfg.backbones.values()),
                   plugins=plugins, plugin_roots=import_roots(plugins))

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def key(self) -> tuple:
        return samples_key(self.cfg)

    @property
    def task(self) -> Any:
        """The configuration's Task, built once per process from the plan's target."""
        return self.cfg.build_task(import_target(self.task_target) if self.task_target
                                   else None)

    def with_calibration(self, calibration: Any) -> RunPlan:
        return dataclasses.replace(self, calibration=calibration)

    def __reduce__(self) -> tuple:
        # what crosses to a stage: the plugins and answer kinds first (installed before the
        # rest is unpickled: the Method may be a plugin's), no samples (they travel as rows)
        state = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return (_landed, (self.plugins, self.plugin_roots, dict(self.kinds)),
                {**state, "samples": ()})

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)


def _landed(plugins: Sequence[str], roots: Sequence[str], kinds: Mapping[str, str]) -> RunPlan:
    """Where a pickled plan lands: the driver's plugins imported and its answer kinds
    installed before anything of the plan is built."""
    from df_ray.core.parsing import KINDS
    from df_ray.plugins import load_in_worker

    load_in_worker(plugins, roots)
    KINDS.update(kinds)
    return RunPlan.__new__(RunPlan)


def resolve(config: Any, *, plugins: Sequence[str] = (), storage: bool = True,
            job: bool | None = None, user: str | None = None,
            where: str | None = None) -> list[RunPlan]:
    """Every configuration of ``config`` resolved into its plan (see the module docstring).

    ``config``: a run or sweep file, a mapping of either, a SweepConfig, a RunConfig or
    plans (kept as they are). ``plugins``: more modules to import first (``--plugin``).
    ``storage``: resolve storage for where this runs (``df_ray.storage``; a RunConfig given
    whole keeps its own). ``where``: the file the sweep came from, named in its errors.
    Raises ConfigError (a PluginError for a plugin that fails to import) before anything
    starts."""
    from df_ray.config import RunConfig, SweepConfig, load_config
    from df_ray.errors import ConfigError
    from df_ray.plugins import load_plugins, plugin_names

    load_plugins(plugins)
    if isinstance(config, RunPlan):
        return [config]
    if isinstance(config, RunConfig):
        return [RunPlan.of(config)]
    if isinstance(config, Sequence) and config and not isinstance(config, str):
        return [p for c in config for p in resolve(c, storage=storage, job=job, user=user)]
    if isinstance(config, str | Path):
        where = where or str(config)
        config = load_config(config, expand=False)
    elif isinstance(config, Mapping):
        load_plugins(plugin_names(config))
        config = (SweepConfig.model_validate(config) if "base" in config
                  else SweepConfig(name=str(config.get("name", "run")), base=dict(config)))
    if not isinstance(config, SweepConfig):
        raise TypeError(f"resolve: cannot resolve a {type(config).__name__}")
    try:
        cfgs = _validated(config, storage, job, user)
    except ConfigError as e:
        if not where or str(e).startswith(f"{where}: "):
            raise
        raise ConfigError(f"{where}: {e}") from None
    return [RunPlan.of(c) for c in cfgs]


def _validated(sweep: Any, storage: bool, job: bool | None, user: str | None) -> list[Any]:
    """The sweep's configurations, storage resolved on their mappings, each validated once."""
    from df_ray.storage import storage_mapping

    mappings = sweep.run_mappings()
    if storage:
        mappings = [(i, storage_mapping(d, job=job, user=user)) for i, d in mappings]
    return [sweep.validate_run(i, d) for i, d in mappings]
