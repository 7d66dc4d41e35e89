"""df_ray: DarkForest on Ray.

``df_ray.core`` is the method itself (plain Python); ``df_ray.evaluation`` is where a method
meets a benchmark (``df_ray.evaluate`` runs one in this process, without Ray); the rest of the
package is the distributed evaluation system around it (tasks, engines, pipeline, tracking).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def evaluate(config: Any, samples: Any = None, **kwargs: Any) -> Any:
    """Run a configuration, or ``(method, task, engines)``, in this process without Ray
    (see :func:`df_ray.evaluation.evaluate`)."""
    from df_ray.evaluation.api import evaluate as _evaluate

    return _evaluate(config, samples, **kwargs)
