"""The `df-ray` command line."""

from __future__ import annotations

import argparse
import contextlib
import copy
import math
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from df_ray.config import (
    ConfigError,
    SweepConfig,
    _set_dotted,
    format_validation_error,
    load_config,
)
from df_ray.methods import MethodArgsError
from df_ray.plugins import PLUGIN_HELP, load_plugins


def demo_config_path() -> Path:
    return Path(str(resources.files("df_ray") / "configs" / "demo.yaml"))


def experiments_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "jobs" / "configs"


EMBEDDED = ({"kind": "embedded", "model": "smollm2-135m-instruct", "n_ctx": 2048},
            {"kind": "embedded", "model": "gemma3-270m", "n_ctx": 2048,
             "prompt_format": "completion"})


def miniature(sweep: SweepConfig, limit: int = 3) -> SweepConfig:
    """The same experiment on the embedded CPU models: every backbone becomes one of the two
    packaged models (alternating over the sweep's backbone names, so agents stay
    heterogeneous), a few samples, short answers. Methods, ablations, grids, compositions and
    agent sets are kept as they are (configurations are expanded first)."""
    configs = sweep.expand()
    names = sorted({b for c in configs for b in c.backbones})
    engine = {name: dict(EMBEDDED[i % 2]) for i, name in enumerate(names)}

    def cap(a: dict) -> dict:
        return {**a, "max_tokens": min(int(a.get("max_tokens", 128)), 128)}

    runs = []
    for c in configs:
        d = c.model_dump(mode="json")
        d["backbones"] = {n: engine[n] for n in d["backbones"]}
        d["agents"] = [cap(a) for a in d["agents"]]
        if d.get("coordinator"):
            d["coordinator"] = cap(d["coordinator"])
        d["limit"] = limit
        # A miniature is a smoke test of the experiment, never a published number: its
        # calibration is fitted on as few held-out samples as it runs.
        d["calibration"] = {**d["calibration"], "limit": limit, "min_samples": limit}
        d["batch_size"] = 4
        d["concurrency"] = 1
        runs.append(d)
    out = SweepConfig.model_validate({"name": sweep.name + "-mini", "base": runs[0],
                                      "runs": runs, "fuse": sweep.fuse})
    out.expand()
    return out


def _parse_value(v: str):
    return yaml.safe_load(v)


def parse_seeds(text: str | None) -> list[int] | None:
    """``--seeds 0,1,2`` as a list of run seeds (None when not given)."""
    if text is None:
        return None
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: expected integers separated by commas, "
                          "e.g. --seeds 0,1,2") from None
    if not seeds:
        raise ConfigError("--seeds: give at least one seed, e.g. --seeds 0,1,2")
    return seeds


def load_with_overrides(path: str | None, overrides: list[str], limit: int | None,
                        experiment: str | None = None, served: bool = False,
                        seeds: list[int] | None = None) -> SweepConfig:
    """The sweep a command runs: the file (or the demo, or an experiment's miniature) with
    the command line's changes. Its configurations are validated when it is resolved
    (``df_ray.evaluation.plan.resolve``, once) or expanded."""
    if path is None and experiment is not None:
        exp_file = experiments_dir() / f"{experiment}.yaml"
        if not exp_file.is_file():
            names = sorted(p.stem for p in experiments_dir().glob("*.yaml"))
            raise ConfigError(f"--experiment {experiment!r}: no such experiment; "
                              f"available: {names}")
        sweep = miniature(load_config(exp_file), limit=limit or 3)
    else:
        sweep = load_config(path or demo_config_path(), expand=False)
    if served:
        # Every backbone through the shared engine service (`df-ray serve`), by name.
        from df_ray.serving.client import use_service

        sweep = SweepConfig.model_validate(use_service(sweep.model_dump()))
    if seeds is not None:  # every configuration once per run seed
        try:
            sweep = SweepConfig.model_validate({**sweep.model_dump(), "seeds": seeds})
        except ValidationError as e:
            raise ConfigError(f"--seeds: {format_validation_error(e)}") from None
    if experiment is not None:
        overrides = [*overrides, f"tracking.experiment={experiment}"]
    if not overrides and limit is None:
        return sweep
    base = copy.deepcopy(sweep.base)
    runs = copy.deepcopy(sweep.runs)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set method_args.guardrail.tau_p=0.8")
        k, v = item.split("=", 1)
        k = k.strip()
        _set_dotted(base, k, _parse_value(v))
        for r in runs:  # a run that sets the field itself gets the override too
            if k.split(".")[0] in r:
                _set_dotted(r, k, _parse_value(v))
    if limit is not None:
        base["limit"] = limit
        for r in runs:
            if "limit" in r:
                r["limit"] = limit
    return SweepConfig.model_validate({**sweep.model_dump(), "base": base, "runs": runs})


