"""The analysis in ``df-ray report``: a sweep run that ``df-ray analyze`` logged its analysis
to (artifacts ``analysis/``) gets that analysis appended to the experiment's report, its
plots copied beside the report."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ARTIFACT_DIR = "analysis"


def analysis_section(runs: Any, out: Path) -> list[str]:
    """Markdown lines of every logged analysis of the runs' sweeps ([] when there is none);
    its files are downloaded into ``out/analysis-<n>/``, n the sweep's place among the runs'
    sweeps (their order is the report's: not an MLflow run id, which differs between two
    stores holding the same runs, so that a replay writes the same report)."""
    if runs is None or runs.empty or "parent_run_id" not in runs:
        return []
    lines: list[str] = []
    parents = dict.fromkeys(p for p in runs["parent_run_id"] if isinstance(p, str) and p)
    for n, parent in enumerate(parents, 1):
        uri = runs.loc[runs["parent_run_id"] == parent, "tracking_uri"].iloc[0]
        try:
            import mlflow.artifacts

            os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
            local = Path(mlflow.artifacts.download_artifacts(
                run_id=parent, artifact_path=ARTIFACT_DIR, tracking_uri=uri,
                dst_path=str(out / f"analysis-{n}")))
        except Exception:  # no analysis logged for this sweep
            continue
        md = local / "analysis.md"
        if not md.is_file():
            continue
        rel = os.path.relpath(local, out)
        text = md.read_text()
        for png in local.glob("*.png"):
            text = text.replace(f"]({png.name})", f"]({rel}/{png.name})")
        # one heading level down: the analysis is a section of the report
        lines += ["", "\n".join("#" + ln if ln.startswith("#") else ln
                                for ln in text.splitlines())]
    return lines
