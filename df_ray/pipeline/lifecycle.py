"""Engine lifecycle: which engines a job needs, started once on first use, stopped at the end.

Importing this module imports no Ray; the pool (``df_ray.pipeline.engine_pool``) is
imported when the engines start.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from df_ray.config import ConfigError, RunConfig
from df_ray.engines.spec import EngineSpec


def shared_backbones(configs: Sequence[RunConfig]) -> dict[str, EngineSpec]:
    """The union of the configurations' backbones; one name must mean one engine."""
    out: dict[str, EngineSpec] = {}
    for cfg in configs:
        for name, spec in cfg.backbones.items():
            if name in out and out[name] != spec:
                raise ConfigError(f"backbone {name!r} is defined differently in two "
                                  f"configurations of the sweep ({cfg.name!r}); a sweep shares "
                                  "its engines, so give different engines different names")
            out[name] = spec
    return out


#: What Ray logs at error level when the stage's actors start (Ray Data hands every actor
#: of a pool its DataContext and its transform as object-store references, and restarts
#: actors: ``max_restarts=-1``), said once in df_ray's words before it appears. It cannot be
#: removed at its cause without turning off the stage's restarts.
OBJECT_STORE_NOTE = ("Ray's error-level line 'has constructor arguments in the object store' "
                     "is Ray Data's own (its stage actors get their context by reference, "
                     "held by this driver for the run): expected, nothing is lost "
                     "(ray-project/ray#53727)")


class EngineLifecycle:
    """A job's engines: the union of its configurations' backbones, started on first use
    (once, whatever the number of configurations) and shut down at the end. ``engines``:
    the engine kinds' ``"module:Class"`` targets the replicas build from (the plans').
    ``before_start`` (e.g. the cluster's resource check) runs just before they start: a job
    whose every configuration is finished starts none and checks nothing."""

    def __init__(self, backbones: Mapping[str, EngineSpec],
                 say: Callable[[str], None] = lambda m: None,
                 engines: Mapping[str, str] | None = None,
                 before_start: Callable[[Mapping[str, EngineSpec]], None] | None = None
                 ) -> None:
        self.backbones = dict(backbones)
        self.engines = dict(engines or {})
        self.say = say
        self.before_start = before_start
        self._pool: Any = None

    @property
    def pool(self) -> Any:
        if self._pool is None:
            if self.before_start is not None:
                self.before_start(self.backbones)
            listing = ", ".join(f"{n} ({s.kind}: {s.model} x{s.replicas})"
                                for n, s in self.backbones.items())
            self.say(f"starting engines: {listing}")
            t = time.time()
            # Job-owned engines, or (for backbones of kind serve) the shared service's handles.
            from df_ray.pipeline.engine_pool import make_pool

            pool = make_pool(self.backbones, self.engines)
            try:
                pool.wait_ready()
            except BaseException:
                pool.shutdown()  # a replica failed to start: stop the others (and its restarts)
                raise
            self._pool = pool
            self.say(f"engines ready in {time.time() - t:.1f}s")
            self.say(OBJECT_STORE_NOTE)
        return self._pool

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
