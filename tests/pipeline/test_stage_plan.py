"""How many stage actors and concurrent batches a configuration gets."""

from __future__ import annotations

import pytest

from df_ray.config import RunConfig
from df_ray.pipeline.graph import HEADROOM
from df_ray.pipeline.runner import MAX_BATCHES_IN_FLIGHT, stage_plan


def cfg(replicas: int, max_batch: int, batch_size: int,
        concurrency: int | None = 2) -> RunConfig:
    """``concurrency=None`` leaves the field at its default."""
    return RunConfig.model_validate({
        "benchmark": "gpqa",
        "backbones": {"b1": {"kind": "scripted", "model": "m1", "replicas": replicas,
                             "max_batch_size": max_batch},
                      "b2": {"kind": "scripted", "model": "m2", "max_batch_size": 1}},
        "agents": [{"id": "a1", "backbone": "b1"}, {"id": "a2", "backbone": "b2"}],
        "coordinator": {"id": "c", "backbone": "b1"},
        "batch_size": batch_size,
        **({} if concurrency is None else {"concurrency": concurrency}),
    })


@pytest.mark.parametrize("replicas, max_batch, batch_size, rounds, blocks, expected", [
    # one replica taking 8, batches of 8, one round: HEADROOM (6) batches' worth of requests
    # for it (a batch waits on its slowest call), one more overlaps the CPU work
    (1, 8, 8, 1, 100, (2, 4)),
    # two rounds (agents, then the coordinator on b1): a batch is in one round or the other
    (1, 8, 8, 2, 100, (2, 7)),
    # 8 replicas x 8 = 64 requests per backbone, x6: 48 batches of 8 per round + 1
    (8, 8, 8, 1, 100, (2, 25)),
    (8, 8, 8, 2, 100, (2, 49)),
    # batches as large as the backbone
    (8, 8, 64, 2, 100, (2, 7)),
    # never more batches in flight than there are blocks
    (8, 8, 8, 2, 3, (2, 2)),
    (8, 8, 8, 2, 1, (1, 1)),
    # a huge backbone is capped
    (64, 256, 1, 2, 10_000, (2, MAX_BATCHES_IN_FLIGHT // 2)),
])
def test_enough_batches_in_flight_to_fill_every_replica(replicas, max_batch, batch_size, rounds,
                                                        blocks, expected):
    assert stage_plan(cfg(replicas, max_batch, batch_size), blocks, rounds) == expected


def test_in_flight_covers_the_busiest_backbone_in_every_round():
    actors, calls = stage_plan(cfg(4, 32, 16, concurrency=3), 1000, rounds=3)
    assert actors == 3 and actors * calls >= 3 * HEADROOM * (4 * 32 // 16) + 1


def test_in_flight_follows_what_the_running_engines_hold():
    """A vLLM replica reports its own max_num_seqs (1024 on an H100): that, not the spec's
    guess, sizes the work in flight."""
    c = cfg(1, 8, 8)
    assert stage_plan(c, 10_000, 2, capacities={"b1": 1024, "b2": 1}) == (2, 512)
    assert stage_plan(c, 10_000, 2) == (2, 7)


def test_one_actor_by_default_holds_every_batch_in_flight():
    """The default is one stage actor (one Ray worker process to start per pipeline) running
    every batch in flight as a thread: 8 replicas x 8, x6, over two rounds is 97 batches."""
    default = cfg(8, 8, 8, concurrency=None)
    assert default.concurrency == 1
    assert stage_plan(default, 100, rounds=2) == (1, 97)


def test_a_backbone_that_several_agents_share_gets_its_requests_not_its_samples_counted():
    """16 agents on one backbone: a batch of 8 samples is 128 requests to it, so 6 x 128 slots
    take 6 batches (plus one), not 96 (the whole workload in vLLM's queue at once)."""
    c = RunConfig.model_validate({
        "benchmark": "gpqa", "method": "self_consistency",
        "backbones": {"b": {"kind": "scripted", "model": "m"}},
        "agents": [{"id": f"a{i}", "backbone": "b"} for i in range(16)],
        "batch_size": 8, "concurrency": 1})
    assert stage_plan(c, 10_000, 1, capacities={"b": 128}) == (1, 7)
