"""The paper's figures, drawn from an experiment's table and runs (matplotlib, Agg).

Which plots apply is read from the runs' parameters: a plot is drawn only when what it shows
varies in the experiment (e.g. the threshold plot when guardrail parameters vary).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from df_ray.reporting.paper import DEFAULTS, PAPER, PAPER_FINQA_SCALING

#: DarkForest's thresholds (its Args fields, logged as ``method_args.guardrail.*``).
GUARDRAIL = ("guardrail.k", "guardrail.tau_p", "guardrail.tau_m")
DF_ARGS = "params.method_args."


def _joined(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    keep = [c for c in runs.columns if c.startswith("params.")] + ["run_id", "n_agents"]
    return table.merge(runs[keep], on="run_id", how="left")


def _varies(df: pd.DataFrame, col: str) -> bool:
    return col in df and df[col].astype(str).nunique() > 1


def _grid(n: int):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.0 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _yerr(df: pd.DataFrame) -> np.ndarray:
    return np.vstack([(df["accuracy"] - df["ci_lo"]).clip(lower=0),
                      (df["ci_hi"] - df["accuracy"]).clip(lower=0)])


def accuracy_vs_tokens(table: pd.DataFrame, path: Path) -> Path | None:
    """Figure 3: accuracy against tokens per sample, one point per configuration; the paper's
    points (where it gives both) hollow."""
    benches = [b for b, g in table.groupby("benchmark", sort=False) if g["method"].nunique() > 1]
    if not benches:
        return None
    fig, axes = _grid(len(benches))
    for ax, bench in zip(axes, benches, strict=True):
        g = table[table["benchmark"] == bench]
        for method, m in g.groupby("method", sort=False):
            ax.errorbar(m["tokens_per_sample"], m["accuracy"], yerr=_yerr(m), fmt="o",
                        capsize=3, label=method)
        # one label per point: configurations that share their calls (a vote and DarkForest's
        # belief-only decision) sit on the same point, their names stacked, not overprinted
        names: dict[tuple[float, float], list[str]] = {}
        for _, r in g.iterrows():
            xy = (round(float(r["tokens_per_sample"]), 1), round(float(r["accuracy"]), 2))
            names.setdefault(xy, []).append(str(r["configuration"])[:24])
        for xy, ns in names.items():
            ax.annotate("\n".join(ns), xy, fontsize=7, xytext=(3, 3),
                        textcoords="offset points", va="bottom")
        for method, nums in PAPER.get(bench, {}).items():
            if "accuracy" in nums and "tokens" in nums:
                ax.scatter([nums["tokens"]], [nums["accuracy"]], facecolors="none",
                           edgecolors="gray", marker="s")
                ax.annotate(f"paper {method}", (nums["tokens"], nums["accuracy"]), fontsize=7,
                            color="gray", xytext=(3, -9), textcoords="offset points")
        ax.set_xlabel("tokens per sample")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"{bench}: accuracy vs tokens")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


def threshold_sensitivity(table: pd.DataFrame, runs: pd.DataFrame, path: Path) -> Path | None:
    """Table 9: accuracy and correct/wrong override rates against each guardrail threshold
    that varies (others held at the default where such runs exist, else averaged)."""
    df = _joined(table, runs)
    df = df[df["method"] == "darkforest"]
    panels = []
    for bench, g in df.groupby("benchmark", sort=False):
        for p in GUARDRAIL:
            if _varies(g, f"{DF_ARGS}{p}"):
                panels.append((bench, p, g))
    if not panels:
        return None
    fig, axes = _grid(len(panels))
    for ax, (bench, p, g) in zip(axes, panels, strict=True):
        sub = _like_reference(g)
        for other in GUARDRAIL:
            col = f"{DF_ARGS}{other}"
            if other != p and col in sub:
                at_default = sub[sub[col].astype(float) == float(DEFAULTS[other])]
                if not at_default.empty:
                    sub = at_default
        agg = sub.groupby(f"{DF_ARGS}{p}")[["accuracy", "correct_override_rate",
                                          "wrong_override_rate"]].mean().sort_index()
        x = agg.index.astype(float)
        ax.plot(x, agg["accuracy"], "o-", color="C0", label="accuracy")
        ax.set_xlabel(p)
        ax.set_ylabel("accuracy (%)", color="C0")
        ax2 = ax.twinx()
        ax2.plot(x, agg["correct_override_rate"], "s--", color="C2", label="correct overrides")
        ax2.plot(x, agg["wrong_override_rate"], "x--", color="C3", label="wrong overrides")
        ax2.set_ylabel("override rate (% of samples)")
        ax2.set_ylim(bottom=0)
        ax.axvline(float(DEFAULTS[p]), color="gray", lw=0.8, ls=":")
        ax.set_title(f"{bench}: {p}")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower left")
        ax.grid(alpha=0.3)
    return _save(fig, path)


SAME_AS_REFERENCE = (f"{DF_ARGS}ablation", f"{DF_ARGS}disclosure", f"{DF_ARGS}lazy",
                     "params.coordinator.backbone", f"{DF_ARGS}gamma", "n_agents")


def _like_reference(g: pd.DataFrame, cols=SAME_AS_REFERENCE) -> pd.DataFrame:
    """The rows that have the benchmark's reference run's values in ``cols`` (by default:
    the rows that differ from it in the guardrail only); all rows when it has none."""
    ref = g[g["reference"]]
    if ref.empty:
        return g
    keep = pd.Series(True, index=g.index)
    for col in cols:
        if col in g:
            keep &= g[col].astype(str) == str(ref.iloc[0][col])
    return g[keep]


def _differs_only_in(g: pd.DataFrame, col: str) -> pd.DataFrame:
    """The rows that differ from the benchmark's reference run in ``col`` alone: every other
    method argument, the coordinator and the number of agents as the reference has them (a
    sweep that also runs belief-only or no-guardrail variants keeps them out of a disclosure
    or calibration comparison)."""
    others = [c for c in g.columns if c.startswith(DF_ARGS)] + ["params.coordinator.backbone",
                                                                "n_agents"]
    return _like_reference(g, [c for c in others if c != col])


def bars_by(table: pd.DataFrame, runs: pd.DataFrame, param: str, path: Path, title: str,
            methods: tuple[str, ...] = ("darkforest",)) -> Path | None:
    """Accuracy bars (with 95% CI) per value of ``param`` among the runs that differ from the
    reference in ``param`` only, one panel per benchmark where it varies; tokens per sample
    written on each bar."""
    df = _joined(table, runs)
    df = df[df["method"].isin(methods)]
    col = param if param in df else f"params.{param}"
    df = pd.concat([_differs_only_in(g, col) for _, g in df.groupby("benchmark", sort=False)]
                   ) if not df.empty else df
    benches = [b for b, g in df.groupby("benchmark", sort=False) if _varies(g, col)]
    if not benches:
        return None
    fig, axes = _grid(len(benches))
    for ax, bench in zip(axes, benches, strict=True):
        g = df[df["benchmark"] == bench]
        labels = g[col].astype(str).tolist()
        x = np.arange(len(g))
        ax.bar(x, g["accuracy"], yerr=_yerr(g), capsize=4,
               color=["C1" if r else "C0" for r in g["reference"]])
        for xi, (_, r) in zip(x, g.iterrows(), strict=True):
            ax.annotate(f"{r['tokens_per_sample']:,.0f} tok", (xi, r["ci_lo"]), ha="center",
                        va="top", fontsize=7, xytext=(0, -2), textcoords="offset points")
        ax.set_xticks(x, labels, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"{bench}: {title}")
        ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def backbone_scaling(table: pd.DataFrame, runs: pd.DataFrame, path: Path) -> Path | None:
    """Figure 8: accuracy (and program accuracy) and tokens per sample against the number of
    agents; the paper's FinQA numbers as gray markers."""
    df = _joined(table, runs)
    df = df[df["method"] == "darkforest"]
    benches = [b for b, g in df.groupby("benchmark", sort=False) if g["n_agents"].nunique() > 1]
    if not benches:
        return None
    fig, axes = _grid(len(benches))
    for ax, bench in zip(axes, benches, strict=True):
        g = df[df["benchmark"] == bench].sort_values("n_agents")
        ax.errorbar(g["n_agents"], g["accuracy"], yerr=_yerr(g), fmt="o-", capsize=3,
                    color="C0", label="accuracy")
        if "prog_acc" in g and g["prog_acc"].notna().any():
            ax.plot(g["n_agents"], g["prog_acc"], "^-", color="C4", label="program accuracy")
        if bench == "finqa":
            ns = sorted(PAPER_FINQA_SCALING)
            ax.plot(ns, [PAPER_FINQA_SCALING[n]["accuracy"] for n in ns], "s:", color="gray",
                    mfc="none", label="paper exec")
            ax.plot(ns, [PAPER_FINQA_SCALING[n]["prog_acc"] for n in ns], "^:", color="gray",
                    mfc="none", label="paper prog")
        ax.set_xlabel("agents (backbones)")
        ax.set_ylabel("accuracy (%)")
        ax.set_xticks(sorted(g["n_agents"].unique()))
        ax2 = ax.twinx()
        ax2.plot(g["n_agents"], g["tokens_per_sample"], "x--", color="C3", label="tokens/sample")
        ax2.set_ylabel("tokens per sample")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower right")
        ax.set_title(f"{bench}: backbone scaling")
        ax.grid(alpha=0.3)
    return _save(fig, path)


