"""The paper-style table of an experiment: one row per configuration, per benchmark."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from df_ray.reporting.paper import DEFAULTS, PAPER, paper_numbers, planned_run
from df_ray.statistics import bootstrap_ci, mcnemar

ALPHA = 0.05
#: DarkForest's Args fields that the paper's numbers depend on (logged under method_args).
SETTING_KEYS = ("guardrail.k", "guardrail.tau_p", "guardrail.tau_m", "guardrail.enabled",
                "disclosure", "ablation", "lazy", "belief_only")


def settings(row: Mapping) -> dict:
    """The DarkForest settings of a collect_runs row (the keys of ``paper.DEFAULTS``)."""
    out = {k: row.get(f"params.method_args.{k}") for k in SETTING_KEYS}
    out = {k: v for k, v in out.items() if v is not None and not _isnan(v)}
    out["n_agents"] = int(row.get("n_agents") or 0)
    return out


def _isnan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def is_default_darkforest(row: Mapping) -> bool:
    if row.get("method") != "darkforest":
        return False
    s = settings(row)
    return all(s.get(k, v) == v for k, v in DEFAULTS.items())


def reference_run(group: pd.DataFrame) -> str | None:
    """The DarkForest run others are tested against: the paper's default settings if one
    ran (of several, the plainest: fixed thresholds and the benchmark's default candidates
    before a fitted guardrail or other candidates), else the first DarkForest configuration.
    The choice does not depend on the rows' order beyond that."""
    df = group[group["method"] == "darkforest"]
    if df.empty:
        return None
    ranked = sorted(df.iterrows(), key=lambda ir: _reference_rank(ir[1]))
    return ranked[0][1]["run_id"]


def _reference_rank(row: Mapping) -> tuple:
    fitted = row.get("params.method_args.guardrail.fit") is True
    own_args = any(k.startswith("params.benchmark_args.") and v is not None and not _isnan(v)
                   for k, v in row.items())
    return (not is_default_darkforest(row), fitted, own_args, str(row.get("name")))


def _metric(row: Mapping, name: str) -> float:
    v = row.get(f"metrics.{name}")
    return float(v) if v is not None and not _isnan(v) else float("nan")


def _own_metric(row: Mapping, name: str) -> float:
    """A method's own metric (``Method.metrics``: DarkForest's override rates...), NaN for a
    method that does not declare it, whatever an older version logged for it (0.0)."""
    from df_ray.methods import method_class

    try:
        declared = method_class(str(row.get("method"))).metrics
    except Exception:  # a method this process does not know: the figure as logged
        return _metric(row, name)
    return _metric(row, name) if name in declared else float("nan")


def run_seed(row: Mapping) -> int:
    """The run seed of a collect_runs row (0 when not logged)."""
    v = row.get("params.seed")
    try:
        return int(v) if v is not None and not _isnan(v) else 0
    except (TypeError, ValueError):
        return 0


_SEED_SUFFIX = re.compile(r"\s*\bseed=-?\d+")


def seedless_name(name: str) -> str:
    """A configuration's name without its ``seed=<s>`` part (how a sweep's ``seeds`` or a
    grid over ``seed`` names it)."""
    return _SEED_SUFFIX.sub("", str(name)).strip() or str(name)


def _paper_of(row: Any, bench: str, ref_id: str | None, experiment: str | None) -> dict:
    """The paper's numbers for a run's row: its planned row's in an experiment of the paper's
    table, else the paper's number for its benchmark and method (DarkForest's only on the
    reference row)."""
    planned = planned_run(experiment, seedless_name(row["name"])) if experiment else None
    if planned is not None:
        return dict(planned.paper)
    if (row["method"] == "darkforest" and row["run_id"] != ref_id
            and int(row.get("n_agents") or 0) == 3):
        return {}  # the paper's DarkForest number belongs to its reference row
    return paper_numbers(bench, str(row["method"]), settings(row))


def _logged_rates(row: Any) -> dict[str, float]:
    """The run's logged per-sample figures and rates (%), as the table shows them."""
    return {
        "calls_per_sample": _metric(row, "llm_calls_per_sample"),
        "t_cross_per_sample": _metric(row, "t_cross_per_sample"),
        "reachability": 100 * _metric(row, "reachability"),
        "trusted_rate": 100 * _own_metric(row, "trusted_rate"),
        "override_rate": 100 * _own_metric(row, "override_rate"),
        "correct_override_rate": 100 * _own_metric(row, "correct_override_rate"),
        "wrong_override_rate": 100 * _own_metric(row, "wrong_override_rate"),
        # a fitted guardrail's certified bound on it (Learn-then-Test, held-out)
        "wrong_override_bound": 100 * _metric(row, "guardrail_bound"),
        "truncation_rate": 100 * _metric(row, "truncation_rate"),
        "no_finish_reason_calls": _metric(row, "no_finish_reason_calls"),
        "stop_unknown_calls": _metric(row, "stop_unknown_calls"),
        "calibration_tokens": _metric(row, "calibration_tokens"),
        "calibration_tokens_per_sample": _metric(row, "calibration_tokens_per_sample"),
    }


