"""Reports of a hand-made logged sweep (tests/reporting/logged_sweep.py: expected values
computed there by hand)."""

from __future__ import annotations

import matplotlib.image as mpimg
import pandas as pd
import pytest

from df_ray.reporting import build_report, collect_runs, load_samples, main, sample_detail
from df_ray.reporting.runs import stable_order
from tests.reporting.logged_sweep import CORRECT, P_MAJORITY, P_SINGLE, N, make_logged_sweep


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("logged")
    return (tmp, *make_logged_sweep(tmp))


def test_collect_runs(logged):
    _, uri, exp, sweep = logged
    runs = collect_runs(uri, exp)
    # ordered by name (one benchmark, one seed), not by the order they were logged
    assert list(runs["name"]) == sorted(c.name for c in sweep.expand())
    assert list(runs["name"]) != [c.name for c in sweep.expand()]
    assert set(runs["sweep"]) == {"report-test-sweep"}
    assert list(runs["n_agents"]) == [3, 4, 3, 3, 3, 3, 3, 3]
    row = runs.set_index("name").loc["df tau_p=0.8"]
    assert row["params.method_args.guardrail.tau_p"] == 0.8
    assert row["params.method_args.guardrail.k"] == 2
    assert row["metrics.accuracy"] == pytest.approx(14 / N)
    assert row["tags.df_ray.method"] == "darkforest"
    assert runs.set_index("name").loc["majority", "params.method_args.majority"] is True
    samples = load_samples(runs.iloc[0])
    assert len(samples) == N and samples["correct"].sum() == 15
    assert sample_detail(samples.iloc[0])["extra"]["belief"]["top"] == "A"
    with pytest.raises(KeyError):
        collect_runs(uri, "no-such-experiment")


