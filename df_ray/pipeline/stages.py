"""The Ray Data stage: decode a batch of samples, run the evaluation driver over it (every
round of every configuration the pipeline carries: plan, in-row and cache lookups, engine
calls, records), grade, encode.

Input rows are ``{"sample_id": str, "sample": json}``, the sample once whatever the number
of configurations; the states live only inside the stage call. The output is one flat
result row per (sample, configuration), or, in a calibration pass, one calibration record.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from df_ray.config import RunConfig
from df_ray.evaluation.driver import Driver, Member, record_to_dict
from df_ray.evaluation.plan import RunPlan
from df_ray.evaluation.scoring import spent_tokens
from df_ray.pipeline import faults, lifeline, signals
from df_ray.pipeline.cache import open_cache
from df_ray.pipeline.cache.journal import target_of
from df_ray.pipeline.cache.write_behind import WriteBehind
from df_ray.pipeline.engine_pool import EngineClient, make_client
from df_ray.pipeline.lifecycle import shared_backbones
from df_ray.pipeline.rows import decode_sample, encode_results, output_schema

#: How often the stage re-lists the cache root for other writers' parts (seconds).
REFRESH_INTERVAL_S = 5.0

log = logging.getLogger(__name__)
# Off the main thread math-verify runs without its signal-based timeouts (df_ray bounds the
# input instead) and warns about it on every call; in stage actors that is noise.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def token_counter(cfg: RunConfig, client: EngineClient, engines: Mapping[str, str]):
    """``count(agent_id, text)`` with the agent's engine tokenizer, memoised: in this
    process where the engine kind offers it (``local_token_counter(spec)``, the same counts
    as its ``count_tokens``), else an actor call to a replica (one a disclosure: on a
    cluster, an actor call costs each side about as much CPU as the request it counts for)."""
    from df_ray.engines.spec import engine_class

    local = {}
    for name, spec in cfg.backbones.items():
        try:  # a plugin kind this worker cannot import counts on its replicas
            make = getattr(engine_class(spec.kind, engines.get(spec.kind)),
                           "local_token_counter", None)
        except ImportError:
            log.debug("engine kind %s not importable here; counting on replicas", spec.kind)
            make = None
        if make is not None:
            local[name] = make(spec)

    @functools.lru_cache(maxsize=4096)
    def count(agent_id: str, text: str) -> int:
        backbone = cfg.agent(agent_id).backbone
        if backbone in local:
            return local[backbone](text)
        return client.count_tokens(backbone, [text])[0]

    return count


def _warm(kinds: list[str]) -> None:
    from df_ray.core.parsing import warm

    for kind in kinds:
        try:
            warm(kind)
        except Exception:  # the first parse pays it, and reports what fails
            log.debug("warming answer kind %s failed", kind, exc_info=True)


class EvaluationStage:
    """Runs a batch of samples through every round of every configuration the pipeline
    carries (same samples, same cache root), then grades it: one output row per (sample,
    configuration), the generic ``ResultRow`` columns plus ``method_columns`` (the method's
    own, a JSON object), ``config`` (its index) and ``busy_s``; in
    a calibration pass ``sample_id``, ``record`` (JSON) and ``config``.

    Each sample moves to its next round as soon as its own calls are answered, not when the
    batch's slowest call of the round is (``Driver.run_rows``, `df_ray.evaluation.rolling`).
    One stage for all rounds, not one per round: a batch in flight mostly waits on engines,
    and the actor's other threads keep the engines fed meanwhile, so per-round stages bought
    no throughput, while each added an actor pool to start (a Ray worker process per actor,
    seconds on a small machine) before the pipeline ran at full speed
    (``jobs/perf/pipeline_efficiency.py``).
    """

    def __init__(self, plans: list[RunPlan], handles: dict,
                 for_calibration: bool = False) -> None:
        # Arrow's default allocator (mimalloc) in a process of a hundred-odd batch threads
        # made converting a batch's output columns cost 20-90 CPU-ms late in a run (its
        # per-thread heaps); the C library's allocator costs about 1 ms (cluster_scale.py,
        # 4 simulated GPUs: the stage 1.06 -> 0.74 CPU-ms per request)
        pa.set_memory_pool(pa.system_memory_pool())
        faults.install(f"stage-{type(self).__name__}")  # a fatal signal is reported, by name
        lifeline.hold()
        # The plans preflight resolved, unpickled: their configurations are not validated
        # again and their Methods not built again; each Task is built once, here.
        cfgs = [p.cfg for p in plans]
        self.client = make_client(handles, shared_backbones(cfgs),
                                  retries=cfgs[0].max_request_retries)
        self.members = [Member.from_plan(p, token_counter(p.cfg, self.client, p.engines),
                                         for_calibration=for_calibration) for p in plans]
        self.for_calibration = for_calibration
        self.schema = output_schema()
        cache = open_cache(self.members[0].ctx.settings)
        # every batch's answers held and written together when batches end (one part for
        # the batches that end meanwhile), not a part per batch and round
        # ... and every answer journaled by its replica as it finishes, in case this process
        # (or its head) is lost before it writes them; those need no part at a batch's end
        journal_to = getattr(self.client, "journal_to", None)
        if journal_to is not None:
            journal_to(target_of(cache.root, cache.user))
        self.cache = WriteBehind(cache, on_interrupt=signals.on_interrupt,
                                 journaled=getattr(self.client, "journaled", None))
        self.driver = Driver(self.members, self.client, self.cache,
                             refresh=lambda: cache.refresh(min_interval_s=REFRESH_INTERVAL_S),
                             on_interrupt=signals.on_interrupt)
        # The answer kinds' first-use imports (math-verify, sympy: seconds of CPU) while the
        # first round's calls run, not when its first answer is parsed.
        kinds = sorted({m.ctx.task.kind for m in self.members if m.ctx.task.kind})
        threading.Thread(target=_warm, args=(kinds,), name="warm-parsers", daemon=True).start()

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        rows = self.driver.new_rows([decode_sample(s) for s in batch["sample"]])
        busy = [[0.0] * len(self.members) for _ in rows]
        try:  # each sample on to its next round as soon as its own calls are answered
            self.driver.run_rows(rows, busy=busy)
        finally:  # the batch's answers are in the cache (or journaled) before its rows leave
            self.cache.flush(batch_end=True)
        if self.for_calibration:
            recs = self.driver.calibration_records(rows)
            states = [st for sts in rows for st in sts]  # calibration_records' order
            return {"sample_id": [r.sample_id for _, r in recs],
                    "record": [json.dumps(record_to_dict(r)) for _, r in recs],
                    "config": [m for m, _ in recs],
                    "tokens": [spent_tokens(st.calls) for st in states],
                    "n_calls": [len(st.calls) for st in states]}
        cols: dict[str, Any] = encode_results(self.driver.finish(rows, busy=busy))
        # The stage time each (sample, configuration) took, for its own wall-time share
        # (df_ray.pipeline.runner.own_wall_times); finish() yields rows in row-major order.
        cols["busy_s"] = [busy[i][m] for i in range(len(rows)) for m in range(len(self.members))]
        return pa.Table.from_pydict(cols, schema=self.schema)