def format_results(results) -> str:
    """The results table: one row per configuration, with its calls that succeeded and
    failed, the samples that had a failed call, the tokens spent and the share of answers
    cut off at max_tokens; then the metrics the results' methods show of their own
    (``Method.summary_metrics``, "-" for a method without one), none when no method has any."""
    from df_ray.methods import method_class
    from df_ray.pipeline.outcome import call_counts

    own: dict[str, None] = {}
    for r in results:
        own.update(dict.fromkeys(_summary_metrics(method_class, r.config.method)))
    cols = ["configuration", "method", "n", "accuracy", "calls ok", "calls failed",
            "samples w/ errors", "tokens", "tokens/sample", "calls/sample", "fresh calls",
            "truncated", *(k.removesuffix("_rate") for k in own), "wall s"]
    rows = []
    for r in results:
        m = r.metrics
        acc = m.get("accuracy", float("nan"))
        se = m.get("accuracy_se", float("nan"))
        n = m.get("n_samples", 0)
        calls, failed = call_counts(m)
        status = " (skipped: done)" if r.skipped else " FAILED" if r.failure else ""
        rows.append([
            r.config.name + status, r.config.method,
            f"{int(n)}",
            f"{100 * acc:.1f} ± {100 * se:.1f}" if not math.isnan(acc) else "-",
            f"{calls - failed}", f"{failed}", f"{int(m.get('samples_with_errors', 0))}",
            f"{m.get('tokens_per_sample', 0) * n:,.0f}",
            f"{m.get('tokens_per_sample', 0):.0f}", f"{m.get('llm_calls_per_sample', 0):.2f}",
            f"{m.get('fresh_calls', 0):.0f}", f"{100 * m.get('truncation_rate', 0):.0f}%",
            *(_percent(m.get(k)) if k in _summary_metrics(method_class, r.config.method)
              else "-" for k in own),
            f"{m.get('wall_time_s', 0):.1f}",
        ])
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths, strict=True))  # noqa: E731
    return "\n".join([line(cols), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _summary_metrics(method_class, name: str) -> tuple[str, ...]:
    try:
        return tuple(method_class(name).summary_metrics)
    except KeyError:  # a method no longer registered (an old run's)
        return ()


def _percent(v: float | None) -> str:
    """A share as a percentage; "-" for a metric the method has not got (absent or NaN)."""
    return "-" if v is None or math.isnan(v) else f"{100 * v:.0f}%"


def format_answers(results, max_samples: int = 5, max_configs: int = 3) -> str:
    """What the agents answered, sample by sample, for small runs (the demo)."""
    from df_ray.methods import method_class
    from df_ray.pipeline.outcome import agent_answers

    parts = []
    shown = [r for r in results if r.samples_path and not r.skipped
             and r.metrics.get("n_samples", 0) <= max_samples][:max_configs]
    for r in shown:
        lines = [f"{r.config.name}: what the agents answered"]
        method = method_class(r.config.method)
        rows = getattr(r, "head", None)
        for s in agent_answers(rows if rows is not None else r.samples_path,
                               limit=max_samples, method=method):
            verdict = "right" if s["correct"] else "wrong"
            lines.append(f"  {s['sample_id']}: final {s['final']!r} ({verdict})")
            for agent, ans in s["answers"].items():
                lines.append(f"    {agent}: {ans}")
            lines += ["    " + ln for ln in s["explanation"]]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def format_outcome(results) -> tuple[str, bool]:
    """The closing lines (failed calls, FAILED configurations, workers that died, engine
    texts repaired) and whether the command must exit non-zero."""
    from df_ray.pipeline.outcome import call_counts

    total = sum(call_counts(r.metrics)[0] for r in results if not r.skipped)
    failed = sum(call_counts(r.metrics)[1] for r in results if not r.skipped)
    lines = []
    for r in results:
        if r.failure:
            lines.append(f"FAILED: configuration {r.config.name!r}: {r.failure}")
    deaths = sorted({d for r in results for d in r.worker_deaths})
    for d in deaths:
        lines.append(f"worker died during the run (restarted): {d}")
    bad = [r for r in results if r.failure]
    if failed:
        where = sorted({r.config.name for r in results if call_counts(r.metrics)[1]})
        lines.append(f"{failed} of {total} LLM calls FAILED (in {', '.join(where)}); "
                     + (f"{len(bad)} configuration(s) above max_error_rate: the run FAILED"
                        if bad else "every configuration stayed within max_error_rate"))
    elif total:
        lines.append(f"all {total} LLM calls succeeded")
    repaired = {r.config.name: int(r.metrics.get("repaired_surrogates", 0)) for r in results
                if not r.skipped}
    if any(repaired.values()):
        where = ", ".join(f"{k}: {v}" for k, v in repaired.items() if v)
        lines.append(f"{sum(repaired.values())} lone UTF-16 surrogate(s) in engine outputs "
                     f"were replaced by U+FFFD before grading ({where})")
    return "\n".join(lines), bool(bad)


def print_results(results) -> int:
    """Table, answers of small runs, closing lines; the command's exit status."""
    print(format_results(results))
    answers = format_answers(results)
    if answers:
        print("\n" + answers)
    text, failed = format_outcome(results)
    if text:
        print("\n" + text)
    return 1 if failed else 0


def cmd_run(args: argparse.Namespace) -> int:
    from df_ray.pipeline.local_ray import token_auth_for_local_ray

    token_auth_for_local_ray(args.address)  # before Ray is imported
    from df_ray.pipeline.runner import run_sweep

    load_plugins(args.plugin or ())
    sweep = load_with_overrides(args.config, args.set or [], args.limit, args.experiment,
                                served=args.served, seeds=parse_seeds(args.seeds))
    results = run_sweep(sweep, address=args.address, plugins=args.plugin or (),
                        where=str(args.config or demo_config_path()))
    status = print_results(results)
    # as the run resolved it (a job: under DF_RAY_HOME; a shared store: the user's experiment)
    first = results[0].config
    if args.experiment:
        from df_ray.reporting.report import build_report
        from df_ray.reporting.tables import TOKEN_RATIO_HEADING

        paths = build_report(first.tracking.experiment, first.tracking.uri,
                             Path("reports") / args.experiment)
        ratios = paths[1].read_text().partition(TOKEN_RATIO_HEADING)
        if ratios[1]:  # the token-ratio check against the paper
            print("\n" + ratios[1] + ratios[2].rstrip())
        print(f"\nreport: {paths[0]}")
    print(f"\nlogged to MLflow: {first.tracking.uri} (experiment {first.tracking.experiment!r}); "
          f"per-sample results under {first.results_dir}/")
    if first.tracking.uri.startswith("sqlite:"):
        print(f"browse: mlflow ui --backend-store-uri {first.tracking.uri}")
    return status


def parse_sources(items: list[str] | None) -> dict[str, str]:
    """``--source BENCHMARK=PATH`` options as a mapping."""
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--source {item!r}: expected BENCHMARK=PATH, e.g. "
                              "--source finqa=/data/finqa")
        k, v = item.split("=", 1)
        out[k.strip().lower().replace("-", "_")] = v.strip()
    return out


def with_sources(sweep: SweepConfig, sources: dict[str, str]) -> SweepConfig:
    """The sweep with every configuration of a benchmark in ``sources`` reading that source."""
    if not sources:
        return sweep
    runs = []
    for _, d in sweep.run_mappings():  # whole: seeds, grid and plugins applied
        if d.get("benchmark") in sources:
            d["source"] = sources[d["benchmark"]]
        runs.append(d)
    return SweepConfig.model_validate({"name": sweep.name, "base": {}, "runs": runs,
                                       "fuse": sweep.fuse})


def check_data(configs, load: bool) -> list[str]:
    """Problems with the configurations' data, each saying what to fetch; [] when all is
    there. Local sources must exist; with ``load`` every distinct test split is loaded."""
    from df_ray.pipeline.runner import samples_key

    problems: list[str] = []
    seen: set[tuple] = set()
    for cfg in configs:
        key = samples_key(cfg)
        if key in seen:
            continue
        seen.add(key)
        where, hint = cfg.build_task().data_location(cfg.source)  # with its benchmark_args
        if load:
            from df_ray.pipeline.runner import load_samples

            try:
                n = len(load_samples(cfg))
                print(f"  data {cfg.benchmark} ({where}): {n} {cfg.split} samples")
                continue
            except Exception as e:
                problems.append(f"{cfg.benchmark}: cannot load {where}: {e}; {hint}")
                continue
        local = where.startswith("local ")
        if local and not Path(where[len("local "):]).exists():
            problems.append(f"{cfg.benchmark}: {where[len('local '):]} does not exist; {hint}")
        else:
            print(f"  data {cfg.benchmark}: {where}")
    return problems


def cmd_list(args: argparse.Namespace) -> int:
    """``df-ray list [NAME]`` (df_ray.catalog): generated from the registries and models."""
    from df_ray import catalog

    load_plugins(args.plugin or ())
    try:
        lines = ([catalog.json_text(args.name)] if args.json else
                 catalog.describe(args.name) if args.name else catalog.listing())
    except KeyError as e:
        print(f"df-ray: {e.args[0]}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """``df-ray show`` (df_ray.evaluation.preview): one sample's calls, no model run."""
    from df_ray.evaluation.preview import show

    load_plugins(args.plugin or ())
    sweep = load_with_overrides(args.config, args.set or [], None)
    return show(sweep.expand(), args.sample, name=args.name, script=args.script,
                split=args.split)


def cmd_validate(args: argparse.Namespace) -> int:
    from df_ray.evaluation.plan import resolve

    load_plugins(args.plugin or ())
    sweep = load_with_overrides(args.config, args.set or [], None)
    sweep = with_sources(sweep, parse_sources(args.source))
    try:  # every method built from its Args, as the run will
        configs = [p.cfg for p in resolve(sweep, storage=False,
                                          where=str(args.config or demo_config_path()))]
    except MethodArgsError as e:
        raise ConfigError(str(e)) from None
    from df_ray.config import check_engine_args_of

    check_engine_args_of(configs)  # engine_args against each engine's own parameters
    print(f"{args.config or demo_config_path()}: valid, {len(configs)} configuration(s)")
    for c in configs:
        print(f"  {c.name}: {c.method} on {c.benchmark} ({c.fingerprint()})")
    problems = check_data(configs, load=args.data)
    from df_ray.engines.hub_models import weight_problems
    from df_ray.reporting.inference import sweep_power

    print("\n".join(sweep_power(configs)))  # what differences the sweep can detect
    for p in problems:
        print(f"df-ray: data missing: {p}", file=sys.stderr)
    weights = weight_problems({n: s for c in configs for n, s in c.backbones.items()})
    for p in weights:
        print(f"df-ray: weights: {p}", file=sys.stderr)
    return 2 if problems or weights else 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from df_ray.analysis import cli as analysis_cli

    load_plugins(args.plugin or ())
    return analysis_cli.run_from_args(args, load_with_overrides)


def _add_run(sub) -> None:
    r = sub.add_parser("run", help="run a configuration or sweep (default: the embedded demo)")
    r.add_argument("--config", help="YAML run or sweep config (default: the embedded demo)")
    r.add_argument("--limit", type=int, help="override the sample limit")
    r.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field, e.g. --set method_args.guardrail.tau_p=0.8")
    r.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS or local Ray)")
    r.add_argument("--seeds", metavar="S,S,...",
                   help="run every configuration once per run seed, e.g. --seeds 0,1,2 (the "
                        "report gives the mean and standard error over seeds)")
    r.add_argument("--served", action="store_true",
                   help="call every backbone through the shared engine service deployed with "
                        "`df-ray serve` (backbones become kind: serve, by name)")
    r.add_argument("--experiment", metavar="NAME",
                   help="MLflow experiment to log to (overrides tracking.experiment); with a "
                        "name from jobs/configs/ and no --config, runs a CPU miniature of it")
    r.add_argument("--plugin", action="append", metavar="MODULE", help=PLUGIN_HELP)
    r.set_defaults(fn=cmd_run)


def _add_validate(sub) -> None:
    v = sub.add_parser("validate", help="validate a config without starting anything")
    v.add_argument("--config")
    v.add_argument("--set", action="append", metavar="KEY=VALUE")
    v.add_argument("--source", action="append", metavar="BENCHMARK=PATH",
                   help="read a benchmark from a local file or folder in every configuration")
    v.add_argument("--data", action="store_true",
                   help="also load every test split (hub or local), not only check paths")
    v.add_argument("--plugin", action="append", metavar="MODULE", help=PLUGIN_HELP)
    v.set_defaults(fn=cmd_validate)


def _add_show(sub) -> None:
    sh = sub.add_parser("show", help="every call the configured method would make for one "
                                     "sample, round by round, with scripted stand-in answers")
    sh.add_argument("--config", help="YAML run or sweep config (default: the embedded demo)")
    sh.add_argument("--sample", required=True, metavar="ID", help="the sample's id")
    sh.add_argument("--name", help="the sweep's configuration to show (default: its first)")
    sh.add_argument("--split", choices=("test", "calibration"), help="default: the config's")
    sh.add_argument("--script", help="the stand-in responder of every backbone (default: a "
                                     "scripted backbone's own, else majority)")
    sh.add_argument("--set", action="append", metavar="KEY=VALUE")
    sh.add_argument("--plugin", action="append", metavar="MODULE", help=PLUGIN_HELP)
    sh.set_defaults(fn=cmd_show)


def _add_list(sub) -> None:
    ls = sub.add_parser("list", help="the methods, benchmarks, engine kinds and answer kinds; "
                                     "with NAME, its arguments")
    ls.add_argument("name", nargs="?", help="a method, benchmark, engine kind or answer kind")
    ls.add_argument("--json", action="store_true",
                    help="everything as JSON: each field's type, default and description")
    ls.add_argument("--plugin", action="append", metavar="MODULE", help=PLUGIN_HELP)
    ls.set_defaults(fn=cmd_list)


def main(argv: list[str] | None = None) -> int:
    """The ``df-ray`` command. ``argv`` None: this process is the command (the console script,
    ``python -m df_ray.cli``), which may end itself at once on a Ray that failed to start."""
    exit_hard = argv is None
    # a Ray already up in this process is its caller's (a notebook's, a test's): left running
    loaded = sys.modules.get("ray")
    ray_was_up = bool(loaded is not None and loaded.is_initialized())
    p = argparse.ArgumentParser(prog="df-ray", description="DarkForest on Ray")
    sub = p.add_subparsers(dest="cmd", required=True)
    for add in (_add_run, _add_validate, _add_show, _add_list):
        add(sub)
    from df_ray.serving.cli import add_serve_parser

    add_serve_parser(sub)
    from df_ray.reporting.report import add_arguments, run_from_args

    rep = sub.add_parser("report", help="paper-style tables and plots of a logged experiment")
    add_arguments(rep)
    rep.set_defaults(fn=run_from_args)
    from df_ray.analysis import cli as analysis_cli

    ana = sub.add_parser("analyze", help="a finished sweep's frontier, agent subsets and "
                                         "guardrail thresholds from its cache, no LLM call")
    analysis_cli.add_arguments(ana)
    ana.add_argument("--plugin", action="append", metavar="MODULE", help=PLUGIN_HELP)
    ana.set_defaults(fn=cmd_analyze)
    cache = sub.add_parser("cache", help="maintain a generation cache")
    cache_sub = cache.add_subparsers(dest="cache_cmd", required=True)
    cc = cache_sub.add_parser(
        "compact", help="merge a cache root's parts into one (safe beside running writers): "
                        "every call kept, corrupted entries dropped, dead writers' "
                        "temporary files removed, finished engine journals folded in")
    cc.add_argument("root", nargs="?", help="the cache root (default: the config's cache_root)")
    cc.add_argument("--config", help="take cache_root from this config")
    cc.set_defaults(fn=cmd_cache_compact)
    cs = cache_sub.add_parser(
        "seed", help="copy a generation cache's parts from a folder (a committed cache, a "
                     "colleague's) into your own cache, where your runs replay them; never "
                     "replaces a part")
    cs.add_argument("source", help="the folder of part-*.parquet files")
    cs.add_argument("root", nargs="?", help="the cache root to seed (default: your own, "
                                            "$DF_RAY_HOME/users/<user>/generations, else "
                                            "~/.cache/df_ray/generations)")
    cs.set_defaults(fn=cmd_cache_seed)
    args = p.parse_args(argv)
    return guarded(lambda: args.fn(args), ray_was_up=ray_was_up, exit_hard=exit_hard,
                   args=args)


def guarded(fn, *, ray_was_up: bool, exit_hard: bool, args: argparse.Namespace | None = None
            ) -> int:
    """``fn()``'s exit status, every fault of the fault table (docs/faults.md) turned into
    its one ``df-ray: ...`` line and exit status; SIGINT and SIGTERM stop it cleanly (130,
    143: df_ray.pipeline.signals). The commands (``df-ray``, ``jobs/sweep.py``) run in it."""
    from df_ray.core.calibration import CalibrationMismatchError, CalibrationTooSmallError
    from df_ray.evaluation.context import CalibrationDataError
    from df_ray.pipeline import signals
    from df_ray.pipeline.engine_health import EngineFailure
    from df_ray.pipeline.results import CorruptResultsError
    from df_ray.pipeline.runner import RayStartError
    from df_ray.tasks.base import DataSchemaError, DataUnavailable
    from df_ray.tasks.gpqa import GatedDatasetError
    from df_ray.tracking import TrackingStoreError

    if exit_hard:
        signals.install()
    import logging

    # A stage's fault is reported here, in its one line (the exception itself, with its
    # remote traceback, when it is none of the table's); Ray Data's own report of it, a
    # traceback logged as the dataset aborts, would come first.
    for name in ("ray.data._internal.execution.streaming_executor_state", "ray.data.exceptions"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        return fn()
    except signals.Interrupted as e:
        return interrupted(e, ray_was_up=ray_was_up, exit_hard=exit_hard)
    except ConfigError as e:
        print(f"df-ray: configuration error: {e}", file=sys.stderr)
        return 2
    except (CalibrationMismatchError, CalibrationTooSmallError, CalibrationDataError) as e:
        print(f"df-ray: calibration error: {e}", file=sys.stderr)
        return 2
    except (DataSchemaError, DataUnavailable, GatedDatasetError) as e:
        print(f"df-ray: data error: {e}", file=sys.stderr)
        return 2
    except EngineFailure as e:
        stop_ray(ray_was_up)
        print(engine_failure_text(e, args), file=sys.stderr)
        return 1
    except TrackingStoreError as e:
        stop_ray(ray_was_up)
        print(f"df-ray: tracking error: {e}", file=sys.stderr)
        return e.exit_status
    except CorruptResultsError as e:
        stop_ray(ray_was_up)
        print(f"df-ray: results error: {e}", file=sys.stderr)
        return 1
    except RayStartError as e:
        print(f"df-ray: Ray error: {e}", file=sys.stderr)
        # A Ray that failed to start can leave its core worker where the interpreter's exit
        # hangs (seen: a process spinning at exit for minutes after "Failed to connect to
        # GCS"); nothing of the run exists yet, so leave at once.
        if exit_hard and not ray_was_up:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        return 1
    except OSError as e:  # the environment failed under a run: disk full, a file vanished
        stop_ray(ray_was_up)
        print(environment_failure_text(e), file=sys.stderr)
        return 1


def interrupted(e: Any, *, ray_was_up: bool, exit_hard: bool) -> int:
    """The end of a run stopped by SIGINT or SIGTERM (``df_ray.pipeline.signals``): its one
    line, and its exit status (130, 143), at once when this process is the command."""
    import logging

    from df_ray.pipeline import signals

    # what Ray's threads say while the interrupted pipeline is torn down is noise
    logging.getLogger("ray").setLevel(logging.CRITICAL)
    message = (f"df-ray: interrupted by {e.name}, the run stopped: answers received so "
               "far are in the generation cache and the MLflow runs are marked KILLED; "
               "rerun the same command to resume")
    if exit_hard:
        # Nothing is left to write. The local Ray this run started is stopped, Ray's
        # agents with it (signals.stop_started_ray); one it joined is left alone.
        if not ray_was_up:
            signals.stop_started_ray()
        print(message, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(e.exit_status)
    stop_ray(ray_was_up)
    print(message, file=sys.stderr)
    return e.exit_status


def stop_ray(ray_was_up: bool) -> None:
    """End the Ray this run started (never one its caller had started) before a run's
    closing message: what its workers print as they are torn down then comes before the
    message, never after it."""
    ray = sys.modules.get("ray")
    if ray_was_up or ray is None:
        return
    with contextlib.suppress(Exception):  # the message matters more than a clean teardown
        if ray.is_initialized():
            ray.shutdown()


def _os_error_of(e: OSError) -> OSError:
    """The operating system's own error inside ``e``, the innermost with an errno: a
    stage's OSError reaches the driver wrapped by Ray Data and Ray (``RayTaskError(OSError)``,
    whose ``cause`` is the one before)."""
    import re

    best, seen, texts = e, 0, []
    cur: BaseException | None = e
    while cur is not None and seen < 20:
        texts.append(str(cur))
        if isinstance(cur, OSError) and isinstance(cur.errno, int):
            best = cur
        cur = getattr(cur, "cause", None) or cur.__cause__ or cur.__context__
        seen += 1
    name = best.filename if isinstance(best.filename, str) else None
    if name is None or "\n" in name or name.startswith("Failed to "):
        # Ray Data appends its retry note to the error's arguments, where the file name was:
        # the name is then only in the remote traceback's last line
        hits = [m for t in texts for m in re.finditer(
            r"\[Errno (\d+)\] ([^:\n]+): '([^'\n]+)'", t)
            if os.sep in m.group(3) and not m.group(3).startswith("Failed to ")]
        if hits:
            m = hits[-1]
            best = OSError(int(m.group(1)), m.group(2), m.group(3))
        elif isinstance(best.errno, int):
            best = OSError(best.errno, os.strerror(best.errno))
    name = best.filename if isinstance(best.filename, str) else None
    if name and os.path.basename(name).startswith((".tmp-", ".samples-")):
        # a writer's temporary file: the folder it was being written to says more
        best = OSError(best.errno, best.strerror, os.path.dirname(name))
    return best


def environment_failure_text(e: OSError) -> str:
    """One line for an operating-system fault during a run (disk full, permission, ...)."""
    import errno
    import os

    e = _os_error_of(e)

    # the errno's own words: pyarrow's strerror is "Error writing bytes to file. Detail: ..."
    what = (os.strerror(e.errno) if isinstance(e.errno, int) and e.errno > 0
            else e.strerror or type(e).__name__)
    where = f" ({e.filename})" if e.filename else ""
    hint = {errno.ENOSPC: "free space on that device (or point results_dir / cache_root "
                          "elsewhere)",
            errno.EACCES: "make it writable or point the path elsewhere",
            errno.EROFS: "the file system is read-only: point the path elsewhere"}.get(
        e.errno, "fix the cause")
    return (f"df-ray: environment error, the run stopped: {what}{where}; {hint}, then rerun: "
            "calls completed before it are kept in the generation cache")


def cmd_cache_compact(args: argparse.Namespace) -> int:
    from df_ray.pipeline.cache import GenerationCache

    root = args.root
    if root is None:
        sweep = load_with_overrides(args.config, [], None)
        roots = sorted({c.cache_root for c in sweep.expand()})
    else:
        roots = [root]
    for r in roots:
        cache = GenerationCache(r)
        cache.compact()
        f = cache.compaction
        print(f"{r}: {f['entries']} calls kept in one part (merged {f['parts']} parts, "
              f"{f['journals']} finished engine journals folded first; "
              f"{f['dropped']} corrupted entries dropped, {f['unreadable']} unreadable parts "
              f"left in place, {f['tmp_removed']} temporary files of dead writers removed; "
              f"{f['conflicts']} keys with conflicting copies kept (every copy), "
              f"{f['foreign']} parts of other writers left in place, {f['oversized']} parts "
              "too large to read left in place)")
    return 0


def cmd_cache_seed(args: argparse.Namespace) -> int:
    """``df-ray cache seed``: one line saying what was seeded, or why nothing was (exit 2)."""
    from df_ray.config import default_cache_root
    from df_ray.pipeline.cache.seed import NotACache, seed_root
    from df_ray.user_names import current_user

    try:
        user = current_user()
        report = seed_root(args.source, args.root or default_cache_root(), user)
    except (NotACache, ValueError) as e:  # ValueError: a DF_RAY_USER that names no folder
        print(f"df-ray: cache seed: {e}", file=sys.stderr)
        return 2
    print(report.describe())
    return 0


def engine_failure_text(e: Exception, args: argparse.Namespace | None = None) -> str:
    """The one message an engine failure ends a run with."""
    return (f"df-ray: engine failure, the run stopped: {e}\n"
            "Calls completed before it are kept in the generation cache; a rerun resumes "
            "from them.")


if __name__ == "__main__":
    sys.exit(main())