def build_table(runs: pd.DataFrame, samples: Mapping[str, pd.DataFrame | None],
                n_boot: int = 2000, seed: int = 0, experiment: str | None = None) -> pd.DataFrame:
    """One row per run: accuracy (%) with its 95% bootstrap CI, tokens and calls per sample,
    override and truncation rates, the paper's numbers where it has them, and the exact
    McNemar p-value against the reference DarkForest run of the same benchmark and run seed
    (samples paired within that seed, matched on sample ids).

    For an experiment of the paper's table (``paper.EXPERIMENTS``), a configuration's paper
    numbers are its row's there (matched by configuration name, the miniature's too)."""
    out = []
    runs = runs.assign(_seed=[run_seed(r) for _, r in runs.iterrows()])
    for (bench, rseed), group in runs.groupby(["benchmark", "_seed"], sort=False):
        ref_id = reference_run(group)
        ref = _outcomes(samples.get(ref_id)) if ref_id else None
        for _, row in group.iterrows():
            s = samples.get(row["run_id"])
            correct = _outcomes(s)
            acc = _metric(row, "accuracy")
            if correct is not None and len(correct):
                lo, hi = bootstrap_ci(correct.to_numpy(), n_boot=n_boot, seed=seed)
            else:  # no per-sample table: normal approximation from the logged standard error
                se = _metric(row, "accuracy_se")
                lo, hi = acc - 1.96 * se, acc + 1.96 * se
            paper = _paper_of(row, str(bench), ref_id, experiment)
            p = float("nan")
            if ref is not None and correct is not None and row["run_id"] != ref_id:
                p = mcnemar(correct, ref)
            rec = {
                "benchmark": bench,
                "configuration": row["name"],
                "group": seedless_name(row["name"]),
                "seed": int(rseed),
                "method": row["method"],
                "n": int(_metric(row, "n_samples")) if not math.isnan(_metric(row, "n_samples")) else None,
                "accuracy": 100 * acc,
                "ci_lo": 100 * lo,
                "ci_hi": 100 * hi,
                "paper_accuracy": paper.get("accuracy", np.nan),
                "tokens_per_sample": _metric(row, "tokens_per_sample"),
                "paper_tokens": paper.get("tokens", np.nan),
                **_logged_rates(row),
                "p_vs_darkforest": p,
                "significant": bool(p < ALPHA) if not math.isnan(p) else False,
                "reference": row["run_id"] == ref_id,
                "run_id": row["run_id"],
            }
            if "metrics.prog_acc" in row and not _isnan(row.get("metrics.prog_acc")):
                rec["prog_acc"] = 100 * _metric(row, "prog_acc")
                rec["paper_prog_acc"] = paper.get("prog_acc", np.nan)
            out.append(rec)
    return pd.DataFrame(out)