def belief_calibration(beliefs: Mapping[tuple[str, str], tuple[np.ndarray, np.ndarray]],
                       path: Path, bins: int = 10) -> Path | None:
    """The belief's calibration, one row of panels per benchmark: the reliability diagram
    of P(z*|O) against whether z* was right (10 equal-width bins, the diagonal is perfect
    calibration, each configuration's ECE in its label) and the risk-coverage curve
    (accuracy of z* when answering only where P(z*|O) is at least a threshold, against the
    share answered). ``beliefs``: (benchmark, configuration) -> (posteriors, z* right), as
    ``inference.belief_outcomes`` gives them; None when there is none."""
    from df_ray.statistics import ece, reliability, risk_coverage

    benches = list(dict.fromkeys(b for b, _ in beliefs))
    if not benches:
        return None
    fig, axes = plt.subplots(len(benches), 2, figsize=(10.4, 4.0 * len(benches)),
                             squeeze=False)
    for (ax_r, ax_c), bench in zip(axes, benches, strict=True):
        ax_r.plot([0, 1], [0, 1], ls=":", color="gray", lw=0.8)
        for (b, name), (p, y) in beliefs.items():
            if b != bench:
                continue
            rel = reliability(p, y, bins)
            label = f"{name[:28]} (ECE {ece(p, y, bins):.3f}, n {len(p)})"
            ax_r.plot(rel["confidence"], rel["accuracy"], "o-", label=label)
            rc = risk_coverage(p, y)
            ax_c.plot(rc["coverage"], 100 * rc["accuracy"], "o-", ms=3, label=name[:28])
        ax_r.set_xlim(-0.02, 1.02)
        ax_r.set_ylim(-0.02, 1.02)
        ax_r.set_xlabel("P(z*|O) (bin mean)")
        ax_r.set_ylabel("share with z* right")
        ax_r.set_title(f"{bench}: reliability of the belief")
        ax_r.grid(alpha=0.3)
        ax_r.legend(fontsize=7, loc="upper left")
        ax_c.set_xlim(0, 1.02)
        ax_c.set_ylim(0, 102)
        ax_c.set_xlabel("coverage (share answered at P(z*|O) >= threshold)")
        ax_c.set_ylabel("accuracy of z* (%)")
        ax_c.set_title(f"{bench}: risk-coverage")
        ax_c.grid(alpha=0.3)
        ax_c.legend(fontsize=7, loc="lower left")
    return _save(fig, path)


