"""Accuracy at equal compute: every configuration's accuracy against its tokens per sample,
Self-Consistency at k = 1..K from its cached samples, and DarkForest against
Self-Consistency at DarkForest's own tokens.

Points are the configurations' ``samples.parquet`` (accuracy with the report's 95%
interval, ``df_ray.statistics.bootstrap_ci``; mean ``total_tokens``). A
Self-Consistency configuration of one agent with K samples gives a curve: at each k its
expected accuracy over every k-subset of the K cached samples (:func:`maj_at_k`, per
problem, averaged), pass@k beside it, and k times the mean tokens of one sample. At k = K it
is the configuration's own accuracy (up to the grade of a vote's representative). The
majority vote and the belief-only decision over agents are drawn at pool size k = 1..n: the
mean over every k-subset of agents (the subsets section).

"DarkForest at Self-Consistency's tokens": the largest k whose expected tokens do not exceed
DarkForest's, compared per sample with DarkForest's outcomes (paired; the difference's 95%
interval by a paired percentile bootstrap, ``scipy.stats.bootstrap``; with k = K, where both
sides are 0/1, the report's exact McNemar test too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from df_ray.analysis.cached import Grader, Missing, lookup, parse_records
from df_ray.analysis.estimators import maj_at_k, pass_at_k
from df_ray.evaluation.context import build_context
from df_ray.methods.base import SampleState
from df_ray.methods.common import representative
from df_ray.statistics import bootstrap_ci, mcnemar


@dataclass
class ConfigPoint:
    name: str
    method: str
    correct: pd.Series  # per sample id
    tokens: pd.Series
    path: str


def read_point(cfg: Any, sweep_name: str) -> ConfigPoint | None:
    """A finished configuration's outcomes from its ``samples.parquet`` (verified); None
    when the file is not there."""
    from df_ray.pipeline.results import read_results, results_path

    path = results_path(cfg, sweep_name) / "samples.parquet"
    if not path.is_file():
        return None
    df = read_results(path, columns=["sample_id", "correct", "total_tokens"]).to_pandas()
    df = df.set_index("sample_id")
    return ConfigPoint(cfg.name, cfg.method, df["correct"].astype(bool),
                       df["total_tokens"].astype(float), str(path))


@dataclass
class SCCurve:
    name: str
    agent: str
    samples: int
    per_sample: dict[int, pd.Series]  # k -> expected correctness per sample id
    table: pd.DataFrame


def self_consistency_curve(cfg: Any, cache: Any, samples: Sequence[Any], grader: Grader,
                           missing: Missing) -> SCCurve | None:
    """A one-agent Self-Consistency configuration's k-curve from its cached samples (the
    requests its own ``plan`` makes); None (and the calls counted) when one is missing."""
    method = cfg.build_method()
    ctx = build_context(cfg, None)
    K = method.samples
    agent = method.agent_id or ctx.agents[0].id
    per: dict[int, list[float]] = {k: [] for k in range(1, K + 1)}
    passes: dict[int, list[float]] = {k: [] for k in range(1, K + 1)}
    tokens: list[float] = []
    ids = []
    ok = True
    for s in samples:
        st = SampleState(s)
        recs = lookup(cache, method.plan(0, st, ctx), 0, missing,
                      f"Self-Consistency sample ({cfg.name})", s)
        if recs is None:
            ok = False
            continue
        obs = parse_records(recs, ctx, s)
        answers = [o.answer if o.valid else None for o in obs]
        correct = {a: grader.correct(s, representative(obs, a)) for a in set(answers)
                   if a is not None}
        n_right = sum(1 for a in answers if a is not None and correct[a])
        for k in per:
            per[k].append(maj_at_k(answers, correct, k))
            passes[k].append(pass_at_k(len(answers), n_right, k))
        tokens.append(sum(0 if r.error else r.prompt_tokens + r.completion_tokens
                          for r in recs) / K)
        ids.append(s.id)
    if not ok:
        return None
    rows = []
    for k in per:
        lo, hi = bootstrap_ci(per[k])
        rows.append({"curve": cfg.name, "k": k, "accuracy": float(np.mean(per[k])),
                     "lo": lo, "hi": hi, "pass_at_k": float(np.mean(passes[k])),
                     "tokens_per_sample": k * float(np.mean(tokens))})
    return SCCurve(cfg.name, agent, K, {k: pd.Series(v, index=ids) for k, v in per.items()},
                   pd.DataFrame(rows))


def _paired_float(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    from scipy.stats import bootstrap

    d = np.sort(a.astype(float) - b.astype(float))
    if len(d) < 2 or np.all(d == d[0]):
        return float(d.mean()) if len(d) else float("nan"), float(d.mean()) if len(d) else \
            float("nan"), float(d.mean()) if len(d) else float("nan")
    res = bootstrap((d,), np.mean, n_resamples=2000, method="percentile",
                    random_state=np.random.default_rng(seed))
    return float(d.mean()), float(res.confidence_interval.low), \
        float(res.confidence_interval.high)


@dataclass
class FrontierSection:
    points: pd.DataFrame
    curves: pd.DataFrame
    at_darkforest_tokens: pd.DataFrame
    tokens_to_match: pd.DataFrame
    lines: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


def frontier_section(points: Sequence[ConfigPoint], curves: Sequence[SCCurve],
                     pool_curves: pd.DataFrame, reference: str | None) -> FrontierSection:
    """The frontier tables; ``pool_curves``: the subsets section's means by pool size
    (columns size, vote_mean, belief_only_mean, tokens_per_sample_mean), may be empty;
    ``reference``: the DarkForest configuration compared against."""
    prow = []
    for p in points:
        lo, hi = bootstrap_ci(p.correct.to_numpy())
        prow.append({"configuration": p.name, "method": p.method, "n": len(p.correct),
                     "accuracy": float(p.correct.mean()), "lo": lo, "hi": hi,
                     "tokens_per_sample": float(p.tokens.mean())})
    table = pd.DataFrame(prow)
    curve_rows = [c.table for c in curves]
    if not pool_curves.empty:
        for col, name in (("vote_mean", "majority vote over k agents"),
                          ("belief_only_mean", "belief only over k agents")):
            curve_rows.append(pd.DataFrame({
                "curve": name, "k": pool_curves["size"], "accuracy": pool_curves[col],
                "lo": np.nan, "hi": np.nan, "pass_at_k": np.nan,
                "tokens_per_sample": pool_curves["tokens_per_sample_mean"]}))
    curve_table = (pd.concat(curve_rows, ignore_index=True) if curve_rows
                   else pd.DataFrame(columns=["curve", "k", "accuracy", "lo", "hi",
                                              "pass_at_k", "tokens_per_sample"]))
    ref = next((p for p in points if p.name == reference), None)
    at_rows, match_rows = [], []
    lines = []
    if ref is None:
        lines.append("DarkForest against Self-Consistency: no DarkForest configuration's "
                     "samples.parquet to compare with")
    else:
        df_acc, df_tok = float(ref.correct.mean()), float(ref.tokens.mean())
        for c in curves:
            tok = c.table.set_index("k")["tokens_per_sample"]
            within = [k for k in tok.index if tok[k] <= df_tok]
            k = max(within) if within else 1
            sc = c.per_sample[k]
            common = ref.correct.index.intersection(sc.index, sort=False)
            a = ref.correct.loc[common].to_numpy().astype(float)
            b = sc.loc[common].to_numpy()
            diff, lo, hi = _paired_float(a, b)
            binary = k == c.samples and np.all((b == 0) | (b == 1))
            at_rows.append({"darkforest": ref.name, "self_consistency": c.name, "k": k,
                            "darkforest_tokens": df_tok, "sc_tokens": float(tok[k]),
                            "within_budget": bool(within), "darkforest_accuracy": a.mean(),
                            "sc_accuracy": float(b.mean()), "difference": diff,
                            "lo": lo, "hi": hi,
                            "mcnemar_p": mcnemar(a.astype(bool), b.astype(bool))
                            if binary else float("nan"), "n": len(common)})
        for name, acc_tok in _curves_for_matching(curves, pool_curves):
            reach = [(k, t) for k, a, t in acc_tok if a >= df_acc - 1e-12]
            k, t = reach[0] if reach else (None, float("nan"))
            match_rows.append({"method": name, "k": k, "tokens_per_sample": t,
                               "ratio_to_darkforest": t / df_tok if reach and df_tok else
                               float("nan"), "reached": bool(reach)})
        for p in points:
            if p.name == ref.name:
                continue
            acc = float(p.correct.mean())
            tok = float(p.tokens.mean())
            match_rows.append({"method": p.name, "k": None, "tokens_per_sample": tok,
                               "ratio_to_darkforest": tok / df_tok if df_tok else float("nan"),
                               "reached": acc >= df_acc - 1e-12})
    return FrontierSection(table, curve_table, pd.DataFrame(at_rows), pd.DataFrame(match_rows),
                           lines, [p.path for p in points])


def _curves_for_matching(curves: Sequence[SCCurve], pool_curves: pd.DataFrame
                         ) -> list[tuple[str, list[tuple[int, float, float]]]]:
    out = []
    for c in curves:
        out.append((c.name, [(int(r.k), float(r.accuracy), float(r.tokens_per_sample))
                             for r in c.table.itertuples()]))
    if not pool_curves.empty:
        out.append(("majority vote over k agents",
                    [(int(r.size), float(r.vote_mean), float(r.tokens_per_sample_mean))
                     for r in pool_curves.itertuples()]))
    return out


def frontier_plot(section: FrontierSection, path: Path, title: str) -> Path | None:
    """Accuracy against tokens per sample: configurations with their 95% intervals, the
    k-curves as lines."""
    if section.points.empty and section.curves.empty:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, g in section.curves.groupby("curve", sort=False):
        g = g.sort_values("k")
        ax.plot(g["tokens_per_sample"], 100 * g["accuracy"], marker=".", linestyle="-",
                label=f"{name} (k = 1..{int(g['k'].max())})")
        for r in g.itertuples():
            ax.annotate(str(int(r.k)), (r.tokens_per_sample, 100 * r.accuracy), fontsize=7,
                        xytext=(2, 2), textcoords="offset points")
    pts = section.points
    if not pts.empty:
        err = np.vstack([100 * (pts["accuracy"] - pts["lo"]), 100 * (pts["hi"] - pts["accuracy"])])
        ax.errorbar(pts["tokens_per_sample"], 100 * pts["accuracy"], yerr=err, fmt="o",
                    color="black", ecolor="gray", capsize=2, label="configurations (95% CI)")
        for r in pts.itertuples():
            ax.annotate(r.configuration, (r.tokens_per_sample, 100 * r.accuracy), fontsize=7,
                        xytext=(3, -8), textcoords="offset points")
    ax.set_xlabel("tokens per sample (all calls)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def self_consistency_configs(configs: Sequence[Any], pool_agents: Mapping[str, Any]
                             ) -> tuple[list[Any], list[str]]:
    """The Self-Consistency configurations a curve can be drawn for (one agent, the pool's
    agent as it is there), and a line for each one left out."""
    out, lines = [], []
    for c in configs:
        if c.method != "self_consistency":
            continue
        m = c.build_method()
        agent = m.agent_id or (c.agents[0].id if len(c.agents) == 1 else None)
        if agent is None:
            lines.append(f"{c.name}: Self-Consistency over several agents: no k-curve")
            continue
        if agent in pool_agents and c.agent_identities().get(agent) != pool_agents[agent]:
            lines.append(f"{c.name}: its agent {agent} differs from the pool's agent of that "
                         "id (model, sampling or prompt): left out, never mixed")
            continue
        out.append(c)
    return out, lines
