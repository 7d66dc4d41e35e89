"""`df-ray report` appends the analysis that `df-ray analyze` logged to the sweep's run."""

from __future__ import annotations

import pandas as pd

from df_ray.analysis.report_section import analysis_section


def test_a_logged_analysis_becomes_a_section_of_the_report(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("e", artifact_location=str(tmp_path / "artifacts"))
    parent = client.create_run(exp, run_name="sweep").info.run_id
    folder = tmp_path / "analysis"
    folder.mkdir()
    (folder / "analysis.md").write_text("# Analysis of s\n\n## math\n\n![f](math_frontier.png)\n")
    (folder / "math_frontier.png").write_bytes(b"png")
    client.log_artifacts(parent, str(folder), artifact_path="analysis")
    other = client.create_run(exp, run_name="no analysis").info.run_id
    runs = pd.DataFrame({"parent_run_id": [parent, parent, other],
                         "tracking_uri": [uri, uri, uri]})
    out = tmp_path / "report"
    out.mkdir()
    text = "\n".join(analysis_section(runs, out))
    assert "## Analysis of s" in text and "### math" in text
    assert "](analysis-1/analysis/math_frontier.png)" in text  # not a run id: replays agree
    assert (out / "analysis-1" / "analysis" / "math_frontier.png").is_file()
    assert analysis_section(pd.DataFrame({"parent_run_id": [other], "tracking_uri": [uri]}),
                            out) == []