def test_run_order_does_not_depend_on_log_order(logged):
    _, uri, exp, _ = logged
    runs = collect_runs(uri, exp)
    backwards = runs.iloc[::-1].assign(start_time=runs["start_time"].iloc[::-1].to_numpy())
    again = stable_order(backwards)
    assert list(again["run_id"]) == list(runs["run_id"])
    seeded = runs.assign(**{"params.seed": [1, 0] * (len(runs) // 2)})
    assert list(stable_order(seeded)["params.seed"]) == [0] * 4 + [1] * 4


def test_rerun_of_the_same_sweep_is_not_counted_twice(tmp_path):
    uri, exp, _ = make_logged_sweep(tmp_path)
    make_logged_sweep(tmp_path)  # logged again: same fingerprints
    assert len(collect_runs(uri, exp)) == len(CORRECT)
    assert len(collect_runs(uri, exp, latest_only=False)) == 2 * len(CORRECT)


def test_build_report(logged):
    tmp, uri, exp, _ = logged
    paths = build_report(exp, uri, tmp / "report")
    names = {p.name for p in paths}
    assert {f"{exp}_report.md", f"{exp}_table.md", f"{exp}_table.csv"} <= names
    # Plots chosen from what varies: methods (Fig. 3), guardrail (Table 9), ablation (Fig. 7),
    # number of agents (Fig. 8), coordinator backbone (Fig. 9); disclosure does not vary.
    pngs = sorted(p for p in paths if p.suffix == ".png")
    assert [p.name.removeprefix(f"{exp}_") for p in pngs] == sorted([
        "fig3_accuracy_vs_tokens.png", "table9_thresholds.png", "fig7_calibration_ablation.png",
        "fig8_backbone_scaling.png", "fig9_coordinator.png"])
    for p in pngs:
        assert p.stat().st_size > 0
        img = mpimg.imread(p)
        assert img.shape[0] > 100 and img.shape[1] > 100

    table = pd.read_csv(tmp / "report" / f"{exp}_table.csv").set_index("configuration")
    assert list(table.index) == sorted(CORRECT)  # by name, as collect_runs orders them
    for name, correct in CORRECT.items():
        assert table.loc[name, "accuracy"] == pytest.approx(100 * len(correct) / N)
        assert table.loc[name, "ci_lo"] <= table.loc[name, "accuracy"] <= table.loc[name, "ci_hi"]
    assert bool(table.loc["df", "reference"]) and pd.isna(table.loc["df", "p_vs_darkforest"])
    assert table.loc["single", "p_vs_darkforest"] == pytest.approx(P_SINGLE, abs=1e-4)
    assert not table.loc["single", "significant"]
    assert table.loc["majority", "p_vs_darkforest"] == pytest.approx(P_MAJORITY, abs=1e-4)
    assert table.loc["majority", "significant"]
    assert table.loc["df 4 agents", "p_vs_darkforest"] == pytest.approx(1.0)
    # The paper's GPQA DarkForest number (39.90, 3.2k tokens) beside the reference row only.
    assert table.loc["df", "paper_accuracy"] == pytest.approx(39.90)
    assert table.loc["df", "paper_tokens"] == pytest.approx(3200)
    assert pd.isna(table.loc["df tau_p=0.8", "paper_accuracy"])
    # Per-sample accounting: 4 calls, 300 agent + 80 coordinator tokens; overrides 3/20 of
    # which 2 correct (q00, q01) and 1 wrong (q19).
    assert table.loc["df", "calls_per_sample"] == pytest.approx(4.0)
    assert table.loc["df", "tokens_per_sample"] == pytest.approx(380)
    assert table.loc["df", "override_rate"] == pytest.approx(15.0)
    assert table.loc["df", "correct_override_rate"] == pytest.approx(10.0)
    assert table.loc["df", "wrong_override_rate"] == pytest.approx(5.0)

    md = (tmp / "report" / f"{exp}_table.md").read_text()
    assert "| majority | weighted_vote | 20 | 25.00" in md and "0.002 *" in md
    assert "| df | darkforest | 20 | 75.00" in md and "| ref |" in md
    report = (tmp / "report" / f"{exp}_report.md").read_text()
    assert f"![{exp}_fig3_accuracy_vs_tokens]({exp}_fig3_accuracy_vs_tokens.png)" in report


def test_report_cli(logged, capsys):
    tmp, uri, exp, _ = logged
    out = tmp / "cli"
    assert main(["--experiment", exp, "--tracking-uri", uri, "--out", str(out),
                 "--n-boot", "200"]) == 0
    assert (out / f"{exp}_table.csv").is_file()
    assert "weighted_vote" in capsys.readouterr().out
    assert main(["--experiment", "missing", "--tracking-uri", uri, "--out", str(out)]) == 2
    assert "no MLflow experiment 'missing'" in capsys.readouterr().err


def test_the_reference_is_the_plainest_default_darkforest_in_any_row_order():
    from df_ray.reporting.tables import reference_run

    rows = pd.DataFrame([
        {"run_id": "fit", "name": "darkforest behaviour fitted guardrail seed=1",
         "method": "darkforest", "n_agents": 3, "params.method_args.guardrail.fit": True,
         "params.benchmark_args.candidates": "behaviour"},
        {"run_id": "beh", "name": "darkforest behaviour seed=1", "method": "darkforest",
         "n_agents": 3, "params.benchmark_args.candidates": "behaviour"},
        {"run_id": "mod", "name": "darkforest moderate seed=1", "method": "darkforest",
         "n_agents": 3, "params.method_args.disclosure": "moderate"},
        {"run_id": "plain", "name": "darkforest seed=1", "method": "darkforest", "n_agents": 3},
        {"run_id": "vote", "name": "majority_vote seed=1", "method": "weighted_vote",
         "n_agents": 3},
    ])
    assert reference_run(rows) == reference_run(rows.iloc[::-1]) == "plain"
    assert reference_run(rows[rows["run_id"] != "plain"]) == "beh"
    assert reference_run(rows[rows["run_id"].isin(["mod", "vote"])]) == "mod"
