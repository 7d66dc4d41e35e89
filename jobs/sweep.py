"""Run a sweep (or a single configuration) as one Ray job.

On a cluster:
    ray job submit --working-dir . --runtime-env cluster/runtime_env.yaml -- \
        python jobs/sweep.py --config jobs/configs/table1_math.yaml
Locally the same command without `ray job submit --` starts an embedded Ray.
Engines are started once for the whole sweep and shared by all its configurations; with
``--served`` the job starts none and calls the lab's shared engine service instead
(``df-ray serve``, cluster/README.md).

Every fault ends as ``df-ray run`` ends: one ``df-ray: ...`` line and the fault table's exit
status (docs/faults.md), 130 / 143 on SIGINT / SIGTERM (``ray job stop``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the working dir, under Ray

from df_ray.cli import guarded, load_with_overrides, parse_seeds, print_results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--limit", type=int)
    p.add_argument("--seeds", metavar="S,S,...",
                   help="every configuration once per run seed, e.g. --seeds 0,1,2")
    p.add_argument("--summary-json", help="also write the per-configuration metrics here")
    p.add_argument("--served", action="store_true",
                   help="call every backbone through the shared engine service (`df-ray "
                        "serve`) instead of starting the job's own engines")
    p.add_argument("--user", help="log as this user (MLflow experiment <user>/<experiment>, "
                                  "results under DF_RAY_HOME/users/<user>); default: "
                                  "DF_RAY_USER, else USER")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE (a plugin) before the config is validated, here and in "
                        "every Ray worker; repeatable")
    args = p.parse_args(argv)
    if args.user:
        import os

        os.environ["DF_RAY_USER"] = args.user
    loaded = sys.modules.get("ray")
    ray_was_up = bool(loaded is not None and loaded.is_initialized())
    return guarded(lambda: _run(args), ray_was_up=ray_was_up, exit_hard=argv is None)


def _run(args: argparse.Namespace) -> int:
    from df_ray.pipeline.runner import run_sweep
    from df_ray.plugins import load_plugins

    load_plugins(args.plugin)
    sweep = load_with_overrides(args.config, args.set, args.limit, served=args.served,
                                seeds=parse_seeds(args.seeds))
    results = run_sweep(sweep, plugins=args.plugin, where=args.config)
    status = print_results(results)
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(
            [{"name": r.config.name, "run_id": r.run_id, "metrics": r.metrics,
              "failure": r.failure} for r in results], indent=2))
    return status


if __name__ == "__main__":
    sys.exit(main())
