"""The stage graph: samples -> EvaluationStage (every round, then grading) as one Ray Data
stage over one pool of engines, for configurations that share their samples and cache root.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from df_ray.config import RunConfig
from df_ray.evaluation.plan import RunPlan
from df_ray.pipeline.rows import encode_sample
from df_ray.tasks.base import Sample

#: Upper bound on the batches the stage works on at once (over all its actors): enough for
#: 8 samples a batch over two rounds, with the straggler headroom, to fill a backbone of
#: 1,024 sequences (an H100 of vLLM's defaults).
MAX_BATCHES_IN_FLIGHT = 1024

#: Requests kept in flight per request an engine schedules at once. A sample moves to its
#: next round as soon as its own calls are answered (`df_ray.evaluation.rolling`), but a
#: batch keeps its place until its slowest sample is done, and completion lengths are
#: long-tailed, so the samples of a batch finish one by one while the batch keeps its place
#: (measured when a batch moved to its next round only once its slowest call was answered):
#: with only the engine's capacity in flight, a vLLM engine ran 47 of its 128 sequences on
#: average (jobs/perf/vllm_throughput.py). The surplus waits in the engine's own queue, where the
#: scheduler admits it the moment a sequence finishes. At 3, the slowest of a batch's 48
#: calls (four to five times the mean at the simulated engine's log-normal shape 1.0) held
#: its place so long that the agents' engines emptied while the coordinator's round ran and
#: the last batches started late (jobs/perf/cluster_scale.py: 4 GPUs, 2,000 questions,
#: engines' window 39.5 s at 3, 34.2 s at 6, the same bound of 20 s).
HEADROOM = 6


#: Graded rows the driver takes at once. Its work per table (splitting it by configuration,
#: converting it for the metrics, a results file's add) costs about 0.8 ms whatever its rows,
#: so it takes them in large tables: 0.08 ms a row at 16 rows a table, 0.05 at 64, 0.03 at
#: 256 (`jobs/perf/driver_cpu.py`, the main thread's loop alone). The rows wait for their
#: table only in the driver's iterator (a results file buffers 1 MiB before it writes).
DRIVER_BATCH_ROWS = 256


def initial_rows(samples: Sequence[Sample]) -> list[dict[str, str]]:
    """One row per sample: its id and the sample once."""
    return [{"sample_id": s.id, "sample": encode_sample(s)} for s in samples]


def stream_batches(handles: dict[str, Any], members: Sequence[RunPlan],
                   samples: Sequence[Sample], for_calibration: bool = False,
                   capacities: dict[str, int] | None = None) -> Iterator[Any]:
    """Yield graded batches (pyarrow tables) as they come out of the pipeline.

    ``members`` are resolved plans (``df_ray.evaluation.plan.RunPlan``, calibration set)
    of configurations over the same samples and cache root, pickled to the stage: one pipeline
    carries them all (each row the sample once; the stage runs every configuration on it),
    so the stage starts once, a call that several configurations make is made once (the
    first configuration pays, the others read it as cached) and a configuration that needs
    no engine call costs only its CPU work. Each output row names its configuration
    (``config``). ``for_calibration``: the calibration pass (records, not result rows).
    """
    import ray

    from df_ray.pipeline.stages import EvaluationStage

    lead = members[0].cfg
    methods = [p.method for p in members]
    rounds = max(m.calibration_rounds if for_calibration else m.rounds for m in methods)
    rows = initial_rows(samples)
    n_blocks = max(1, min(len(rows), (len(rows) + lead.batch_size - 1) // lead.batch_size))
    ds = ray.data.from_items(rows, override_num_blocks=n_blocks)
    actors, calls = stage_plan(lead, n_blocks, rounds, capacities)
    compute = ray.data.ActorPoolStrategy(size=actors, max_concurrent_calls_per_actor=calls,
                                         enable_true_multi_threading=calls > 1)
    # A block is a batch (``batch_size=None``): blocks of ``batch_size`` rows or one fewer
    # (``from_items`` splits evenly), and a batch size of its own would bundle a short block
    # with the next into one call that runs its two batches one after the other, the second
    # starting only once the first has ended (one batch in sixteen of 1,000 rows)
    ds = ds.map_batches(EvaluationStage, batch_size=None, num_cpus=0.25,
                        batch_format="numpy", compute=compute, fn_constructor_kwargs={
                            "plans": list(members), "handles": handles,
                            "for_calibration": for_calibration})
    yield from ds.iter_batches(batch_size=DRIVER_BATCH_ROWS, batch_format="pyarrow")


def _calls_per_sample(cfg: RunConfig, backbone: str) -> int:
    """The calls one sample makes to ``backbone`` in its busiest round, as its agents answer
    (one call each; the coordinator's round has one)."""
    return max(1, sum(a.backbone == backbone for a in cfg.agents))


def stage_plan(cfg: RunConfig, n_blocks: int, rounds: int = 1,
               capacities: dict[str, int] | None = None) -> tuple[int, int]:
    """Stage actors and the batches each works on at once.

    A batch spends its time in flight across ``rounds`` rounds of engine calls, so each
    round's busiest backbone needs enough batches in flight to keep every replica full (a
    batch brings it ``batch_size`` samples times the agents bound to it in a round): its
    engines' capacity (what they schedule at once: vLLM's ``max_num_seqs``, llama.cpp's
    ``n_parallel``, a static engine's batch size; ``capacities`` when the running engines
    reported it, else the spec's figure), times the replicas, times ``HEADROOM`` for the
    samples that wait on their batch's slowest. That is ``rounds`` times the batches that hold
    it, plus one to overlap the CPU work, never more than there are blocks (nor
    ``MAX_BATCHES_IN_FLIGHT``). Batches (and a batch's samples) at different rounds are in
    flight together, so one batch's coordinator calls overlap the next batches' agent
    rounds. A batch in flight mostly waits on engines, so the batches share
    ``cfg.concurrency`` actors as threads: every actor is a process start (seconds on a
    small machine, paid once per pipeline), a thread is free.
    """
    capacities = capacities or {}
    need = max(-(-HEADROOM * (capacities.get(name) or spec.replicas * spec.capacity)
                 // (cfg.batch_size * _calls_per_sample(cfg, name)))
               for name, spec in cfg.backbones.items())
    need = max(1, rounds) * need + 1
    in_flight = max(1, min(max(cfg.concurrency, min(need, MAX_BATCHES_IN_FLIGHT)), n_blocks))
    actors = min(cfg.concurrency, in_flight)
    return actors, -(-in_flight // actors)
