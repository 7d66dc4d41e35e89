"""`df-ray analyze` on a finished scripted sweep file."""

from __future__ import annotations

import yaml

from df_ray.cli import main
from tests.analysis.sweep import RUNS, base, run_sweep, sweep_config


def test_df_ray_analyze_prints_every_section_and_writes_the_files(tmp_path, capsys):
    run_sweep(sweep_config(tmp_path))
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "analysis", "base": base(tmp_path), "runs": RUNS}))
    out = tmp_path / "out"
    assert main(["analyze", "--config", str(path), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for heading in ("### Accuracy against tokens", "### Agent subsets", "Shapley values",
                    "### Guardrail thresholds", "### Generation that stops"):
        assert heading in text
    assert "not logged to MLflow" in text  # run in process: no sweep run to log to
    for name in ("analysis.md", "mmlu_pro_frontier.png", "mmlu_pro_subsets.csv",
                 "mmlu_pro_thresholds.csv", "mmlu_pro_early_stop.csv"):
        assert (out / name).is_file(), name
    assert "ties broken uniformly" in (out / "analysis.md").read_text()  # the default
    first = tmp_path / "first"
    assert main(["analyze", "--config", str(path), "--out", str(first), "--tie-rule",
                 "first"]) == 0
    assert "ties broken as the methods break them (`first`" in (
        first / "analysis.md").read_text()


def test_df_ray_analyze_without_a_cache_says_so_in_one_line(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "analysis", "base": base(tmp_path), "runs": RUNS}))
    assert main(["analyze", "--config", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("df-ray analyze: no generation cache at ")
