"""df_ray: DarkForest on Ray.

``df_ray.core`` is the method itself (plain Python); the rest of the package is the
distributed evaluation system around it (tasks, engines, pipeline, tracking).
"""

__version__ = "0.1.0"
