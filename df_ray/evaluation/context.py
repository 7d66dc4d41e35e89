"""A method's context built from a run configuration: its task, agents and calibration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from df_ray.methods.base import MethodContext, agent_view
from df_ray.tasks import task_for
from df_ray.tasks.base import Sample


def build_context(cfg: Any, calibration: Any = None,
                  count_tokens: Callable[[str, str], int] | None = None) -> MethodContext:
    """The MethodContext of a RunConfig. ``count_tokens(agent_id, text)`` counts with the
    agent's engine tokenizer; without one, whitespace-separated words are counted."""
    return MethodContext(
        task=task_for(cfg),
        agents=[agent_view(cfg, a.id) for a in cfg.agents],
        coordinator=agent_view(cfg, cfg.coordinator.id) if cfg.coordinator else None,
        settings=cfg,
        calibration=calibration,
        count_tokens=count_tokens or _words,
        run_seed=cfg.seed,
    )


#: The seed every benchmark split is drawn with. A run's ``seed`` changes sampling (agent
#: seeds derive from it through the agents' own), never which samples are in a split.
SPLIT_SEED = 0


def load_samples(cfg: Any, split: str | None = None, limit: int | None = None) -> list[Sample]:
    """The configuration's samples (its split unless ``split``; its limit unless ``limit``),
    the hub data at the configuration's ``data_revision`` when it pins one. The split never
    depends on the run seed."""
    from df_ray.tasks._common import pinned_revision

    task = task_for(cfg)
    with pinned_revision(getattr(cfg, "data_revision", None)):
        return task.load(split or cfg.split, source=cfg.source,
                         limit=limit if limit is not None else cfg.limit, seed=SPLIT_SEED)


def _words(agent: str, text: str) -> int:
    return len(text.split())
