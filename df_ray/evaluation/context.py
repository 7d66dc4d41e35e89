"""A method's context built from a run configuration: its task, agents and calibration."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from df_ray.methods.base import MethodContext, agent_view
from df_ray.tasks import task_for
from df_ray.tasks.base import Sample


def build_context(cfg: Any, calibration: Any = None,
                  count_tokens: Callable[[str, str], int] | None = None, *,
                  for_calibration: bool = False, task: Any = None) -> MethodContext:
    """The MethodContext of a RunConfig. ``count_tokens(agent_id, text)`` counts with the
    agent's engine tokenizer; without one, whitespace-separated words are counted.
    ``task``: the configuration's Task when the caller built it (a run plan's).

    The run seed enters every request's seed (``derive_seed``), except in a calibration
    pass: a frozen calibration belongs to the benchmark and the agents, not to a run seed,
    so whichever seed's configuration fits it, it is fitted on the same generations."""
    return MethodContext(
        task=task if task is not None else _task(cfg),
        agents=[agent_view(cfg, a.id) for a in cfg.agents],
        coordinator=agent_view(cfg, cfg.coordinator.id) if cfg.coordinator else None,
        settings=cfg,
        calibration=calibration,
        count_tokens=count_tokens or _words,
        run_seed=CALIBRATION_RUN_SEED if for_calibration else cfg.seed,
    )


#: The run seed of calibration passes (see ``build_context``).
CALIBRATION_RUN_SEED = 0


#: The seed every benchmark split is drawn with. A run's ``seed`` changes sampling (agent
#: seeds derive from it through the agents' own), never which samples are in a split.
SPLIT_SEED = 0


def load_samples(cfg: Any, split: str | None = None, limit: int | None = None) -> list[Sample]:
    """The configuration's samples (its split unless ``split``; its limit unless ``limit``),
    the hub data at the configuration's ``data_revision`` when it pins one. The split never
    depends on the run seed."""
    from df_ray.tasks._common import pinned_revision

    task = _task(cfg)
    with pinned_revision(getattr(cfg, "data_revision", None)):
        return task.load(split or cfg.split, source=cfg.source,
                         limit=limit if limit is not None else cfg.limit, seed=SPLIT_SEED)


def _task(cfg: Any):
    """The configuration's task: built once per configuration (``RunConfig.build_task``)."""
    build = getattr(cfg, "build_task", None)
    return build() if callable(build) else task_for(cfg)


def _words(agent: str, text: str) -> int:
    return len(text.split())


class CalibrationDataError(ValueError):
    """A configuration's calibration split cannot be had (no held-out source reachable)."""


@dataclass(frozen=True)
class HeldOut:
    """A configuration's calibration split: the samples, where they came from (in words, for
    messages and the calibration file) and a fingerprint of exactly these samples."""

    samples: list[Sample]
    origin: str
    fingerprint: str


def question_key(sample: Sample) -> str:
    """What makes two samples the same problem across sources and schemas: the loader's
    ``question_key`` (the question stem without inlined options) or a hash of the question."""
    from df_ray.tasks._common import normalize_ws, stable_hash

    key = sample.meta.get("question_key") if isinstance(sample.meta, dict) else None
    return str(key) if key else stable_hash(normalize_ws(sample.question))[:16]


def samples_fingerprint(samples: Sequence[Sample]) -> str:
    """A hash of exactly these samples (ids, questions, golds, in order)."""
    h = hashlib.sha256()
    for s in samples:
        h.update(json.dumps([s.id, s.question, s.gold], ensure_ascii=False).encode())
        h.update(b"\x00")
    return h.hexdigest()[:16]


def _is_local(source: str | None) -> bool:
    from df_ray.tasks._common import is_local

    return is_local(source)


