"""How many stage actors and concurrent batches a configuration gets."""

from __future__ import annotations

import pytest

from df_ray.config import RunConfig
from df_ray.pipeline.runner import MAX_BATCHES_IN_FLIGHT, stage_plan


def cfg(replicas: int, max_batch: int, batch_size: int, concurrency: int = 2) -> RunConfig:
    return RunConfig.model_validate({
        "benchmark": "gpqa",
        "backbones": {"b1": {"kind": "scripted", "model": "m1", "replicas": replicas,
                             "max_batch_size": max_batch},
                      "b2": {"kind": "scripted", "model": "m2", "max_batch_size": 1}},
        "agents": [{"id": "a1", "backbone": "b1"}, {"id": "a2", "backbone": "b2"}],
        "coordinator": {"id": "c", "backbone": "b1"},
        "batch_size": batch_size, "concurrency": concurrency,
    })


@pytest.mark.parametrize("replicas, max_batch, batch_size, blocks, expected", [
    # one replica taking 8, batches of 8: one batch fills it, one more overlaps the CPU work
    (1, 8, 8, 100, (2, 1)),
    # 8 replicas x 8 = 64 requests per backbone: 8 batches of 8 + 1, over 2 actors
    (8, 8, 8, 100, (2, 5)),
    # batches as large as the backbone: 2 in flight
    (8, 8, 64, 100, (2, 1)),
    # never more batches in flight than there are blocks
    (8, 8, 8, 3, (2, 2)),
    (8, 8, 8, 1, (1, 1)),
    # a huge backbone is capped
    (64, 256, 1, 10_000, (2, MAX_BATCHES_IN_FLIGHT // 2)),
])
def test_enough_batches_in_flight_to_fill_every_replica(replicas, max_batch, batch_size, blocks,
                                                        expected):
    assert stage_plan(cfg(replicas, max_batch, batch_size), blocks) == expected


def test_in_flight_covers_the_busiest_backbone():
    actors, calls = stage_plan(cfg(4, 32, 16, concurrency=3), 1000)
    assert actors == 3 and actors * calls >= 4 * 32 // 16 + 1
