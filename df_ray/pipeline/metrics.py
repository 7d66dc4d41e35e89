"""Moved to :mod:`df_ray.evaluation.metrics`; kept so that existing imports keep working."""

from df_ray.evaluation.metrics import MetricsAccumulator

__all__ = ["MetricsAccumulator"]
