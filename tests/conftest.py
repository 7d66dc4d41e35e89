"""Shared fixtures: one local Ray for the whole session (starting Ray costs seconds)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


@pytest.fixture(scope="session")
def ray_local():
    import ray

    from df_ray.pipeline.runner import init_ray

    os.environ.pop("RAY_ADDRESS", None)
    init_ray()
    yield ray
    ray.shutdown()
