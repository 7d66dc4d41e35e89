"""`df-ray report`: an experiment's paper-style tables (Markdown, CSV) and plots (PNG)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd

from df_ray.reporting.inference import DEFAULT_MARGIN, belief_outcomes, inference
from df_ray.reporting.paper import absolute_tokens, absolute_tokens_markdown
from df_ray.reporting.plots import make_plots
from df_ray.reporting.runs import collect_runs, load_samples
from df_ray.reporting.tables import (
    build_table,
    seed_summary,
    seeds_markdown,
    to_markdown,
    token_ratios,
    token_ratios_markdown,
)
from df_ray.reporting.ties import DEFAULT_TIE_RULE, TIE_RULES, rescore_seed_summary

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"


class NoRunsError(LookupError):
    """The experiment has no finished configuration run."""


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]


def build_report(experiment: str, tracking_uri: str = DEFAULT_TRACKING_URI,
                 out_dir: str | Path = "reports", *, n_boot: int = 2000,
                 seed: int = 0, log: bool = False, reference: str | None = None,
                 tie_rule: str = DEFAULT_TIE_RULE, margin: float = DEFAULT_MARGIN
                 ) -> list[Path]:
    """Write ``<experiment>_table.md`` (the table, the token-ratio check against the paper,
    with several run seeds the mean and standard error over seeds, then per benchmark the
    inference of ``df_ray.reporting.inference``: accuracy with clustered intervals, paired
    differences with McNemar and Holm p, the power line, where accuracy is won and lost, the
    belief's calibration), ``<experiment>_table.csv``, ``<experiment>_token_ratios.csv``,
    ``<experiment>_seeds.csv`` (several run seeds), ``<experiment>_accuracy.csv``,
    ``<experiment>_comparisons.csv``, ``<experiment>_power.csv``,
    ``<experiment>_won_lost.csv``, ``<experiment>_calibration.csv`` (those with rows), the
    plots that apply (``<experiment>_*.png``, ``<experiment>_belief_calibration.png``
    among them) and ``<experiment>_report.md`` (tables + plots) into ``out_dir``; returns
    the paths written, the report first. ``log``: also write the table's numbers
    (pooled accuracy and interval, the comparison with McNemar and Holm p, the power line)
    to every configuration run (``df_ray.reporting.log_back``). ``reference``: the
    configuration (its name without ``seed=``) the paired comparisons are against, instead
    of each benchmark's reference DarkForest. ``tie_rule``: how the votes' ties are scored
    in the seed summary and the inference (``df_ray.reporting.ties``; the per-run table
    keeps each run's own outcome); ``margin``: the equivalence margin in points."""
    runs = collect_runs(tracking_uri, experiment)
    if runs.empty:
        raise NoRunsError(f"experiment {experiment!r} at {tracking_uri} has no finished "
                          "configuration run")
    samples, missing = _load_samples(runs)
    table = build_table(runs, samples, n_boot=n_boot, seed=seed,
                        experiment=experiment.removesuffix("-mini"))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prefix = _safe(experiment)
    ratios = token_ratios(table)
    found = inference(table, samples, reference, tie_rule=tie_rule, margin=margin)
    summary = rescore_seed_summary(seed_summary(table), found["data"],  # type: ignore[arg-type]
                                   tie_rule)
    if log:
        from df_ray.reporting.log_back import log_table_numbers

        log_table_numbers(tracking_uri, table, found)
    md_table = _table_markdown(table, runs, ratios, summary, found)
    table_md = out / f"{prefix}_table.md"
    table_md.write_text(md_table)
    table_csv = out / f"{prefix}_table.csv"
    table.to_csv(table_csv, index=False, float_format="%.4f")
    ratios_csv = out / f"{prefix}_token_ratios.csv"
    ratios.to_csv(ratios_csv, index=False, float_format="%.4f")
    extra = _write_csvs(out, prefix, summary, found)
    plots = make_plots(table, runs, out, prefix,
                       beliefs=belief_outcomes(found["data"]))  # type: ignore[arg-type]
    report = out / f"{prefix}_report.md"
    report.write_text(_report_markdown(experiment, tracking_uri, runs, md_table, missing,
                                       plots, out))
    return [report, table_md, table_csv, ratios_csv, *extra, *plots]


def _load_samples(runs: pd.DataFrame) -> tuple[dict[str, pd.DataFrame | None], list[str]]:
    """Each run's per-sample results (None where they cannot be read), and which are missing."""
    samples: dict[str, pd.DataFrame | None] = {}
    missing = []
    for _, row in runs.iterrows():
        try:
            samples[row["run_id"]] = load_samples(row)
        except Exception as e:  # report what is there; say what is not
            samples[row["run_id"]] = None
            missing.append(f"{row['name']} ({row['run_id']}): {e}")
    return samples, missing


def _table_markdown(table: pd.DataFrame, runs: pd.DataFrame, ratios: pd.DataFrame,
                    summary: pd.DataFrame, found: dict[str, object]) -> str:
    """The table's Markdown: the table, the token checks, the seeds, the inference."""
    md_ratios = token_ratios_markdown(ratios)
    md_table = to_markdown(table) + ("\n" + md_ratios if md_ratios else "")
    md_absolute = absolute_tokens_markdown(absolute_tokens(table, runs))
    if md_absolute:
        md_table += "\n" + md_absolute
    md_seeds = seeds_markdown(summary)
    if md_seeds:
        md_table += "\n" + md_seeds
    if found["markdown"]:
        md_table += "\n" + str(found["markdown"])
    return md_table


def _write_csvs(out: Path, prefix: str, summary: pd.DataFrame,
                found: dict[str, object]) -> list[Path]:
    """The seeds and inference CSVs that have rows."""
    extra: list[Path] = []
    if not summary.empty:
        seeds_csv = out / f"{prefix}_seeds.csv"
        summary.to_csv(seeds_csv, index=False, float_format="%.4f")
        extra.append(seeds_csv)
    power = pd.DataFrame([{"benchmark": b, **pl._asdict()}
                          for b, pl in found["power"].items()])  # type: ignore[attr-defined]
    for part, frame in (("accuracy", found["accuracy"]), ("comparisons", found["comparisons"]),
                        ("power", power), ("won_lost", found["won_lost"]),
                        ("calibration", found["calibration"])):
        assert isinstance(frame, pd.DataFrame)
        if not frame.empty:
            path = out / f"{prefix}_{part}.csv"
            frame.to_csv(path, index=False, float_format="%.10g")
            extra.append(path)
    return extra


def _report_markdown(experiment: str, tracking_uri: str, runs: pd.DataFrame, md_table: str,
                     missing: list[str], plots: list[Path], out: Path) -> str:
    """``<experiment>_report.md``: the tables, what is missing, the plots, the analysis."""
    sweeps = ", ".join(sorted({str(s) for s in runs["sweep"].dropna()})) or "–"
    lines = [f"# {experiment}", "",
             f"{len(runs)} configuration run(s) from {tracking_uri} (sweeps: {sweeps}).", "",
             md_table]
    if missing:
        lines += ["", "Per-sample results missing (CI from the logged standard error, no p-value):",
                  *[f"- {m}" for m in missing]]
    for p in plots:
        lines += ["", f"![{p.stem}]({p.name})"]
    from df_ray.analysis.report_section import analysis_section

    lines += analysis_section(runs, out)  # what `df-ray analyze` logged for these sweeps
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--experiment", required=True, help="MLflow experiment (a sweep's "
                   "tracking.experiment, e.g. table1_math)")
    p.add_argument("--tracking-uri", default=None,
                   help=f"MLflow tracking URI (default: MLFLOW_TRACKING_URI or {DEFAULT_TRACKING_URI})")
    p.add_argument("--out", default=None, help="output folder (default: reports/<experiment>)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples for the CIs")
    p.add_argument("--reference", default=None, metavar="CONFIGURATION",
                   help="compare every configuration with this one (its name without "
                   "seed=, e.g. majority_vote) instead of the reference DarkForest run")
    p.add_argument("--tie-rule", default=DEFAULT_TIE_RULE, choices=TIE_RULES,
                   help="how a vote's ties are scored in the seed summary and the inference "
                   "(default: expected, 1/m per correct answer of an m-way tie)")
    p.add_argument("--margin", type=float, default=DEFAULT_MARGIN, metavar="POINTS",
                   help="the equivalence margin of the comparisons' TOST (default: 5 points)")
    p.add_argument("--log", action="store_true",
                   help="also log the table's numbers (pooled accuracy, comparison with "
                   "McNemar and Holm p, power) as report.* metrics on every configuration run")
    return p


def run_from_args(args: argparse.Namespace) -> int:
    uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
    from df_ray.storage import experiment_name

    # On a shared store (a tracking server) runs are logged under <user>/<experiment>.
    experiment = experiment_name(args.experiment, uri, job=False)
    out = args.out or os.path.join("reports", _safe(args.experiment))
    try:
        paths = build_report(experiment, uri, out, n_boot=args.n_boot,
                             log=getattr(args, "log", False),
                             reference=getattr(args, "reference", None),
                             tie_rule=getattr(args, "tie_rule", DEFAULT_TIE_RULE),
                             margin=getattr(args, "margin", DEFAULT_MARGIN))
    except (KeyError, NoRunsError) as e:
        msg = e.args[0] if e.args else str(e)
        print(f"df-ray report: {msg}", file=sys.stderr)
        return 2
    print(paths[1].read_text())
    print("wrote:")
    for p in paths:
        print(f"  {p}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``df-ray report --experiment NAME [--tracking-uri URI] [--out DIR]``."""
    p = add_arguments(argparse.ArgumentParser(prog="df-ray report", description=__doc__))
    return run_from_args(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