def seed_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Configurations run under several run seeds: per benchmark and configuration (its name
    without ``seed=``), the number of seeds, the mean accuracy over seeds with the standard
    error across seeds (sample standard deviation / sqrt(seeds)), the per-seed accuracies,
    and mean tokens per sample and truncation rate. Empty when no configuration has more
    than one seed."""
    rows = []
    if table.empty or "group" not in table:
        return pd.DataFrame(rows)
    for (bench, group, method), g in table.groupby(["benchmark", "group", "method"],
                                                   sort=False):
        g = g.sort_values("seed")
        k = g["seed"].nunique()
        if k < 2:
            continue
        acc = g["accuracy"].to_numpy(dtype=float)
        rows.append({
            "benchmark": bench, "configuration": group, "method": method, "seeds": int(k),
            "accuracy_mean": float(np.mean(acc)),
            "accuracy_se_over_seeds": float(np.std(acc, ddof=1) / math.sqrt(len(acc))),
            "per_seed": " / ".join(f"{s}: {a:.2f}" for s, a in zip(g["seed"], acc,
                                                                 strict=True)),
            "tokens_per_sample": float(g["tokens_per_sample"].mean()),
            "truncation_rate": float(g["truncation_rate"].mean()),
        })
    return pd.DataFrame(rows)


def seeds_markdown(summary: pd.DataFrame) -> str:
    """The seed summary as Markdown ('' when empty)."""
    if summary.empty:
        return ""
    ties = "tie_rule" in summary
    cols = ["configuration", "method", "seeds", "accuracy % (mean ± s.e. over seeds)",
            "per seed", "tokens/sample", "truncated %"]
    cols += ["ties scored as", "decided by a tie"] if ties else []
    parts = []
    for bench, g in summary.groupby("benchmark", sort=False):
        lines = [f"### {bench}: over run seeds", "", "| " + " | ".join(cols) + " |",
                 "|" + "|".join(" --- " for _ in cols) + "|"]
        for _, r in g.iterrows():
            vals = [str(r["configuration"]), str(r["method"]), str(r["seeds"]),
                    f"{r['accuracy_mean']:.2f} ± {r['accuracy_se_over_seeds']:.2f}",
                    str(r["per_seed"]), _f(r["tokens_per_sample"], "{:,.0f}"),
                    _f(r["truncation_rate"], "{:.1f}")]
            if ties:
                vals += [str(r["tie_rule"]), str(r["ties"])]
            lines.append("| " + " | ".join(v.replace("|", "\\|") for v in vals) + " |")
        parts.append("\n".join(lines))
    note = ("Mean over run seeds of each seed's accuracy; ± is the standard error across "
            "seeds (sample standard deviation / sqrt(seeds)). Each seed's own row, with its "
            "McNemar test against the DarkForest run of the same seed, is in the table above "
            "(as the run decided). Ties scored as: the tie rule a vote's accuracy here is "
            "scored under (run: the row is no vote and keeps its outcome); decided by a tie: "
            "problems, over the seeds, whose vote or belief had answers level at the top.")
    return "\n\n".join(parts) + "\n\n" + note + "\n"


def _outcomes(samples: pd.DataFrame | None) -> pd.Series | None:
    if samples is None or samples.empty:
        return None
    return samples.drop_duplicates("sample_id").set_index("sample_id")["correct"].astype(bool)


def _f(v, fmt: str = "{:.2f}") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return fmt.format(v)


def _p(row) -> str:
    if row["reference"]:
        return "ref"
    p = row["p_vs_darkforest"]
    if isinstance(p, float) and math.isnan(p):
        return "–"
    return ("<0.001" if p < 0.001 else f"{p:.3f}") + (" *" if row["significant"] else "")


def to_markdown(table: pd.DataFrame) -> str:
    """The table as Markdown, one section per benchmark."""
    parts = []
    for bench, group in table.groupby("benchmark", sort=False):
        has_prog = "prog_acc" in group and group["prog_acc"].notna().any()
        overrides = group["override_rate"].fillna(0).gt(0).any()
        cols = ["configuration", "method", "n", "accuracy % [95% CI]", "paper"]
        if has_prog:
            cols += ["program acc %", "paper (prog)"]
        cols += ["tokens/sample", "paper tokens", "calls/sample", "truncated %"]
        if overrides:
            cols += ["overrides % (correct / wrong)"]
        unrecorded = ("no_finish_reason_calls" in group
                      and group["no_finish_reason_calls"].fillna(0).gt(0).any())
        if unrecorded:
            cols += ["calls without a stop reason (unknown)"]
        cols += ["p vs DarkForest"]
        lines = [f"### {bench}", "", "| " + " | ".join(cols) + " |",
                 "|" + "|".join(" --- " for _ in cols) + "|"]
        for _, r in group.iterrows():
            vals = [str(r["configuration"]), str(r["method"]), _f(r["n"], "{:.0f}"),
                    f"{r['accuracy']:.2f} [{r['ci_lo']:.1f}, {r['ci_hi']:.1f}]",
                    _f(r["paper_accuracy"])]
            if has_prog:
                vals += [_f(r.get("prog_acc")), _f(r.get("paper_prog_acc"))]
            vals += [_f(r["tokens_per_sample"], "{:,.0f}"), _f(r["paper_tokens"], "{:,.0f}"),
                     _f(r["calls_per_sample"]), _f(r.get("truncation_rate"), "{:.1f}")]
            if overrides:
                bound = r.get("wrong_override_bound")
                certified = ("" if bound is None or _isnan(bound)
                             else f", certified <= {bound:.1f}")
                vals += [f"{_f(r['override_rate'], '{:.1f}')} ({_f(r['correct_override_rate'], '{:.1f}')}"
                         f" / {_f(r['wrong_override_rate'], '{:.1f}')}{certified})"]
            if unrecorded:
                vals += [f"{_f(r['no_finish_reason_calls'], '{:.0f}')} "
                         f"({_f(r['stop_unknown_calls'], '{:.0f}')})"]
            vals += [_p(r)]
            lines.append("| " + " | ".join(v.replace("|", "\\|") for v in vals) + " |")
        cal = group[["calibration_tokens", "calibration_tokens_per_sample"]].dropna() \
            if "calibration_tokens" in group else pd.DataFrame()
        if not cal.empty:
            lines += ["", f"Calibration (paid once for the benchmark's frozen file, not in "
                          f"tokens/sample): {cal['calibration_tokens'].max():,.0f} tokens, "
                          f"{cal['calibration_tokens_per_sample'].max():,.0f} per held-out "
                          "sample."]
        if unrecorded:
            lines += ["", f"Calls without a recorded stop reason (finish_reason), over the "
                          f"table's runs: {group['no_finish_reason_calls'].sum():,.0f}; of "
                          f"them {group['stop_unknown_calls'].sum():,.0f} stopped short of "
                          "max_tokens (unknown) and the rest, which used all of it, count "
                          "as truncated."]
        parts.append("\n".join(lines))
    note = (f"Accuracy: the benchmark's headline metric, 95% percentile bootstrap CI over samples. "
            f"p: exact McNemar test against the reference DarkForest run ('ref') of the same run "
            f"seed on the samples both answered; * marks p < {ALPHA}. Truncated: calls cut off "
            f"at max_tokens (a call without a recorded stop reason: when it used all of "
            f"max_tokens), % of answered calls. Paper numbers: docs/method.md §8 (DarkForest's "
            f"only beside its default settings).")
    return "\n\n".join(parts) + "\n\n" + note + "\n"


TOKEN_RATIO_HEADING = "### Tokens per sample against DarkForest"


def paper_token_ratio(benchmark: str, method: str) -> float:
    """The paper's tokens per sample of ``method`` over DarkForest's on ``benchmark`` (its
    Figure 3 / docs/method.md §8), or NaN where the paper gives either number no value."""
    bench = PAPER.get(benchmark, {})
    ours = bench.get(method, {}).get("tokens")
    df = bench.get("darkforest", {}).get("tokens")
    if method == "darkforest" or ours is None or not df:
        return float("nan")
    return ours / df


def token_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """Each baseline's tokens per sample over its benchmark's reference DarkForest run's
    (:func:`build_table`'s ``reference`` row), beside the paper's ratio: the check that a
    baseline has the paper's shape. One row per non-DarkForest configuration of a benchmark
    with a reference run; ``vs_paper`` is our ratio over the paper's."""
    cols = ["benchmark", "configuration", "method", "tokens_per_sample",
            "darkforest_tokens_per_sample", "ratio", "paper_ratio", "vs_paper"]
    out = []
    keys = ["benchmark", "seed"] if "seed" in table else ["benchmark"]
    for (bench, *_), group in table.groupby(keys, sort=False):  # against its own seed's
        ref = group[group["reference"]]
        if ref.empty:
            continue
        df_tokens = float(ref.iloc[0]["tokens_per_sample"])
        for _, r in group[group["method"] != "darkforest"].iterrows():
            tokens = float(r["tokens_per_sample"])
            ratio = tokens / df_tokens if df_tokens > 0 else float("nan")
            paper = paper_token_ratio(str(bench), str(r["method"]))
            out.append({"benchmark": bench, "configuration": r["configuration"],
                        "method": r["method"], "tokens_per_sample": tokens,
                        "darkforest_tokens_per_sample": df_tokens, "ratio": ratio,
                        "paper_ratio": paper, "vs_paper": ratio / paper})
    return pd.DataFrame(out, columns=cols)


def token_ratios_markdown(ratios: pd.DataFrame) -> str:
    """The token-ratio check as Markdown ("" when no benchmark has a reference run)."""
    if ratios.empty:
        return ""
    cols = ["benchmark", "configuration", "method", "tokens/sample", "/ DarkForest",
            "paper", "ours / paper"]
    lines = [TOKEN_RATIO_HEADING, "",
             "| " + " | ".join(cols) + " |", "|" + "|".join(" --- " for _ in cols) + "|"]
    for _, r in ratios.iterrows():
        vals = [str(r["benchmark"]), str(r["configuration"]), str(r["method"]),
                _f(r["tokens_per_sample"], "{:,.0f}"), _f(r["ratio"], "{:.2f}x"),
                _f(r["paper_ratio"], "{:.1f}x"), _f(r["vs_paper"], "{:.2f}")]
        lines.append("| " + " | ".join(v.replace("|", "\\|") for v in vals) + " |")
    lines += ["", "Each baseline's tokens per sample (all calls, prompt + completion) over the "
              "reference DarkForest run's, beside the paper's ratio (Figure 3: GoA-mean 2.9x, "
              "GoA-max 1.6x, Self-Consistency 2.5x, MoA 1.8x on MATH; GoA-mean 4.2x, 4.1x, "
              "4.6x on MMLU-Pro, GPQA, LegalBench). 'ours / paper' far from 1 means the "
              "baseline's shape (its calls, prompts or lengths) departs from the paper's."]
    return "\n".join(lines) + "\n"
