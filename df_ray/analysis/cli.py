"""`df-ray analyze`: a finished sweep's frontier, agent subsets, guardrail thresholds and
early stopping, from its generation cache, with no LLM call (``--fresh``: the subsets'
missing coordinator calls made)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--config", required=True,
                   help="the sweep file that ran (its cache_root, results_dir, calibration)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field as the run did, e.g. --set cache_root=/data/gen")
    p.add_argument("--seed", type=int, default=None,
                   help="the run seed to analyse (default: each benchmark's smallest)")
    p.add_argument("--benchmark", action="append",
                   help="analyse only this benchmark (repeatable; default: every one)")
    p.add_argument("--out", default=None,
                   help="output folder (default: reports/<sweep>/analysis)")
    p.add_argument("--max-wrong-override", type=float, default=0.05,
                   help="the held-out choice's bound on the wrong-override rate (default 0.05)")
    p.add_argument("--delta", type=float, default=0.1,
                   help="the bound holds with probability 1 - delta (default 0.1)")
    p.add_argument("--fresh", action="store_true",
                   help="make the agent subsets' missing coordinator calls (only where a "
                   "subset's guardrail does not trust z*), once, through the generation "
                   "cache; the coordinator's engine is started in this process")
    p.add_argument("--tie-rule", default="expected", choices=("first", "random", "expected"),
                   help="how the subsets' votes and belief-only decisions (and so their "
                   "Shapley values) score a tie: expected (default: 1/m per correct answer "
                   "of an m-way tie), first (the answer the method picks) or random (a "
                   "pick seeded by the run seed and the sample id)")
    p.add_argument("--no-mlflow", action="store_true",
                   help="do not log the analysis as artifacts of the sweep's MLflow run")
    return p


def log_to_sweep_run(sweep: Any, configs: Sequence[Any], out: Path) -> str:
    """The analysis folder as artifacts (``analysis/``) of the sweep's MLflow run; a line
    saying where, or why not. ``configs``: the sweep's, resolved (``Analysis.configs``)."""
    from df_ray.tracking import SWEEP_TAG, sweep_fingerprint

    sweep = sweep.with_configs(list(configs))  # its fingerprint: not validated again
    first = configs[0].tracking
    uri = first.uri
    if uri.startswith("sqlite:///") and not os.path.isfile(uri[len("sqlite:///"):]):
        return f"not logged to MLflow: no store at {uri}"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(first.experiment)
    if exp is None:
        return f"not logged to MLflow: no experiment {first.experiment!r} at {uri}"
    found = client.search_runs([exp.experiment_id],
                               filter_string=f"tags.`{SWEEP_TAG}` = '{sweep_fingerprint(sweep)}'",
                               max_results=1, order_by=["attributes.start_time DESC"])
    if not found:
        return f"not logged to MLflow: no run of sweep {sweep.name!r} in {first.experiment!r}"
    run_id = found[0].info.run_id
    client.log_artifacts(run_id, str(out), artifact_path="analysis")
    return f"logged to MLflow: {uri}, sweep run {run_id}, artifacts analysis/"


def run_from_args(args: argparse.Namespace, load_with_overrides) -> int:
    """``load_with_overrides`` is the CLI's sweep loader (passed in: the analysis layer does
    not import the CLI above it)."""
    from df_ray.analysis.api import AnalysisError, analyze
    from df_ray.analysis.subsets import SubsetSettings

    sweep = load_with_overrides(args.config, args.set or [], None)
    try:
        analysis = analyze(sweep, seed=args.seed, benchmarks=args.benchmark,
                           subsets=SubsetSettings(tie_rule=getattr(args, "tie_rule",
                                                                   "expected")),
                           max_wrong_override=args.max_wrong_override, delta=args.delta,
                           say=lambda m: print(m, file=sys.stderr), fresh=args.fresh)
    except AnalysisError as e:
        print(f"df-ray analyze: {e}", file=sys.stderr)
        return 2
    out = Path(args.out or os.path.join("reports", sweep.name, "analysis"))
    paths = analysis.write(out)
    print(paths[0].read_text())
    print("wrote:")
    for p in paths:
        print(f"  {p}")
    if not args.no_mlflow:
        print(log_to_sweep_run(sweep, analysis.configs, out))
    return 0
