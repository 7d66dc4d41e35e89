"""The paper's experimental setup as data: the backbone pool, the per-benchmark agent
compositions, and (in :mod:`df_ray.reporting.paper`) the table of every experiment."""

from df_ray.experiments.compositions import COMPOSITIONS, FINQA_GROWTH, NAMED, composition
from df_ray.experiments.pool import GENERAL, POOL, PoolModel, engine_spec, pool_model

__all__ = ["COMPOSITIONS", "FINQA_GROWTH", "GENERAL", "NAMED", "POOL", "PoolModel", "composition",
           "engine_spec", "pool_model"]
