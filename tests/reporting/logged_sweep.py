"""A small logged sweep written without engines, in the tracker's own format.

Configurations (GPQA, scripted backbones, 20 samples "q00".."q19"):

    name            method         what varies                     correct samples
    df              darkforest     paper defaults (the reference)  q00-q14      (15/20)
    df tau_p=0.8    darkforest     guardrail.tau_p 0.8             q00-q13      (14/20)
    df k=3          darkforest     guardrail.k 3                   q00-q12      (13/20)
    df no_calib     darkforest     ablation no_calibration         q00-q11      (12/20)
    df coord=b2     darkforest     coordinator on backbone b2      q00-q14      (15/20)
    df 4 agents     darkforest     a fourth agent                  q00-q15      (16/20)
    single          single                                         q00-q07, q15, q16 (10/20)
    majority        weighted_vote  method_args majority            q00-q04      (5/20)

Overrides (darkforest rows): q00 and q01 are overridden with the coordinator wrong (correct
overrides); q19 is overridden with the coordinator right (a wrong override; q19 is wrong for
every darkforest row).

McNemar against "df" (exact binomial on the discordant pairs):
- single: df right / single wrong on q08-q14 = 7, single right / df wrong on q15, q16 = 2;
  p = 2 * P(X <= 2 | Bin(9, 1/2)) = 2 * (C(9,0) + C(9,1) + C(9,2)) / 2^9 = 2 * 46 / 512
  = 0.1796875 (not significant).
- majority: df right / majority wrong on q05-q14 = 10, the other way 0;
  p = 2 * (1/2)^10 = 0.001953125 (significant at 0.05).
- df 4 agents: 1 discordant pair (q15) -> p = 1.0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from df_ray.config import RunConfig, SweepConfig
from df_ray.evaluation.metrics import MetricsAccumulator
from df_ray.methods import method_class
from df_ray.pipeline.results import results_schema
from df_ray.pipeline.runner import method_metric_names
from df_ray.tracking import Tracker

N = 20
IDS = [f"q{i:02d}" for i in range(N)]
EXPERIMENT = "report-test"

CORRECT = {
    "df": set(range(15)),
    "df tau_p=0.8": set(range(14)),
    "df k=3": set(range(13)),
    "df no_calib": set(range(12)),
    "df coord=b2": set(range(15)),
    "df 4 agents": set(range(16)),
    "single": set(range(8)) | {15, 16},
    "majority": set(range(5)),
}
P_SINGLE = 92 / 512
P_MAJORITY = 2 / 1024


def sweep_config(tmp_path: Path) -> SweepConfig:
    agents3 = [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2, 3)]
    base = {
        "benchmark": "gpqa",
        "backbones": {f"b{i}": {"kind": "scripted", "model": f"m{i}", "script": "majority"}
                      for i in (1, 2, 3, 4)}
        | {"bc": {"kind": "scripted", "model": "mc", "script": "majority"}},
        "agents": agents3,
        "coordinator": {"id": "coord", "backbone": "bc"},
        "cache_root": str(tmp_path / "cache"),
        "results_dir": str(tmp_path / "results"),
        "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": EXPERIMENT},
    }
    runs = [
        {"name": "df"},
        {"name": "df tau_p=0.8", "method_args.guardrail.tau_p": 0.8},
        {"name": "df k=3", "method_args.guardrail.k": 3},
        {"name": "df no_calib", "method_args.ablation": "no_calibration"},
        {"name": "df coord=b2", "coordinator": {"id": "coord", "backbone": "b2"}},
        {"name": "df 4 agents", "agents": [*agents3, {"id": "a4", "backbone": "b4"}]},
        {"name": "single", "method": "single"},
        {"name": "majority", "method": "weighted_vote", "method_args": {"majority": True}},
    ]
    return SweepConfig(name="report-test-sweep", base=base, runs=runs)


def sample_rows(name: str, method: str) -> list[dict]:
    rows = []
    is_df = method == "darkforest"
    for i, sid in enumerate(IDS):
        correct = i in CORRECT[name]
        gold = "A"
        final = gold if correct else "B"
        overridden = is_df and i in (0, 1, 19)
        coord_answer = ("C" if i in (0, 1) else gold if i == 19 else final) if is_df else None
        coord_correct = (coord_answer == gold) if is_df else None
        obs = [{"agent": f"a{j}", "answer": final if j < 3 else "D", "confidence": 0.8,
                "valid": True, "quality": 1.0, "raw": f"Answer: ({final})"} for j in (1, 2, 3)]
        belief = {"clusters": [{"answer": final, "support": ["a1", "a2"], "posterior": 0.8},
                               {"answer": "D", "support": ["a3"], "posterior": 0.2}],
                  "top": final, "runner_up": "D", "margin": 0.6}
        detail = {"observations": obs, "agent_correct": {o["agent"]: o["answer"] == gold
                                                         for o in obs},
                  "final": obs[0], "extra": {"belief": belief, "coordinator_called": is_df},
                  "calls": []}
        n_calls = 4 if is_df else (1 if method == "single" else 3)
        agent_tokens = 100 * min(n_calls, 3)
        coord_tokens = 80 if is_df else 0
        row = {
            "sample_id": sid, "correct": correct, "scores": json.dumps({"acc": float(correct)}),
            "final_answer": final, "any_agent_correct": correct or i == 19, "n_calls": n_calls,
            "n_fresh_calls": 0, "n_errors": 0, "agent_tokens": agent_tokens,
            "coordinator_tokens": coord_tokens, "other_tokens": 0,
            "total_tokens": agent_tokens + coord_tokens, "t_cross": 40 if is_df else 0,
            "detail": json.dumps(detail),
        }
        if is_df:  # DarkForest's own columns
            row.update({
                "decision_source": "guardrail" if overridden else "coordinator",
                "trusted": overridden, "overridden": overridden, "coordinator_called": True,
                "coordinator_answer": coord_answer, "coordinator_correct": coord_correct,
                "top_answer": final, "coordinator_agrees": coord_answer == final})
        rows.append(row)
    return rows


def make_logged_sweep(tmp_path: Path) -> tuple[str, str, SweepConfig]:
    """Log the sweep to sqlite under tmp_path (artifacts there too); (uri, experiment, sweep)."""
    from mlflow.tracking import MlflowClient

    sweep = sweep_config(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    if client.get_experiment_by_name(EXPERIMENT) is None:  # keep artifacts out of the cwd
        client.create_experiment(EXPERIMENT, artifact_location=str(tmp_path / "artifacts"))
    log_sweep(uri, EXPERIMENT, sweep, tmp_path / "results",
              lambda cfg: sample_rows(cfg.name, cfg.method))
    return uri, EXPERIMENT, sweep


def log_sweep(uri: str, experiment: str, sweep: SweepConfig, results: Path,
              rows_for: Callable[[RunConfig], list[dict]]) -> None:
    """Log every configuration of ``sweep`` as the pipeline would: its rows (``rows_for``) in
    ``results/<fingerprint>/samples.parquet`` (the generic columns and its method's) and one
    MLflow run with their metrics (those of the sweep's other methods NaN)."""
    tracker = Tracker(uri, experiment)
    configs = sweep.expand()
    names = method_metric_names(configs)
    with tracker.sweep(sweep):
        for cfg in configs:
            rows = rows_for(cfg)
            out = results / cfg.fingerprint()
            out.mkdir(parents=True, exist_ok=True)
            path = out / "samples.parquet"
            pq.write_table(pa.Table.from_pylist(rows, schema=results_schema(cfg)), path)
            acc = MetricsAccumulator(method_class(cfg.method).metrics)
            for r in rows:
                acc.add(r)
            metrics = {**dict.fromkeys(names, math.nan), **acc.result(), "wall_time_s": 1.0}
            tracker.log_run(cfg, metrics, path)
