"""The report's inference over a sweep's per-sample tables: what a claim of a difference
needs (docs/running.md, "Reports").

Per benchmark, from every configuration's ``samples.parquet`` (the seeds of one
configuration pooled: its name without ``seed=``, :func:`tables.seedless_name`):

- :func:`accuracy_table`: accuracy with its standard error clustered by question across run
  seeds (and by the benchmark's clusters, the rows' ``cluster``, where it declares them:
  LegalBench tasks, FinQA reports), a t interval with (clusters - 1) degrees of freedom, and
  for a single seed the exact Clopper-Pearson and the Wilson interval.
- :func:`comparisons`: each configuration against the reference DarkForest configuration on
  the (question, seed) pairs both ran: the mean paired difference with its clustered
  interval, the exact McNemar p and Holm-adjusted p over the benchmark's comparisons (of the
  McNemar and of the clustered t test).
- :func:`power_lines`: the smallest paired difference the benchmark's table can detect at
  80% power and two-sided alpha 0.05, from the comparisons' observed discordance rate and
  the seeds' within-question correlation (``stats.power_line``).
- :func:`won_lost_table`: where accuracy is won and lost (the rows' ``selected_correct``,
  ``kept``, ``lost``, ``found``, ``guardrail_saved``, ``guardrail_lost``, ``failure``).
- :func:`calibration_table`: DarkForest's P(z*|O) (``top_posterior``) against whether z* was
  right: ECE, Brier; the plots are ``plots.belief_calibration``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from df_ray.methods.result_columns import FAILURES
from df_ray.reporting.runs import sample_detail
from df_ray.reporting.ties import DEFAULT_TIE_RULE, is_fractional, tie_outcome
from df_ray.statistics import (
    PowerLine,
    brier,
    clustered_mean,
    ece,
    holm,
    min_mcnemar_p,
    paired_difference,
    power_line,
    power_text,
    proportion_interval,
    tost,
)

#: The equivalence margin of the comparisons (points) unless told otherwise.
DEFAULT_MARGIN = 5.0

WON_LOST = ("selected_correct", "kept", "lost", "found", "guardrail_saved", "guardrail_lost")


def _with_ties(d: pd.DataFrame, s: pd.DataFrame, method: str, seed: int,
               rule: str) -> pd.DataFrame:
    """``d`` with ``correct`` under the tie rule (``correct_run``: the run's own outcome),
    ``tied`` (answers level at the top of the row's vote or belief, 0: no vote),
    ``tie_matters`` (the rule can change the outcome) and ``vote`` (the final answer is the
    vote or the belief's argmax)."""
    d["correct_run"] = d["correct"].astype(bool)
    if "detail" not in s:
        d["tied"], d["tie_matters"], d["vote"] = 0, False, False
        return d
    outs = [tie_outcome(sample_detail(row), method, bool(row["correct"]), rule, seed,
                        str(row["sample_id"]),
                        {"decision_source": row.get("decision_source")})
            for _, row in s.iterrows()]
    d["correct"] = [o.credit for o in outs]
    d["tied"] = [o.tied for o in outs]
    d["tie_matters"] = [o.matters for o in outs]
    d["vote"] = [o.vote for o in outs]
    return d


def pooled(table: pd.DataFrame, samples: Mapping[str, pd.DataFrame | None],
           tie_rule: str = DEFAULT_TIE_RULE) -> pd.DataFrame:
    """Every run's samples, one row per (configuration, seed, question): ``benchmark``,
    ``group`` (the configuration's name without ``seed=``), ``method``, ``seed``,
    ``reference`` (the run is its seed's reference DarkForest), ``sample_id``, ``correct``
    (under ``tie_rule`` where the final answer is a vote: ``ties.tie_outcome``; the run's own
    in ``correct_run``), ``tied``, ``tie_matters`` and the won-and-lost, cluster and
    posterior columns the rows have."""
    keep = ["sample_id", "correct", "any_agent_correct", "cluster", "top_posterior",
            "failure", *WON_LOST]
    parts = []
    for _, r in table.iterrows():
        s = samples.get(r["run_id"])
        if s is None or s.empty:
            continue
        s = s.drop_duplicates("sample_id")
        d = s[[c for c in keep if c in s.columns]].copy()
        d = _with_ties(d, s, str(r["method"]), int(r["seed"]), tie_rule)
        d["benchmark"], d["group"], d["method"] = r["benchmark"], r["group"], r["method"]
        d["seed"], d["reference"] = int(r["seed"]), bool(r["reference"])
        parts.append(d)
    if not parts:
        return pd.DataFrame(columns=["benchmark", "group", "method", "seed", "reference",
                                     *keep])
    return pd.concat(parts, ignore_index=True)


def _declares_clusters(d: pd.DataFrame) -> bool:
    return "cluster" in d and len(d) > 0 and bool(d["cluster"].notna().all())


def accuracy_table(data: pd.DataFrame) -> pd.DataFrame:
    """Per benchmark and configuration (seeds pooled): accuracy (%), the clustered standard
    errors and interval, and with one seed the exact and Wilson intervals."""
    rows = []
    for (bench, group), d in data.groupby(["benchmark", "group"], sort=False):
        y = d["correct"].astype(float).to_numpy()
        by_q = clustered_mean(y, d["sample_id"].to_numpy())
        by_c = clustered_mean(y, d["cluster"].to_numpy()) if _declares_clusters(d) else None
        main = by_c or by_q
        seeds = int(d["seed"].nunique())
        k, n = round(float(y.sum())), len(y)
        whole = seeds == 1 and not is_fractional(y)
        exact = proportion_interval(k, n, "beta") if whole else (math.nan, math.nan)
        wilson = proportion_interval(k, n, "wilson") if whole else (math.nan, math.nan)
        tied = d["tied"] if "tied" in d else pd.Series(0, index=d.index)
        matters = d["tie_matters"] if "tie_matters" in d else pd.Series(False, index=d.index)
        rows.append({
            "benchmark": bench, "configuration": group, "method": d["method"].iloc[0],
            "seeds": seeds, "questions": int(d["sample_id"].nunique()), "n": n,
            "accuracy": 100 * main.mean, "se_question": 100 * by_q.se,
            "se_cluster": 100 * by_c.se if by_c else math.nan,
            "clusters": main.clusters, "cluster_by": "benchmark cluster" if by_c else "question",
            # a share's interval, clipped to [0, 100]
            "ci_lo": 100 * max(main.lo, 0.0), "ci_hi": 100 * min(main.hi, 1.0),
            "exact_lo": 100 * exact[0], "exact_hi": 100 * exact[1],
            "wilson_lo": 100 * wilson[0], "wilson_hi": 100 * wilson[1],
            "ties": int((tied > 1).sum()), "ties_matter": int(matters.astype(bool).sum()),
        })
    return pd.DataFrame(rows)


def reference_group(d: pd.DataFrame, name: str | None = None) -> str | None:
    """The configuration the benchmark's others are compared with: ``name`` when given (a
    configuration name without ``seed=``; None where the benchmark has none of that name),
    else the one whose runs are the reference DarkForest (tables.reference_run) of the most
    seeds."""
    if name is not None:
        return name if (d["group"] == name).any() else None
    ref = d[d["reference"]]
    if ref.empty:
        return None
    return str(ref.groupby("group", sort=False)["seed"].nunique().idxmax())


def comparisons(data: pd.DataFrame, reference: str | None = None,
                margin: float = DEFAULT_MARGIN) -> pd.DataFrame:
    """Per benchmark, every configuration against the reference one, paired on the
    (question, seed) pairs both ran: difference (points) with its clustered t interval, the
    exact McNemar p over the pairs (NaN where an outcome is a tie's expected credit), the
    clustered t test's p, their Holm adjustments over the benchmark's comparisons, the
    discordance rate, the seeds' design effect, the smallest McNemar p the discordant pairs
    could give at any outcome (``can_reach_05``: below 0.05), and the equivalence test
    against +-``margin`` points: the 90% TOST interval, its p and the verdict."""
    rows = []
    for bench, d in data.groupby("benchmark", sort=False):
        ref_name = reference_group(d, reference)
        if ref_name is None:
            continue
        ref = d[d["group"] == ref_name]
        part = []
        for group, g in d[d["group"] != ref_name].groupby("group", sort=False):
            m = g.merge(ref, on=["sample_id", "seed"], suffixes=("", "_ref"))
            if m.empty:
                continue
            clusters = (m["cluster_ref"] if _declares_clusters(ref) and "cluster_ref" in m
                        else m["sample_id"]).to_numpy()
            a = m["correct"].astype(float).to_numpy()
            b = m["correct_ref"].astype(float).to_numpy()
            pdiff = paired_difference(a, b, clusters)
            eq = tost(a - b, clusters, margin / 100)
            least = min_mcnemar_p(pdiff.b + pdiff.c)
            dd = a.astype(float) - b.astype(float)
            seeds = int(m["seed"].nunique())
            iid = float(np.std(dd, ddof=1)) / math.sqrt(len(dd)) if len(dd) > 1 else math.nan
            deff = (pdiff.se / iid) ** 2 if iid and iid > 0 else math.nan
            part.append({
                "benchmark": bench, "configuration": group, "method": g["method"].iloc[0],
                "reference": ref_name, "seeds": seeds, "pairs": pdiff.n,
                "clusters": pdiff.clusters, "diff": 100 * pdiff.diff,
                "ci_lo": 100 * pdiff.lo, "ci_hi": 100 * pdiff.hi,
                "b": pdiff.b, "c": pdiff.c, "discordance": (pdiff.b + pdiff.c) / pdiff.n,
                "p_mcnemar": pdiff.p_mcnemar, "p_clustered": pdiff.p_clustered,
                "design_effect": deff, "min_p_mcnemar": least, "can_reach_05": least < 0.05,
                "margin": margin, "tost_lo": 100 * eq.lo, "tost_hi": 100 * eq.hi,
                "p_tost": eq.p, "equivalence": eq.verdict,
            })
        if part:
            frame = pd.DataFrame(part)
            frame["p_mcnemar_holm"] = holm(frame["p_mcnemar"])
            frame["p_clustered_holm"] = holm(frame["p_clustered"])
            rows.append(frame)
    if not rows:
        return pd.DataFrame()
    return pd.concat(rows, ignore_index=True)


def power_lines(data: pd.DataFrame, comps: pd.DataFrame, reference: str | None = None
                ) -> dict[str, PowerLine]:
    """Per benchmark: the power line for its reference configuration's questions and seeds,
    the comparisons' median discordance and, with several seeds, the median within-question
    correlation implied by their design effects ((deff - 1) / (seeds - 1)); assumed
    (``stats.power_line``) where there is no comparison."""
    out = {}
    for bench, d in data.groupby("benchmark", sort=False):
        ref_name = reference_group(d, reference)
        ref = d[d["group"] == ref_name] if ref_name is not None else d
        n = int(ref["sample_id"].nunique())
        seeds = int(ref["seed"].nunique())
        c = comps[comps["benchmark"] == bench] if not comps.empty else comps
        psi = rho = None
        rows: list[str] = []
        if not c.empty:
            # the line is for the comparisons paired over all of the reference's seeds
            same = c[c["seeds"] == seeds]
            basis = same if not same.empty else c
            psi = float(basis["discordance"].median())
            rows = [str(x) for x in basis["configuration"]]
            multi = basis[(basis["seeds"] > 1) & basis["design_effect"].notna()]
            if not multi.empty:
                rho = float(((multi["design_effect"] - 1) / (multi["seeds"] - 1)).median())
        out[str(bench)] = power_line(n, seeds, psi, rho, comparisons=max(len(c), 1),
                                     rows=rows)
    return out


def won_lost_table(data: pd.DataFrame) -> pd.DataFrame:
    """Per benchmark and configuration (seeds pooled; rows that carry the columns): the
    shares (%) of reachable, selected, kept, lost, found, guardrail saves and losses, the
    accuracy (= kept + found, as the run decided its ties) and each failure tag."""
    rows = []
    if "kept" not in data:
        return pd.DataFrame()
    for (bench, group), d in data.groupby(["benchmark", "group"], sort=False):
        d = d[d["kept"].notna()]
        if d.empty:
            continue
        n = len(d)

        def share(col: str, frame: pd.DataFrame = d) -> float:
            if col not in frame or frame[col].isna().all():
                return math.nan
            hits = sum(1 for v in frame[col] if isinstance(v, bool | np.bool_) and v)
            return 100 * hits / len(frame)

        rec = {"benchmark": bench, "configuration": group, "method": d["method"].iloc[0],
               "seeds": int(d["seed"].nunique()), "n": n,
               "reachable": share("any_agent_correct"), "selected": share("selected_correct"),
               "kept": share("kept"), "lost": share("lost"), "found": share("found"),
               "guardrail_saved": share("guardrail_saved"),
               "guardrail_lost": share("guardrail_lost"),
               # as the run decided: kept and found are the run's own outcomes
               "accuracy": 100 * float(d["correct_run" if "correct_run" in d
                                         else "correct"].astype(bool).sum()) / n}
        tags = d["failure"] if "failure" in d else pd.Series(dtype=object)
        for t in FAILURES:
            rec[f"failure.{t}"] = 100 * float((tags == t).sum()) / n
        rows.append(rec)
    return pd.DataFrame(rows)


def belief_outcomes(data: pd.DataFrame) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(benchmark, configuration) -> (P(z*|O), z* right) over its rows with a posterior."""
    out = {}
    if "top_posterior" not in data or "selected_correct" not in data:
        return out
    ok = data[data["top_posterior"].notna() & data["selected_correct"].notna()]
    for (bench, group), d in ok.groupby(["benchmark", "group"], sort=False):
        out[(str(bench), str(group))] = (d["top_posterior"].astype(float).to_numpy(),
                                         d["selected_correct"].astype(float).to_numpy())
    return out


def calibration_table(data: pd.DataFrame) -> pd.DataFrame:
    """Per DarkForest configuration with posteriors: n, mean P(z*|O), z*'s accuracy (%),
    ECE (10 equal-width bins) and Brier score."""
    rows = []
    for (bench, group), (p, y) in belief_outcomes(data).items():
        rows.append({"benchmark": bench, "configuration": group, "n": len(p),
                     "mean_posterior": float(p.mean()), "top_accuracy": 100 * float(y.mean()),
                     "ece": ece(p, y), "brier": brier(p, y)})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- Markdown


def _f(v, fmt: str = "{:.2f}") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return fmt.format(v)


def _pv(p: float) -> str:
    if isinstance(p, float) and math.isnan(p):
        return "–"
    return ("<0.001" if p < 0.001 else f"{p:.3f}") + (" *" if p < 0.05 else "")


def _table(cols: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(cols) + " |", "|" + "|".join(" --- " for _ in cols) + "|",
            *["| " + " | ".join(v.replace("|", "\\|") for v in r) + " |" for r in rows]]


def _of(df: pd.DataFrame, bench: str) -> pd.DataFrame:
    return df[df["benchmark"] == bench] if not df.empty else df


def _accuracy_lines(bench: str, a: pd.DataFrame) -> list[str]:
    return [f"### {bench}: accuracy with clustered intervals", "", *_table(
        ["configuration", "method", "seeds", "questions", "accuracy %",
         "95% CI (clustered t)", "s.e. by question", "s.e. by cluster",
         "exact 95% CI (1 seed)", "Wilson 95% CI (1 seed)",
         "decided by a tie (rule matters)"],
        [[str(r["configuration"]), str(r["method"]), str(r["seeds"]),
          str(r["questions"]), f"{r['accuracy']:.2f}",
          f"[{_f(r['ci_lo'], '{:.1f}')}, {_f(r['ci_hi'], '{:.1f}')}]",
          _f(r["se_question"]), _f(r["se_cluster"]),
          f"[{_f(r['exact_lo'], '{:.1f}')}, {_f(r['exact_hi'], '{:.1f}')}]",
          f"[{_f(r['wilson_lo'], '{:.1f}')}, {_f(r['wilson_hi'], '{:.1f}')}]",
          f"{r.get('ties', 0)} ({r.get('ties_matter', 0)})"]
         for _, r in a.iterrows()])]


def _comparison_lines(bench: str, c: pd.DataFrame) -> list[str]:
    ref = c["reference"].iloc[0]
    margin = float(c["margin"].iloc[0])
    return ["", f"### {bench}: paired differences against {ref}", "", *_table(
        ["configuration", "seeds paired", "pairs", "difference (points)",
         "95% CI (clustered t)", "clustered t p", "Holm p (t)", "discordant (+ / -)",
         "McNemar p", "Holm p", f"90% CI (TOST, ±{margin:g})", "equivalence"],
        [[str(r["configuration"]), str(r["seeds"]), str(r["pairs"]),
          f"{r['diff']:+.2f}", f"[{_f(r['ci_lo'], '{:+.1f}')}, "
          f"{_f(r['ci_hi'], '{:+.1f}')}]", _pv(r["p_clustered"]),
          _pv(r["p_clustered_holm"]),
          f"{r['b']} / {r['c']}" + ("" if r["can_reach_05"] else " (cannot reach "
                                    "p < 0.05)"),
          _pv(r["p_mcnemar"]), _pv(r["p_mcnemar_holm"]),
          f"[{_f(r['tost_lo'], '{:+.1f}')}, {_f(r['tost_hi'], '{:+.1f}')}]",
          f"{r['equivalence']} (p {_f(r['p_tost'], '{:.3f}')})"]
         for _, r in c.iterrows()])]


def _won_lost_lines(bench: str, w: pd.DataFrame) -> list[str]:
    guard = w["guardrail_saved"].notna().any()
    cols = ["configuration", "method", "reachable %", "selected %", "kept %",
            "lost %", "found %"]
    cols += ["guardrail saves / losses %"] if guard else []
    cols += ["accuracy %", *[f"{t} %" for t in FAILURES]]
    body = []
    for _, r in w.iterrows():
        v = [str(r["configuration"]), str(r["method"]), _f(r["reachable"], "{:.1f}"),
             _f(r["selected"], "{:.1f}"), _f(r["kept"], "{:.1f}"),
             _f(r["lost"], "{:.1f}"), _f(r["found"], "{:.1f}")]
        if guard:
            v += [f"{_f(r['guardrail_saved'], '{:.1f}')} / "
                  f"{_f(r['guardrail_lost'], '{:.1f}')}"]
        v += [_f(r["accuracy"], "{:.1f}"),
              *[_f(r[f"failure.{t}"], "{:.1f}") for t in FAILURES]]
        body.append(v)
    return ["", f"### {bench}: where accuracy is won and lost", "", *_table(cols, body)]


def _calibration_lines(bench: str, k: pd.DataFrame) -> list[str]:
    return ["", f"### {bench}: the belief's calibration (P(z*|O) against z* right)", "",
            *_table(["configuration", "n", "mean P(z*|O)", "z* right %", "ECE", "Brier"],
                    [[str(r["configuration"]), str(r["n"]), f"{r['mean_posterior']:.3f}",
                      f"{r['top_accuracy']:.1f}", f"{r['ece']:.3f}", f"{r['brier']:.3f}"]
                     for _, r in k.iterrows()])]


def to_markdown(acc: pd.DataFrame, comps: pd.DataFrame, power: Mapping[str, PowerLine],
                won: pd.DataFrame, calib: pd.DataFrame) -> str:
    """The sections, per benchmark: accuracy with its clustered interval, paired
    differences with McNemar and Holm, the power line, won and lost, the belief's
    calibration."""
    benches = list(dict.fromkeys([*acc.get("benchmark", []), *power]))
    parts = []
    for bench in benches:
        lines = []
        if not (a := _of(acc, bench)).empty:
            lines += _accuracy_lines(bench, a)
        if not (c := _of(comps, bench)).empty:
            lines += _comparison_lines(bench, c)
        if bench in power:
            lines += ["", power_text(power[bench])]
        if not (w := _of(won, bench)).empty:
            lines += _won_lost_lines(bench, w)
        if not (k := _of(calib, bench)).empty:
            lines += _calibration_lines(bench, k)
        if lines:
            parts.append("\n".join(lines))
    if not parts:
        return ""
    note = (
        "Seeds pooled per configuration (its name without seed=). Accuracy: the mean over "
        "(question, seed) pairs; its standard error is clustered by question (and by the "
        "benchmark's clusters where it declares them: LegalBench tasks, FinQA reports; the "
        "interval then uses those), the interval Student's t with clusters - 1 degrees of "
        "freedom (clipped to [0, 100]); with one seed the exact (Clopper-Pearson) and "
        "Wilson intervals too. "
        "Votes (majority and weighted vote, the belief-only decision) are scored under the "
        "tie rule named above the tables; 'decided by a tie': the problems (over seeds) "
        "whose vote or belief had several answers level at the top, and in brackets those "
        "whose tied answers were not all equally right. "
        "Differences: this configuration minus the reference, on the (question, seed) pairs "
        "both ran; the clustered t test is the one to read (with several seeds a question's "
        "pairs are not independent); McNemar: exact, over those pairs (– where an outcome is "
        "a tie's expected credit; 'cannot reach p < 0.05': even if every discordant pair "
        "went one way); Holm: over the benchmark's comparisons; * marks p < 0.05. "
        "Equivalence: two one-sided clustered t tests against the margin, with the 90% "
        "interval; 'equivalent' when it lies inside the margin, 'different' when the 95% "
        "interval excludes 0, else 'inconclusive'. Won and lost, % of samples: reachable "
        "(some independent answer right), selected (the selection right: DarkForest's z*, a "
        "vote's winner, else the plurality vote of the independent answers), kept / lost "
        "(it was right and the final answer is / is not), found (it was wrong and the final "
        "answer is right): accuracy = kept + found; guardrail saves / losses: overrides of a "
        "wrong / right coordinator; failure tags of the wrong samples (failure in "
        "samples.parquet). Calibration: ECE over 10 equal-width bins; plots: "
        "*_belief_calibration.png.")
    return "\n\n".join(parts) + "\n\n" + note + "\n"


def inference(table: pd.DataFrame, samples: Mapping[str, pd.DataFrame | None],
              reference: str | None = None, *, tie_rule: str = DEFAULT_TIE_RULE,
              margin: float = DEFAULT_MARGIN) -> dict[str, object]:
    """Every part, from build_table's table and the runs' samples: ``data`` (pooled),
    ``accuracy``, ``comparisons``, ``power``, ``won_lost``, ``calibration``, ``markdown``.
    ``reference``: the configuration the comparisons are against (default: each
    benchmark's reference DarkForest); ``tie_rule``: how the votes' ties are scored;
    ``margin``: the equivalence margin (points)."""
    data = pooled(table, samples, tie_rule)
    acc = accuracy_table(data)
    comps = comparisons(data, reference, margin)
    power = power_lines(data, comps, reference)
    won = won_lost_table(data)
    calib = calibration_table(data)
    md = to_markdown(acc, comps, power, won, calib)
    if md:
        md = f"Votes scored with tie rule `{tie_rule}`.\n\n" + md
    return {"data": data, "accuracy": acc, "comparisons": comps, "power": power,
            "won_lost": won, "calibration": calib, "markdown": md}


# ----------------------------------------------------------------------------- before a run

#: Test-split sizes of the benchmarks' default splits (docs/benchmarks.md; HumanEval's is
#: Graph-of-Agents' 50 problems), used when a sweep gives no ``limit``.
TEST_SIZES = {"math": 500, "humaneval": 50, "mmlu_pro": 2100, "gpqa": 198, "legalbench": 500,
              "finqa": 300}


def sweep_power(configs, sizes: Mapping[str, int] | None = None) -> list[str]:
    """The power line of each benchmark of a sweep before it runs (``df-ray validate``):
    its questions (``sizes[benchmark]`` when counted, else the configurations' ``limit``,
    else :data:`TEST_SIZES`), its run seeds and its comparisons (configurations without
    ``seed=`` less one), at the assumed discordance rate (``stats.ASSUMED_DISCORDANCE``);
    with several seeds between seeds as correlated as their question allows (rho 1, the
    conservative bound) and independent (rho 0)."""
    from df_ray.reporting.tables import seedless_name

    by_bench: dict[str, list] = {}
    for c in configs:
        by_bench.setdefault(str(c.benchmark), []).append(c)
    lines = []
    for bench, cs in by_bench.items():
        limits = [c.limit for c in cs if c.limit is not None]
        n = (sizes or {}).get(bench) or (min(limits) if limits else TEST_SIZES.get(bench))
        if not n:
            lines.append(f"  power {bench}: test split size unknown (give limit, or --data "
                         "to count it)")
            continue
        seeds = len({c.seed for c in cs})
        groups = len({seedless_name(c.name) for c in cs})
        pl = power_line(int(n), seeds, None, None, comparisons=max(groups - 1, 1))
        text = power_text(pl).removeprefix("Power: ")
        lines.append(f"  power {bench}: {text}")
        if seeds > 1:
            free = power_line(int(n), seeds, None, 0.0, comparisons=max(groups - 1, 1))
            mde = "none reachable" if math.isnan(free.mde) else f"{100 * free.mde:.1f} points"
            lines.append(f"    (with the seeds independent of their question, rho 0: {mde})")
    return lines