def make_plots(table: pd.DataFrame, runs: pd.DataFrame, out_dir: Path,
               prefix: str, beliefs: Mapping[tuple[str, str], tuple[np.ndarray, np.ndarray]]
               | None = None) -> list[Path]:
    """Every plot that applies to the experiment, as PNG files in ``out_dir`` (with
    ``beliefs``, the belief's calibration too: :func:`belief_calibration`)."""
    out_dir = Path(out_dir)
    made = [
        accuracy_vs_tokens(table, out_dir / f"{prefix}_fig3_accuracy_vs_tokens.png"),
        threshold_sensitivity(table, runs, out_dir / f"{prefix}_table9_thresholds.png"),
        bars_by(table, runs, "method_args.ablation", out_dir / f"{prefix}_fig7_calibration_ablation.png",
                "calibration ablation"),
        backbone_scaling(table, runs, out_dir / f"{prefix}_fig8_backbone_scaling.png"),
        bars_by(table, runs, "coordinator.backbone",
                out_dir / f"{prefix}_fig9_coordinator.png", "coordinator backbone"),
        bars_by(table, runs, "method_args.disclosure", out_dir / f"{prefix}_table8_disclosure.png",
                "disclosure policy"),
        belief_calibration(beliefs or {}, out_dir / f"{prefix}_belief_calibration.png"),
    ]
    return [p for p in made if p is not None]
