"""The report's inference on a 3-seed sweep logged to a real MLflow store in the tracker's
format: accuracy with standard errors clustered by question across seeds, paired
differences with the exact McNemar and Holm p, the power line, where accuracy is won and
lost, the belief's calibration and the calls without a recorded stop reason. Every figure
is checked against statsmodels on the same pooled outcomes or by hand.

10 questions s0..s9; a configuration is right on the first k of them:

    seed   darkforest   single   majority (seed 0 only)
    0      8            5        3
    1      6            5
    2      7            8

DarkForest's z* is right on s0..s8 in every seed (kept where the run is right, lost on
the rest of s0..s8, never found); P(z*|O) is 0.9 on s0..s4 and s9, 0.5 on s5..s8: over
the 30 (question, seed) pairs, bin 0.9 holds 18 (15 right: 5/6), bin 0.5 holds 12 (all
right), so ECE = (18 |5/6 - 0.9| + 12 |1 - 0.5|) / 30 = 0.24 and Brier = (15 * 0.01 +
3 * 0.81 + 12 * 0.25) / 30 = 0.186. Each DarkForest row has 2 calls without a recorded
stop reason, 1 of them short of max_tokens: 20 (10) per run.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from df_ray.config import SweepConfig
from df_ray.methods.result_columns import won_and_lost
from df_ray.reporting import build_report
from df_ray.reporting.inference import accuracy_table
from df_ray.statistics import min_detectable_difference
from tests.reporting.logged_sweep import log_sweep

N = 10
RIGHT = {("darkforest", 0): 8, ("darkforest", 1): 6, ("darkforest", 2): 7,
         ("single", 0): 5, ("single", 1): 5, ("single", 2): 8, ("weighted_vote", 0): 3}
EXPERIMENT = "inference-test"


def _rows(method: str, seed: int) -> list[dict]:
    rows = []
    is_df = method == "darkforest"
    for i in range(N):
        ok = i < RIGHT[(method, seed)]
        sel = i < 9 if is_df else ok
        own = {"trusted": False, "overridden": False, "coordinator_correct": ok,
               "coordinator_called": True, "top_posterior": 0.5 if 5 <= i <= 8 else 0.9
               } if is_df else {}
        rows.append({"sample_id": f"s{i}", "correct": ok, "scores": json.dumps({"acc": ok}),
                     "final_answer": "A" if ok else "B", "any_agent_correct": i < 9,
                     **won_and_lost(correct=ok, reachable=i < 9, selected_correct=sel,
                                    own=own),
                     "n_calls": 4, "n_fresh_calls": 4, "n_errors": 0, "n_refused": 0,
                     "n_truncated": 1 if is_df else 0, "n_no_finish_reason": 2 if is_df else 0,
                     "n_stop_unknown": 1 if is_df else 0,
                     "truncation": json.dumps({"a1": [4, 1 if is_df else 0]}),
                     "agent_tokens": 300, "coordinator_tokens": 100, "other_tokens": 0,
                     "total_tokens": 400, "t_cross": 0, "detail": "{}", **own})
    return rows


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from mlflow.tracking import MlflowClient

    tmp = tmp_path_factory.mktemp("inference")
    uri = f"sqlite:///{tmp}/mlflow.db"
    MlflowClient(tracking_uri=uri).create_experiment(EXPERIMENT,
                                                     artifact_location=str(tmp / "artifacts"))
    base = {"benchmark": "gpqa",
            "backbones": {f"b{i}": {"kind": "scripted", "model": f"m{i}"} for i in (1, 2, 3)},
            "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2, 3)],
            "coordinator": {"id": "coord", "backbone": "b1"},
            "tracking": {"uri": uri, "experiment": EXPERIMENT}}
    sweep = SweepConfig(name="inference-sweep", base=base, seeds=[0, 1, 2],
                        runs=[{"name": "darkforest"},
                              {"name": "single", "method": "single",
                               "method_args": {"agent": "a1"}}])
    log_sweep(uri, EXPERIMENT, sweep, tmp, lambda cfg: _rows(cfg.method, cfg.seed))
    vote = SweepConfig(name="inference-vote", base=base,
                       runs=[{"name": "majority", "method": "weighted_vote",
                              "method_args": {"majority": True}}])
    log_sweep(uri, EXPERIMENT, vote, tmp, lambda cfg: _rows(cfg.method, cfg.seed))
    paths = build_report(EXPERIMENT, uri, tmp / "report", n_boot=200, log=True)
    return tmp / "report", paths, uri


def _outcomes(method: str) -> pd.DataFrame:
    seeds = [s for m, s in RIGHT if m == method]
    return pd.DataFrame([{"q": f"s{i}", "seed": s, "y": float(i < RIGHT[(method, s)])}
                         for s in seeds for i in range(N)])


def _ols_cluster(y, groups):
    import statsmodels.api as sm

    codes = pd.factorize(pd.Series(groups))[0]
    return sm.OLS(np.asarray(y, float), np.ones((len(y), 1))).fit(
        cov_type="cluster", cov_kwds={"groups": codes}, use_t=True)


def test_accuracy_with_standard_errors_clustered_by_question(report):
    out, *_ = report
    acc = pd.read_csv(out / f"{EXPERIMENT}_accuracy.csv").set_index("configuration")
    for name, method in (("darkforest", "darkforest"), ("single", "single")):
        d = _outcomes(method)
        fit = _ols_cluster(d["y"], d["q"])
        r = acc.loc[name]
        assert (r["seeds"], r["questions"], r["n"]) == (3, 10, 30)
        assert r["accuracy"] == pytest.approx(100 * fit.params[0])
        assert r["se_question"] == pytest.approx(100 * fit.bse[0])
        lo, hi = fit.conf_int()[0]  # a share's interval: clipped to [0, 100]
        assert (r["ci_lo"], r["ci_hi"]) == pytest.approx((max(0, 100 * lo), min(100, 100 * hi)))
        assert math.isnan(r["exact_lo"])  # several seeds: no exact interval of the pool
    from statsmodels.stats.proportion import proportion_confint

    one = acc.loc["majority"]  # one seed: the exact and Wilson intervals of 3 in 10
    assert (one["exact_lo"], one["exact_hi"]) == pytest.approx(
        [100 * v for v in proportion_confint(3, 10, method="beta")], rel=1e-4)
    assert (one["wilson_lo"], one["wilson_hi"]) == pytest.approx(
        [100 * v for v in proportion_confint(3, 10, method="wilson")], rel=1e-4)


def test_paired_differences_mcnemar_and_holm(report):
    out, paths, _ = report
    comps = pd.read_csv(out / f"{EXPERIMENT}_comparisons.csv").set_index("configuration")
    assert set(comps.index) == {"single", "majority"}
    assert set(comps["reference"]) == {"darkforest"}
    a, b = _outcomes("single"), _outcomes("darkforest")
    m = a.merge(b, on=["q", "seed"], suffixes=("", "_ref"))
    d = m["y"] - m["y_ref"]
    fit = _ols_cluster(d, m["q"])
    r = comps.loc["single"]
    assert (r["seeds"], r["pairs"]) == (3, 30)
    assert r["diff"] == pytest.approx(100 * fit.params[0])  # (18 - 21) / 30 = -10 points
    assert r["diff"] == pytest.approx(-10.0)
    lo, hi = fit.conf_int()[0]
    assert (r["ci_lo"], r["ci_hi"]) == pytest.approx((100 * lo, 100 * hi), rel=1e-4)
    assert r["p_clustered"] == pytest.approx(fit.pvalues[0], rel=1e-4)
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.multitest import multipletests

    # discordant: single right / df wrong on seed 2's s7; the other way seed 0's s5..s7
    # and seed 1's s5: b = 1, c = 4 -> exact p = 2 * P(X <= 1 | Bin(5, 1/2)) = 12 / 32
    assert (r["b"], r["c"]) == (1, 4)
    table = [[int(((m.y == 1) & (m.y_ref == 1)).sum()), 1], [4, int(((m.y == 0) & (
        m.y_ref == 0)).sum())]]
    assert r["p_mcnemar"] == pytest.approx(mcnemar(table, exact=True).pvalue)
    assert r["p_mcnemar"] == pytest.approx(12 / 32)
    # majority (seed 0 only) pairs with darkforest's seed 0: 5 discordant, all df's: 1/16
    v = comps.loc["majority"]
    assert (v["seeds"], v["pairs"], v["b"], v["c"]) == (1, 10, 0, 5)
    assert v["p_mcnemar"] == pytest.approx(2 / 32)
    holm = multipletests([r["p_mcnemar"], v["p_mcnemar"]], method="holm")[1]
    assert (r["p_mcnemar_holm"], v["p_mcnemar_holm"]) == pytest.approx(tuple(holm))
    # by hand: 2 * 0.0625 = 0.125 for the smaller; max(0.375, 0.125) for the larger
    assert (r["p_mcnemar_holm"], v["p_mcnemar_holm"]) == pytest.approx((0.375, 0.125))
    md = paths[1].read_text()
    assert "### gpqa: paired differences against darkforest" in md
    assert "| single | 3 | 30 | -10.00 |" in md
    # 5 discordant pairs: even all one way would give p 0.0625, and the table says so
    assert r["min_p_mcnemar"] == pytest.approx(2 / 32) and not r["can_reach_05"]
    assert "| 1 / 4 (cannot reach p < 0.05) | 0.375 | 0.375 |" in md
    # equivalence within +-5 points: the 90% clustered interval and statsmodels' TOST
    assert r["margin"] == 5.0
    lo90, hi90 = fit.conf_int(alpha=0.10)[0]
    assert (r["tost_lo"], r["tost_hi"]) == pytest.approx((100 * lo90, 100 * hi90), rel=1e-4)
    assert r["equivalence"] == "inconclusive" and r["p_tost"] > 0.05
    assert "90% CI (TOST, ±5)" in md and "inconclusive (p " in md


def test_power_line(report):
    out, paths, _ = report
    power = pd.read_csv(out / f"{EXPERIMENT}_power.csv").iloc[0]
    comps = pd.read_csv(out / f"{EXPERIMENT}_comparisons.csv")
    # the line is for the comparisons over all three seeds: single's (5 of 30 discordant)
    psi = float(comps.set_index("configuration").loc["single", "discordance"])
    assert psi == pytest.approx(1 / 6) and power["discordance"] == pytest.approx(psi)
    assert (power["n"], power["seeds"], power["comparisons"]) == (10, 3, 2)
    single = comps.set_index("configuration").loc["single"]
    rho = min(1.0, max(0.0, (single["design_effect"] - 1) / 2))
    n_eff = 10 * 3 / (1 + 2 * rho)
    assert power["mde"] == pytest.approx(min_detectable_difference(n_eff, psi), nan_ok=True)
    md = paths[1].read_text()
    assert "Power: 10 questions x 3 run seeds" in md
    assert "It applies to the comparisons of single." in md


def test_won_and_lost_and_calibration(report):
    out, paths, _ = report
    won = pd.read_csv(out / f"{EXPERIMENT}_won_lost.csv").set_index("configuration")
    df = won.loc["darkforest"]
    assert df["accuracy"] == pytest.approx(100 * 21 / 30)
    assert df["kept"] + df["found"] == pytest.approx(df["accuracy"])
    assert df["selected"] == pytest.approx(90.0) and df["found"] == 0
    assert df["lost"] == pytest.approx(100 * (27 - 21) / 30)
    assert df["failure.coordinator_lost"] == pytest.approx(df["lost"])
    assert df["failure.unreachable"] == pytest.approx(10.0)  # s9, every seed
    assert df["guardrail_saved"] == 0 and df["guardrail_lost"] == 0
    one = won.loc["single"]
    assert math.isnan(one["guardrail_saved"])  # no guardrail
    cal = pd.read_csv(out / f"{EXPERIMENT}_calibration.csv").set_index("configuration")
    assert list(cal.index) == ["darkforest"]
    assert cal.loc["darkforest", "ece"] == pytest.approx(0.24)
    assert cal.loc["darkforest", "brier"] == pytest.approx(0.186)
    png = out / f"{EXPERIMENT}_belief_calibration.png"
    assert png in paths and png.stat().st_size > 0
    md = paths[1].read_text()
    assert "### gpqa: where accuracy is won and lost" in md
    assert "### gpqa: the belief's calibration" in md
    # the calls without a recorded stop reason, per configuration and in the note
    assert "calls without a stop reason (unknown)" in md and "| 20 (10) |" in md


def test_benchmark_clusters_are_used_where_declared():
    rows = []
    for s in (0, 1):
        for i in range(6):
            rows.append({"benchmark": "legalbench", "group": "df", "method": "darkforest",
                         "seed": s, "reference": True, "sample_id": f"q{i}",
                         "cluster": f"task{i // 2}", "correct": (i + s) % 3 != 0})
    acc = accuracy_table(pd.DataFrame(rows)).iloc[0]
    d = pd.DataFrame(rows)
    fit = _ols_cluster(d["correct"].astype(float), d["cluster"])
    assert acc["cluster_by"] == "benchmark cluster" and acc["clusters"] == 3
    assert acc["se_cluster"] == pytest.approx(100 * fit.bse[0])
    assert acc["ci_lo"] == pytest.approx(max(0, 100 * fit.conf_int()[0][0]))
    by_q = _ols_cluster(d["correct"].astype(float), d["sample_id"])
    assert acc["se_question"] == pytest.approx(100 * by_q.bse[0])


def test_the_table_numbers_are_logged_on_every_configuration_run(report):
    from mlflow.tracking import MlflowClient

    out, _, uri = report
    acc = pd.read_csv(out / f"{EXPERIMENT}_accuracy.csv").set_index("configuration")
    comps = pd.read_csv(out / f"{EXPERIMENT}_comparisons.csv").set_index("configuration")
    power = pd.read_csv(out / f"{EXPERIMENT}_power.csv").iloc[0]
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(EXPERIMENT)
    runs = [r for r in client.search_runs([exp.experiment_id])
            if r.data.tags.get("df_ray.kind") == "configuration"]
    by_name: dict[str, list] = {}
    for r in runs:
        by_name.setdefault(r.info.run_name.split(" seed=")[0], []).append(r)
    assert {k: len(v) for k, v in by_name.items()} == {"darkforest": 3, "single": 3,
                                                       "majority": 1}
    for name, rs in by_name.items():
        for r in rs:  # each seed's run: its configuration's pooled figures
            m = r.data.metrics
            assert m["report.accuracy"] == pytest.approx(acc.loc[name, "accuracy"])
            assert m["report.accuracy_ci_low"] == pytest.approx(acc.loc[name, "ci_lo"])
            assert m["report.seeds"] == acc.loc[name, "seeds"]
            assert m["report.min_detectable_diff"] == pytest.approx(100 * power["mde"],
                                                                    nan_ok=True)
            if name == "darkforest":
                assert r.data.tags["df_ray.report.reference"] == "self"
                assert "report.diff" not in m
                continue
            assert r.data.tags["df_ray.report.reference"] == "darkforest"
            for col, metric in (("diff", "report.diff"), ("p_mcnemar", "report.p_mcnemar"),
                                ("p_mcnemar_holm", "report.p_mcnemar_holm"),
                                ("ci_lo", "report.diff_ci_low"), ("p_tost", "report.p_tost"),
                                ("tost_lo", "report.tost_low")):
                assert m[metric] == pytest.approx(comps.loc[name, col], rel=1e-6), metric
            assert m["report.comparisons"] == 2


def test_another_reference_compares_every_configuration_with_it(report, tmp_path):
    from statsmodels.stats.contingency_tables import mcnemar

    _, _, uri = report
    build_report(EXPERIMENT, uri, tmp_path, n_boot=50, reference="single")
    comps = pd.read_csv(tmp_path / f"{EXPERIMENT}_comparisons.csv").set_index("configuration")
    assert set(comps.index) == {"darkforest", "majority"} and set(comps["reference"]) == {"single"}
    a, b = _outcomes("darkforest"), _outcomes("single")
    m = a.merge(b, on=["q", "seed"], suffixes=("", "_ref"))
    yes, no = m["y"] == 1, m["y_ref"] == 1
    table = [[int((yes & no).sum()), int((yes & ~no).sum())],
             [int((~yes & no).sum()), int((~yes & ~no).sum())]]
    assert comps.loc["darkforest", "p_mcnemar"] == pytest.approx(
        mcnemar(table, exact=True).pvalue)
    assert comps.loc["darkforest", "diff"] == pytest.approx(100 * (m["y"] - m["y_ref"]).mean())
    build_report(EXPERIMENT, uri, tmp_path / "none", n_boot=50, reference="no-such")
    assert not (tmp_path / "none" / f"{EXPERIMENT}_comparisons.csv").exists()  # nothing paired
