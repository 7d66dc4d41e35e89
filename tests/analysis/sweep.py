"""A small scripted sweep run for real (the evaluation driver, the generation cache, the
calibration fit, ``samples.parquet`` as the pipeline writes it), for the analysis tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

import df_ray
from df_ray.config import RunConfig, SweepConfig
from df_ray.pipeline.cache import GenerationCache
from df_ray.pipeline.results import ResultsFile
from df_ray.pipeline.rows import encode_results
from tests.helpers import write_mmlu_goa

SCRIPT = "tests.analysis.responders:skilled"
AGENTS = ("a1", "a2", "a3", "a4")


def base(tmp: Path, agents=AGENTS, n_test: int = 24, n_cal: int = 20) -> dict[str, Any]:
    tmp = tmp.resolve()
    test = tmp / "test.json"
    cal = tmp / "held_out.json"
    if not test.exists():
        write_mmlu_goa(test, n_test, "q")
        write_mmlu_goa(cal, n_cal, "c")
    models = {a: f"m{i + 1}" for i, a in enumerate((*AGENTS, "a5"))}
    return {
        "name": "analysis",
        "benchmark": "mmlu_pro",
        "source": str(test),
        "calibration_source": str(cal),
        "backbones": {**{f"b{a}": {"kind": "scripted", "model": models[a], "script": SCRIPT}
                         for a in agents},
                      "bc": {"kind": "scripted", "model": "mc", "script": SCRIPT}},
        "agents": [{"id": a, "backbone": f"b{a}"} for a in agents],
        "coordinator": {"id": "coord", "backbone": "bc"},
        "calibration": {"dir": str(tmp / "calibration"), "auto_fit": True, "limit": n_cal,
                        "min_samples": 10},
        "cache_root": str(tmp / "cache"),
        "results_dir": str(tmp / "results"),
        "tracking": {"uri": f"sqlite:///{tmp}/mlflow.db", "experiment": "analysis"},
    }


RUNS = [
    {"name": "darkforest"},
    {"name": "darkforest belief only", "method_args": {"belief_only": True}},
    {"name": "majority_vote", "method": "weighted_vote", "method_args": {"majority": True}},
    {"name": "self_consistency", "method": "self_consistency",
     "method_args": {"agent": "a1", "samples": 4}},
    {"name": "single-a1", "method": "single", "method_args": {"agent": "a1"}},
]


def sweep_config(tmp: Path, runs=RUNS, **kw: Any) -> SweepConfig:
    return SweepConfig.model_validate({"name": "analysis", "base": base(tmp, **kw),
                                       "runs": runs})


def run_config(cfg: RunConfig, sweep_name: str = "analysis", *, write: bool = True):
    """One configuration through the in-process driver over its cache; its samples.parquet
    written as the pipeline writes it (``write``)."""
    ev = df_ray.evaluate(cfg, cache=GenerationCache(cfg.cache_root))
    if write:
        out = ResultsFile(cfg, sweep_name)
        out.add(pa.Table.from_pydict(encode_results([(0, r) for r in ev.rows])))
        out.close()
        out.commit()
    return ev


def run_sweep(sweep: SweepConfig) -> dict[str, Any]:
    return {c.name: run_config(c, sweep.name) for c in sweep.expand()}


def variant(cfg: RunConfig, **update: Any) -> RunConfig:
    d = cfg.model_dump(mode="json")
    d.update(update)
    return RunConfig.model_validate(d)
