"""What a run resolved on the Hugging Face Hub, and how a later sweep pins it.

A run records the commit each hub model and data set it loaded resolved to
(``provenance.model_commit.<backbone>``, ``provenance.data_commit.<repository>``: MLflow
parameters, and the ``df_ray.provenance`` metadata of its ``samples.parquet``).
``python -m df_ray.pipeline.pins RUN_ID`` (or a ``samples.parquet`` path) prints them as
``--set`` flags that pin a rerun to the same weights and data: ``backbones.<name>.revision``
and ``data_revision``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping
from typing import Any

#: The key of the provenance in a ``samples.parquet``'s schema metadata.
METADATA_KEY = b"df_ray.provenance"
MODEL = "provenance.model_commit."
DATA = "provenance.data_commit."


def resolved_commits(cfg: Any, task: Any) -> dict[str, str]:
    """The commits a configuration's hub models and data sets resolved to (data: those its
    task's repositories loaded in this process, unless it reads a local copy)."""
    from df_ray.engines.hub_models import model_commits
    from df_ray.tasks._common import is_local
    from df_ray.tasks.hub import resolved_commits as data_commits

    out = model_commits(sorted(cfg.backbones.items()))
    if not is_local(cfg.source):
        repos = list(getattr(task, "hub_repos", ()) or ())
        if not repos and getattr(task, "hub_name", None):
            repos = [task.hub_name]
        for repo, commit in data_commits(repos).items():
            out[f"{DATA}{repo}"] = commit
    return out


def set_flags(provenance: Mapping[str, str]) -> list[str]:
    """``--set`` flags that pin a sweep to the commits of one run's provenance."""
    flags = []
    for key, commit in sorted(provenance.items()):
        if key.startswith(MODEL) and commit not in ("local", "unresolved"):
            flags.append(f"backbones.{key[len(MODEL):]}.revision={commit}")
    data = sorted({c for k, c in provenance.items() if k.startswith(DATA)})
    if len(data) == 1:
        flags.append(f"data_revision={data[0]}")
    return [x for f in flags for x in ("--set", f)]


def from_results(path: str) -> dict[str, str]:
    """The provenance a ``samples.parquet`` carries in its metadata."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta.get(METADATA_KEY, b"{}"))


def from_run(run_id: str, tracking_uri: str | None = None) -> dict[str, str]:
    """The provenance parameters of an MLflow run."""
    from mlflow.tracking import MlflowClient

    params = MlflowClient(tracking_uri).get_run(run_id).data.params
    return {k: v for k, v in params.items() if k.startswith("provenance.")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m df_ray.pipeline.pins",
                                description="print --set flags pinning a sweep to a run's "
                                            "model and data commits")
    p.add_argument("run", help="an MLflow run id, or a samples.parquet path")
    p.add_argument("--tracking-uri", default=None)
    a = p.parse_args(argv)
    prov = (from_results(a.run) if a.run.endswith(".parquet")
            else from_run(a.run, a.tracking_uri))
    flags = set_flags(prov)
    if not flags:
        print(f"{a.run}: no resolved commits recorded", file=sys.stderr)
        return 1
    print(shlex.join(flags))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