def load_calibration_samples(cfg: Any) -> HeldOut:
    """The configuration's calibration split, disjoint from its whole test split (by id and by
    ``question_key``), at most ``calibration.limit`` samples:

    - ``calibration_source`` given: every sample that source holds (``Task.held_out_pool``;
      ``BaseTask``'s: its test and calibration splits of it), in a seeded order;
    - else, a test split from a local file (``source``): the hub's calibration split
      (``Task.hub_source``, ``Task.hub_name`` in messages); when that cannot be loaded,
      CalibrationDataError says what to pass instead;
    - else the loader's calibration split of ``source`` (today's hub splits are disjoint by
      construction; the removal changes nothing there).
    """
    from df_ray.tasks._common import pinned_revision, seeded_order

    task = _task(cfg)
    test: list[Sample] = []
    if cfg.split == "test":  # the whole test split, whatever the run's limit
        with pinned_revision(getattr(cfg, "data_revision", None)):
            test = task.load("test", source=cfg.source, limit=None, seed=SPLIT_SEED)
    test_ids = {s.id for s in test}
    test_keys = {question_key(s) for s in test}
    cal_source = getattr(cfg, "calibration_source", None)
    if cal_source is not None:
        origin = f"local {cal_source}"
        if not _is_local(cal_source):
            raise CalibrationDataError(f"{cfg.name}: calibration_source {cal_source!r} is not "
                                       "an existing file or folder")
        pool: list[Sample] = []
        seen: set[str] = set()
        for s in task.held_out_pool(cal_source):
            if s.id not in seen:
                seen.add(s.id)
                pool.append(s)
        pool = seeded_order(pool, lambda s: s.id, SPLIT_SEED, "calibration-source")
    elif _is_local(cfg.source):
        hub = task.hub_source
        where = f"hub {task.hub_name}" if task.hub_name else task.data_location(hub)[0]
        origin = f"{where}, calibration split"
        try:
            with pinned_revision(getattr(cfg, "data_revision", None)):
                pool = task.load("calibration", source=hub, seed=SPLIT_SEED)
        except Exception as e:  # offline, gated, not cached: say what to pass instead
            raise CalibrationDataError(
                f"{cfg.name}: the {cfg.benchmark} test split comes from the file {cfg.source}, "
                f"so its calibration split must come from elsewhere: {where}'s calibration "
                f"split could not be loaded ({type(e).__name__}: {e}). Pass "
                "calibration_source=<a local file of held-out samples> (test samples are "
                "removed from it), or a calibration.path fitted on enough held-out data"
            ) from None
    else:
        where, _ = task.data_location(cfg.source)
        origin = f"{where}, calibration split"
        # The whole calibration split: the run's `limit` caps its test samples, not these.
        with pinned_revision(getattr(cfg, "data_revision", None)):
            pool = task.load("calibration", source=cfg.source, limit=None, seed=SPLIT_SEED)
    before = len(pool)
    pool = [s for s in pool if s.id not in test_ids and question_key(s) not in test_keys]
    if len(pool) < before:
        origin += f", minus {before - len(pool)} test sample(s)"
    limit = cfg.calibration.limit
    chosen = pool[:limit] if limit is not None else pool
    return HeldOut(chosen, origin, samples_fingerprint(chosen))


def check_held_out(cfg: Any, held_out: HeldOut) -> None:
    """Refuse a calibration split smaller than ``calibration.min_samples``, naming the
    benchmark, the count and where the held-out samples come from."""
    from df_ray.core.calibration import CalibrationTooSmallError

    need = cfg.calibration.min_samples
    n = len(held_out.samples)
    if n >= need:
        return
    hint = ("pass calibration_source=<a local file of held-out samples> (test samples are "
            "removed from it)")
    if cfg.calibration.limit is not None and cfg.calibration.limit < need:
        hint = f"raise calibration.limit ({cfg.calibration.limit}) to at least {need}"
    raise CalibrationTooSmallError(
        f"{cfg.name}: {cfg.benchmark} has {n} held-out calibration sample(s) from "
        f"{held_out.origin}, fewer than calibration.min_samples={need}: a fit on them would "
        f"leave alpha, R_pi and kappa at about the prior 1/2; {hint}")
