"""Fixtures of the pipeline tests."""

from __future__ import annotations

import pytest

from df_ray.engines import make_spec
from df_ray.pipeline.engine_pool import EnginePool


@pytest.fixture
def pool_of(ray_local):
    """``pool_of(name=spec kwargs, ...)``: a started pool of scripted backbones, shut down
    after the test."""
    pools: list[EnginePool] = []

    def make(**backbones: dict) -> EnginePool:
        pool = EnginePool({n: make_spec(kind="scripted", **kw) for n, kw in backbones.items()})
        pool.wait_ready(120)
        pools.append(pool)
        return pool

    yield make
    for p in pools:
        p.shutdown()
