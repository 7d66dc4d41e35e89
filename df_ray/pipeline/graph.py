"""The stage graph: samples -> one RoundStage per round -> GradeStage, as Ray Data stages over
one pool of engines, for configurations that share their samples and cache root.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from df_ray.config import RunConfig
from df_ray.core import Calibration
from df_ray.evaluation.driver import encode_sample
from df_ray.tasks.base import Sample

#: Upper bound on the batches one stage works on at once (over all its actors).
MAX_BATCHES_IN_FLIGHT = 64


def initial_rows(samples: Sequence[Sample], n_members: int) -> list[dict[str, str]]:
    """One row per sample: its id, the sample once, an empty state per configuration, and
    the stage seconds spent on each configuration so far (``busy``: its own wall-time share,
    ``df_ray.pipeline.runner.own_wall_times``)."""
    empty = json.dumps({"texts": {}, "states": [{"calls": [], "data": {}, "done": False}]
                        * n_members})
    busy = json.dumps([0.0] * n_members)
    return [{"sample_id": s.id, "sample": encode_sample(s), "state": empty, "busy": busy}
            for s in samples]


def stream_batches(handles: dict[str, Any], members: Sequence[tuple[RunConfig, Calibration | None]],
                   samples: Sequence[Sample], for_calibration: bool = False) -> Iterator[Any]:
    """Yield graded batches (pyarrow tables) as they come out of the pipeline.

    ``members`` are configurations over the same samples and cache root: one pipeline
    carries them all, each row holding the sample once and one state per configuration, so
    the stages start once, a call that several configurations make is made once (the first
    configuration pays, the others read it as cached) and a configuration that needs no
    engine call costs only its CPU work. Each output row names its configuration
    (``config``). ``for_calibration``: the calibration pass (records, not result rows).
    """
    import ray

    from df_ray.pipeline.stages import GradeStage, RoundStage

    lead = members[0][0]
    methods = [c.build_method() for c, _ in members]
    rounds = max(m.calibration_rounds if for_calibration else m.rounds for m in methods)
    rows = initial_rows(samples, len(members))
    n_blocks = max(1, min(len(rows), (len(rows) + lead.batch_size - 1) // lead.batch_size))
    ds = ray.data.from_items(rows, override_num_blocks=n_blocks)
    common = {"configs": [c.model_dump_json() for c, _ in members],
              "calibrations": [cal.to_dict() if cal else None for _, cal in members],
              "handles": handles, "for_calibration": for_calibration}
    actors, calls = stage_plan(lead, n_blocks)
    compute = ray.data.ActorPoolStrategy(size=actors, max_concurrent_calls_per_actor=calls,
                                         enable_true_multi_threading=calls > 1)
    stage = {"batch_size": lead.batch_size, "num_cpus": 0.25, "batch_format": "numpy",
             "compute": compute}
    for r in range(rounds):
        ds = ds.map_batches(RoundStage, fn_constructor_kwargs={"round": r, **common}, **stage)
    ds = ds.map_batches(GradeStage, fn_constructor_kwargs=common, **stage)
    yield from ds.iter_batches(batch_size=64, batch_format="pyarrow")


def stage_plan(cfg: RunConfig, n_blocks: int) -> tuple[int, int]:
    """Stage actors per round and batches each works on at once.

    A round needs enough batches in flight to keep every replica of its busiest backbone full
    (``replicas * max_batch_size`` requests) plus one to overlap the CPU work, and never more
    than there are blocks. A batch in flight mostly waits on engines, so the batches share
    ``cfg.concurrency`` actors as threads: every actor is a process start (seconds on a small
    machine, paid once per stage per configuration), a thread is free.
    """
    need = max(-(-spec.replicas * spec.max_batch_size // cfg.batch_size) + 1
               for spec in cfg.backbones.values())
    in_flight = max(1, min(max(cfg.concurrency, min(need, MAX_BATCHES_IN_FLIGHT)), n_blocks))
    actors = min(cfg.concurrency, in_flight)
    return actors, -(-in_flight // actors)
