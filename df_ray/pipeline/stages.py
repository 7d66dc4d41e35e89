"""The Ray Data stages: one per method round, then grading. They only schedule: decode a
row, call the evaluation driver, encode.

Rows are ``{"sample_id": str, "sample": json, "state": json}``: the sample once, and one
state per configuration the pipeline carries, without the sample and with each shared
completion written once (``df_ray.evaluation.driver.encode_states``). A round stage runs one
round of the driver (plan, in-row and cache lookups, engine calls, records); the sample
column passes through untouched. The grading stage scores every state (or, in a calibration
pass, emits calibration records) and emits one flat result row per (sample, configuration).
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

from df_ray.config import RunConfig
from df_ray.core import Calibration
from df_ray.evaluation.driver import Driver, Member, decode_row, encode_states, record_to_dict
from df_ray.evaluation.scoring import RESULT_COLUMNS
from df_ray.pipeline import faults, lifeline
from df_ray.pipeline.cache import GenerationCache
from df_ray.pipeline.engine_pool import EngineClient
from df_ray.pipeline.lifecycle import shared_backbones
from df_ray.serving.client import make_client

#: How often a round stage re-lists the cache root for other writers' parts (seconds).
REFRESH_INTERVAL_S = 5.0

# Off the main thread math-verify runs without its signal-based timeouts (df_ray bounds the
# input instead) and warns about it on every call; in stage actors that is noise.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def token_counter(cfg: RunConfig, client: EngineClient):
    """``count(agent_id, text)`` with the agent's engine tokenizer, memoised."""

    @functools.lru_cache(maxsize=4096)
    def count(agent_id: str, text: str) -> int:
        return client.count_tokens(cfg.agent(agent_id).backbone, [text])[0]

    return count


class _StageBase:
    """Serves every configuration of the pipeline at once (same samples, same cache root)."""

    def __init__(self, configs: list[str], calibrations: list[dict | None], handles: dict,
                 for_calibration: bool = False) -> None:
        faults.install(f"stage-{type(self).__name__}")  # a fatal signal is reported, by name
        lifeline.hold()
        cfgs = [RunConfig.model_validate_json(c) for c in configs]
        self.client = make_client(handles, shared_backbones(cfgs),
                                  retries=cfgs[0].max_request_retries)
        self.members = [
            Member.from_config(c, Calibration.from_dict(cal) if cal else None,
                               token_counter(c, self.client), for_calibration=for_calibration)
            for c, cal in zip(cfgs, calibrations, strict=True)]
        self.for_calibration = for_calibration


class RoundStage(_StageBase):
    """Runs one round of every configuration's method over a batch of samples."""

    def __init__(self, round: int, configs: list[str], calibrations: list[dict | None],
                 handles: dict, for_calibration: bool = False) -> None:
        super().__init__(configs, calibrations, handles, for_calibration)
        self.round = round
        cache = GenerationCache(self.members[0].ctx.settings.cache_root)
        self.driver = Driver(self.members, self.client, cache,
                             refresh=lambda: cache.refresh(min_interval_s=REFRESH_INTERVAL_S))

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        rows = [decode_row(s, st) for s, st in zip(batch["sample"], batch["state"], strict=True)]
        busy = read_busy(batch, len(rows), len(self.members))
        self.driver.run_round(self.round, rows, busy=busy)
        return {"sample_id": batch["sample_id"], "sample": batch["sample"],
                "state": [encode_states(states) for states in rows],
                "busy": [json.dumps(b) for b in busy]}


class GradeStage(_StageBase):
    """Finishes each sample of each configuration: one output row per (sample,
    configuration), the ``ResultRow`` columns plus ``config`` (its index); in a calibration
    pass ``sample_id``, ``record`` (JSON) and ``config``."""

    def __init__(self, configs: list[str], calibrations: list[dict | None], handles: dict,
                 for_calibration: bool = False) -> None:
        super().__init__(configs, calibrations, handles, for_calibration)
        self.driver = Driver(self.members, self.client)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        rows = [decode_row(s, st) for s, st in zip(batch["sample"], batch["state"], strict=True)]
        if self.for_calibration:
            recs = self.driver.calibration_records(rows)
            return {"sample_id": [r.sample_id for _, r in recs],
                    "record": [json.dumps(record_to_dict(r)) for _, r in recs],
                    "config": [m for m, _ in recs]}
        busy = read_busy(batch, len(rows), len(self.members))
        out = [(m, r.to_dict()) for m, r in self.driver.finish(rows, busy=busy)]
        cols: dict[str, Any] = {k: [r[k] for _, r in out] for k in RESULT_COLUMNS}
        cols["config"] = [m for m, _ in out]
        # The stage time each (sample, configuration) took, for its own wall-time share
        # (df_ray.pipeline.runner.own_wall_times); finish() yields rows in row-major order.
        cols["busy_s"] = [busy[i][m] for i in range(len(rows)) for m in range(len(self.members))]
        return cols


def read_busy(batch: dict[str, Any], n_rows: int, n_members: int) -> list[list[float]]:
    """The ``busy`` column (seconds of stage time per configuration, per row) or zeros."""
    if "busy" not in batch:
        return [[0.0] * n_members for _ in range(n_rows)]
    return [[float(x) for x in json.loads(b)] for b in batch["busy"]]
