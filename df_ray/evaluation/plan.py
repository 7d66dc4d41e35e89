"""A resolved run plan: one configuration as preflight resolved it, built once and passed on.

Preflight (``df_ray.pipeline.runner.preflight``) validates the configurations, resolves their
storage, loads their samples and checks their calibration; what it resolved is one frozen
``RunPlan`` per configuration: the validated config, its Method and Task (built once), its
samples (shared by the plans of one samples key), its fingerprint and, once the runner has
it, its calibration. The runner, the stage graph and ``df_ray.evaluate`` take plans; the Ray
stage receives them pickled (the Method whole, so a stage builds no second one and
validates no JSON), and builds the Task once where it lands.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from df_ray.tasks.base import Sample


def samples_key(cfg: Any) -> tuple:
    """What decides a configuration's samples: configurations with equal keys share them."""
    return (cfg.benchmark, cfg.split, cfg.source, cfg.limit, cfg.data_revision)


@dataclass(frozen=True)
class RunPlan:
    """One configuration, resolved (see the module docstring). ``samples`` stay in the
    process that loaded them (a stage gets its samples row by row, not with the plan)."""

    cfg: Any
    method: Any
    fingerprint: str
    samples: Sequence[Sample] = field(default=(), repr=False, compare=False)
    calibration: Any = None

    @classmethod
    def of(cls, cfg: Any, samples: Sequence[Sample] = ()) -> RunPlan:
        """The plan of a validated RunConfig: its method (``cfg.build_method()``: the one
        the configuration built, if it did) and fingerprint, computed here once."""
        return cls(cfg=cfg, method=cfg.build_method(), fingerprint=cfg.fingerprint(),
                   samples=samples)

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def key(self) -> tuple:
        return samples_key(self.cfg)

    @property
    def task(self) -> Any:
        """The configuration's Task, built once per process (``RunConfig.build_task``)."""
        return self.cfg.build_task()

    def with_calibration(self, calibration: Any) -> RunPlan:
        return dataclasses.replace(self, calibration=calibration)

    def __getstate__(self) -> dict[str, Any]:
        # what crosses to a stage: no samples (they travel as rows); the Method whole
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                "samples": ()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)
