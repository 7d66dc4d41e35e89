"""An analysis as Markdown (what ``df-ray analyze`` prints and ``analysis.md`` holds), CSV
files and PNG plots."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd


def _pct(v: Any) -> str:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(v) else f"{100 * v:.1f}"


def _num(v: Any, fmt: str = "{:,.0f}") -> str:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(v) else fmt.format(v)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _ci(r: Any, acc: str, lo: str, hi: str) -> str:
    a = _pct(r[acc])
    if lo in r and not pd.isna(r[lo]):
        return f"{a} [{_pct(r[lo])}, {_pct(r[hi])}]"
    return a


def _vs_full(r: Any, m: str) -> str:
    if pd.isna(r.get(f"{m}_vs_full")):
        return "–"
    p = r[f"{m}_p_mcnemar"]
    return (f"{int(r[f'{m}_b'])} / {int(r[f'{m}_c'])}, "
            + ("–" if pd.isna(p) else f"{p:.3f}"))


def _frontier_lines(f: Any) -> list[str]:
    """Accuracy against tokens: the frontier, the k-curves, the matches."""
    L: list[str] = []
    L += ["### Accuracy against tokens", ""]
    if not f.points.empty:
        L += _table(["configuration", "method", "n", "accuracy % [95% CI]", "tokens/sample"],
                    [[r["configuration"], r["method"], str(r["n"]),
                      _ci(r, "accuracy", "lo", "hi"), _num(r["tokens_per_sample"])]
                     for _, r in f.points.iterrows()])
        L.append("")
    if not f.curves.empty:
        L += ["k-curves (Self-Consistency: maj@k over every k-subset of its cached "
              "samples, pass@k beside it; votes over k agents: the mean over every "
              "k-subset of the pool):", ""]
        L += _table(["curve", "k", "accuracy %", "pass@k %", "tokens/sample"],
                    [[r["curve"], str(int(r["k"])), _ci(r, "accuracy", "lo", "hi"),
                      _pct(r["pass_at_k"]), _num(r["tokens_per_sample"])]
                     for _, r in f.curves.iterrows()])
        L.append("")
    if not f.at_darkforest_tokens.empty:
        L += ["DarkForest against Self-Consistency at DarkForest's tokens (paired over "
              "samples; difference DarkForest - Self-Consistency):", ""]
        L += _table(["DarkForest", "Self-Consistency", "k", "tokens DF / SC",
                     "accuracy DF / SC %", "difference [95% CI]", "McNemar p"],
                    [[r["darkforest"], r["self_consistency"], str(int(r["k"]))
                      + ("" if r["within_budget"] else " (over budget)"),
                      f"{_num(r['darkforest_tokens'])} / {_num(r['sc_tokens'])}",
                      f"{_pct(r['darkforest_accuracy'])} / {_pct(r['sc_accuracy'])}",
                      f"{_pct(r['difference'])} [{_pct(r['lo'])}, {_pct(r['hi'])}]",
                      _num(r["mcnemar_p"], "{:.3f}")]
                     for _, r in f.at_darkforest_tokens.iterrows()])
        L.append("")
    if not f.tokens_to_match.empty:
        L += ["Tokens each method needs to match DarkForest's accuracy:", ""]
        L += _table(["method", "k", "tokens/sample", "x DarkForest", "matches"],
                    [[r["method"], "-" if r["k"] is None or pd.isna(r["k"]) else
                      str(int(r["k"])), _num(r["tokens_per_sample"]),
                      _num(r["ratio_to_darkforest"], "{:.2f}"),
                      "yes" if r["reached"] else "no"]
                     for _, r in f.tokens_to_match.iterrows()])
        L.append("")
    for line in f.lines:
        L.append(f"- {line}")
    if f.lines:
        L.append("")
    return L


#: How the subset table says its votes' ties were scored, per tie rule.
_TIE_SENTENCES = {
    "expected": "Votes are scored with ties broken uniformly (1/m per correct answer of an "
                "m-way tie).",
    "first": "Votes are scored with ties broken as the methods break them (`first`: the "
             "lower agent index, then the smaller key).",
    "random": "Votes are scored with ties broken by a uniform pick seeded by the run seed "
              "and the sample id (`random`).",
}


def _subset_lines(s: Any) -> list[str]:
    """The agent subsets, leave one out, Shapley values, the best subsets."""
    L: list[str] = []
    L += ["### Agent subsets", "", f"{s.note}; calibration refitted on each subset "
          "from the calibration split's cached calls (the full pool: its frozen file).", ""]
    L += _table(["agents", "vote % [95% CI]", "belief only % [95% CI]",
                 "DarkForest %", "DarkForest vs all (+ / -, McNemar p)", "trusted %",
                 "tokens/sample"],
                [[r["agents"], _ci(r, "vote", "vote_lo", "vote_hi"),
                  _ci(r, "belief_only", "belief_only_lo", "belief_only_hi"),
                  _pct(r["darkforest"]), _vs_full(r, "darkforest"),
                  _pct(r["trusted_rate"]),
                  _num(r["tokens_per_sample"])] for _, r in s.table.iterrows()])
    L += ["", _TIE_SENTENCES[getattr(s, "tie_rule", "expected")]
          + " Each subset's per-problem outcomes: `*_subset_outcomes.csv`; "
          "its paired differences against all agents (vote, belief only, DarkForest: "
          "`*_vs_full`, discordant `*_b` / `*_c`, exact McNemar `*_p_mcnemar` where "
          "both are 0/1, paired t `*_p_t`): `*_subsets.csv`."]
    L += ["", "Leave one out (accuracy of the full pool minus the pool without the agent, "
          "points):", ""]
    L += _table(["left out", "vote", "belief only", "DarkForest"],
                [[r["left_out"], _num(100 * r["vote_change"], "{:+.1f}"),
                  _num(100 * r["belief_only_change"], "{:+.1f}"),
                  _num(100 * r["darkforest_change"], "{:+.1f}")]
                 for _, r in s.leave_one_out.iterrows()])
    L += ["", "Shapley values (accuracy points; they sum to the full pool's accuracy):",
          ""]
    L += _table(["agent", "vote", "belief only"],
                [[r["agent"], _num(100 * r["vote"], "{:+.1f}"),
                  _num(100 * r["belief_only"], "{:+.1f}")] for _, r in s.shapley.iterrows()])
    L += ["", "Best subset of each size:", ""]
    L += _table(["size", "decision", "agents", "accuracy %", "tokens/sample"],
                [[str(r["size"]), r["metric"], r["agents"], _pct(r["accuracy"]),
                  _num(r["tokens_per_sample"])] for _, r in s.best.iterrows()])
    L.append("")
    return L


def _threshold_lines(t: Any) -> list[str]:
    """The guardrail thresholds, and the setting chosen on held-out data."""
    L: list[str] = []
    L += ["### Guardrail thresholds", ""]
    held = "held_out_accuracy" in t.table.columns
    header = ["setting", "test acc %", "trusted %", "overrides %", "wrong overrides %"]
    if held:
        header += ["held-out acc %", "held-out wrong overrides %", "certified", "bound %"]
    rows = []
    for _, r in t.table.iterrows():
        row = [r["setting"], _pct(r["test_accuracy"]), _pct(r["test_trusted_rate"]),
               _pct(r["test_override_rate"]), _pct(r["test_wrong_override_rate"])]
        if held:
            row += [_pct(r["held_out_accuracy"]), _pct(r["held_out_wrong_override_rate"]),
                    "yes" if r["certified"] else "no", _pct(r["bound"])]
        rows.append(row)
    L += _table(header, rows)
    L.append("")
    if t.chosen:
        c = t.chosen
        L += [f"Chosen on held-out data (Learn-then-Test, {c['testing']}, wrong-override "
              f"rate <= {_pct(c['max_wrong_override'])}% with probability "
              f"{1 - c['delta']:.2f}, n = {c['n']}): **{c['setting']}**, certified bound "
              f"{_pct(c['bound'])}%; test accuracy {_pct(c['test']['test_accuracy'])}%.",
              ""]
    return L


def _early_stop_lines(e: Any) -> list[str]:
    """Generation that stops when the guardrail trusts z* (simulated)."""
    L: list[str] = []
    L += ["### Generation that stops when the guardrail trusts z* (simulated)", ""]
    L += _table(["strategy", "accuracy %", "tokens/sample", "agent calls/sample",
                 "token saving"],
                [[r["strategy"], _pct(r["accuracy"]), _num(r["tokens_per_sample"]),
                  _num(r["agent_calls_per_sample"], "{:.2f}"),
                  _num(r["token_saving"], "{:.2f}x")] for _, r in e.table.iterrows()])
    L += ["", "Agents asked before stopping: " + ", ".join(
        f"{int(r['agents_asked'])}: {int(r['samples'])}" for _, r in e.stops.iterrows())
        + " samples.", ""]
    return L


def benchmark_markdown(b: Any) -> list[str]:
    L = [f"## {b.benchmark} (pool: {b.pool}, agents {', '.join(b.agents)}; run seed {b.seed})",
         "", f"{b.n_test} test samples, {b.n_held_out} held-out samples; cached calls used: "
         + ", ".join(f"{k} {v}" for k, v in b.calls_used.items())
         + f"; {b.fresh_calls} LLM calls made"
         + (f" (--fresh: missing coordinator calls; {b.fresh_failed} failed, not cached)."
            if b.fresh_failed else " (--fresh: missing coordinator calls)." if b.fresh_calls
            else "."),
         ""]
    for line in b.lines:
        L.append(f"- {line}")
    if b.lines:
        L.append("")
    if b.frontier is not None:
        L += _frontier_lines(b.frontier)
    if b.subsets is not None:
        L += _subset_lines(b.subsets)
    if b.thresholds is not None and not b.thresholds.table.empty:
        L += _threshold_lines(b.thresholds)
    if b.early_stop is not None:
        L += _early_stop_lines(b.early_stop)
    return L


def to_markdown(analysis: Any) -> str:
    made = sum(b.fresh_calls for b in analysis.benchmarks)
    how = (f"{made} missing coordinator calls made (--fresh)" if made else "no LLM call")
    L = [f"# Analysis of {analysis.sweep} (from the generation cache, {how})", ""]
    for b in analysis.benchmarks:
        L += benchmark_markdown(b)
    return "\n".join(L).rstrip() + "\n"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]


def write(analysis: Any, out: Path) -> list[Path]:
    """``analysis.md`` first, then each section's CSV and the frontier plots."""
    from df_ray.analysis.frontier import frontier_plot

    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    md = out / "analysis.md"
    text = to_markdown(analysis)
    for b in analysis.benchmarks:
        prefix = _safe(b.benchmark)
        frames: dict[str, pd.DataFrame] = {}
        if b.frontier is not None:
            frames.update(frontier_points=b.frontier.points, frontier_curves=b.frontier.curves,
                          at_darkforest_tokens=b.frontier.at_darkforest_tokens,
                          tokens_to_match=b.frontier.tokens_to_match)
            plot = (frontier_plot(b.frontier, out / f"{prefix}_frontier.png",
                                  f"{b.benchmark}: accuracy against tokens (run seed {b.seed})")
                    if b.frontier is not None else None)
            if plot is not None:
                paths.append(plot)
                text += f"\n![{b.benchmark} frontier]({plot.name})\n"
        if b.subsets is not None:
            frames.update(subsets=b.subsets.table, leave_one_out=b.subsets.leave_one_out,
                          shapley=b.subsets.shapley, best_subsets=b.subsets.best,
                          subset_outcomes=b.subsets.outcomes)
        if b.thresholds is not None and not b.thresholds.table.empty:
            frames["thresholds"] = b.thresholds.table
        if b.early_stop is not None:
            frames["early_stop"] = b.early_stop.table
        for name, df in frames.items():
            p = out / f"{prefix}_{name}.csv"
            df.to_csv(p, index=False, float_format="%.6f")
            paths.append(p)
    md.write_text(text)
    return [md, *paths]
