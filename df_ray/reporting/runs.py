"""Reading logged sweeps back from MLflow.

The tracker (``df_ray.tracking``) logs one run per configuration, tagged ``df_ray.kind =
configuration``, ``df_ray.fingerprint``, ``df_ray.method`` and ``df_ray.benchmark``, with the
flattened config as parameters (JSON-encoded values, strings as is), the metrics of
``df_ray.evaluation.metrics`` and the per-sample table ``samples.parquet`` as an artifact
(schema: the generic fields of ``df_ray.evaluation.scoring.ResultRow``, then the columns
of the configuration's method, ``Method.result_columns``).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import pandas as pd

CONFIG_KIND = "configuration"
SAMPLES_ARTIFACT = "samples.parquet"


def _decode(v: str) -> Any:
    try:
        return json.loads(v)
    except (TypeError, ValueError):
        return v


def _client(tracking_uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def collect_runs(tracking_uri: str, experiment: str, *, latest_only: bool = True) -> pd.DataFrame:
    """One row per FINISHED configuration run of ``experiment``, ordered by benchmark, run
    seed, configuration name and fingerprint (:func:`stable_order`), never by when a run was
    logged, so that two stores holding the same runs give the same tables.

    Columns: ``run_id``, ``name`` (the configuration name), ``method``, ``benchmark``,
    ``fingerprint``, ``parent_run_id``, ``sweep`` (the parent run's name), ``start_time``,
    ``n_agents``, ``agents`` (comma-joined ids), ``samples_uri`` (the samples.parquet
    artifact), ``tracking_uri``; then ``params.<key>`` (decoded from JSON), ``metrics.<name>``
    and ``tags.<name>``. With ``latest_only`` a configuration run more than once (same
    fingerprint) keeps only its latest run. An unknown experiment raises ``KeyError``.
    """
    client = _client(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        known = sorted(e.name for e in client.search_experiments())
        raise KeyError(f"no MLflow experiment {experiment!r} at {tracking_uri}; known: {known}")
    runs = []
    token = None
    while True:
        page = client.search_runs(
            [exp.experiment_id],
            filter_string="tags.`df_ray.kind` = 'configuration' and attributes.status = 'FINISHED'",
            max_results=1000, order_by=["attributes.start_time ASC"], page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    parents: dict[str, str] = {}
    rows = []
    for r in runs:
        tags = dict(r.data.tags)
        params = {k: _decode(v) for k, v in r.data.params.items()}
        parent = tags.get("mlflow.parentRunId")
        if parent and parent not in parents:
            try:
                parents[parent] = client.get_run(parent).info.run_name or parent
            except Exception:  # a deleted parent must not hide its children
                parents[parent] = parent
        agent_keys = sorted((k for k in params if k.startswith("agents.") and k.endswith(".id")),
                            key=lambda k: int(k.split(".")[1]))
        row: dict[str, Any] = {
            "run_id": r.info.run_id,
            "name": r.info.run_name or tags.get("mlflow.runName") or params.get("name"),
            "method": tags.get("df_ray.method", params.get("method")),
            "benchmark": tags.get("df_ray.benchmark", params.get("benchmark")),
            "fingerprint": tags.get("df_ray.fingerprint"),
            "parent_run_id": parent,
            "sweep": parents.get(parent) if parent else None,
            "start_time": pd.to_datetime(r.info.start_time, unit="ms"),
            "n_agents": len(agent_keys),
            "agents": ",".join(str(params[k]) for k in agent_keys),
            "samples_uri": r.info.artifact_uri.rstrip("/") + "/" + SAMPLES_ARTIFACT,
            "tracking_uri": tracking_uri,
        }
        row.update({f"params.{k}": v for k, v in params.items()})
        row.update({f"metrics.{k}": v for k, v in r.data.metrics.items()})
        row.update({f"tags.{k}": v for k, v in tags.items()})
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    if latest_only:
        key = df["fingerprint"].fillna(df["run_id"])
        df = df[~key.duplicated(keep="last")]
    return stable_order(df)


def stable_order(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` sorted by benchmark, run seed (``params.seed``, 0 when not logged),
    configuration name, fingerprint and then start time (only runs of one configuration
    logged twice keep their log order)."""
    seed = pd.to_numeric(runs["params.seed"], errors="coerce") if "params.seed" in runs \
        else pd.Series(0, index=runs.index)
    keyed = runs.assign(_seed=seed.fillna(0), _name=runs["name"].astype(str),
                        _fp=runs["fingerprint"].fillna("").astype(str))
    keyed = keyed.sort_values(["benchmark", "_seed", "_name", "_fp", "start_time"],
                              kind="mergesort")
    return keyed.drop(columns=["_seed", "_name", "_fp"]).reset_index(drop=True)


@lru_cache(maxsize=256)
def _local_samples_path(tracking_uri: str, run_id: str, samples_uri: str | None) -> str:
    """A local path of the artifact: read in place from a local artifact store, else
    downloaded (once per run in this process)."""
    if samples_uri:
        parsed = urlparse(samples_uri)
        if parsed.scheme in ("", "file"):
            local = url2pathname(parsed.path) if parsed.scheme == "file" else samples_uri
            if os.path.isfile(local):
                return local
    import mlflow.artifacts

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    return mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=SAMPLES_ARTIFACT,
                                               tracking_uri=tracking_uri)


def load_samples(run, tracking_uri: str | None = None) -> pd.DataFrame:
    """The per-sample results of a run: a row of :func:`collect_runs` (or a run id with
    ``tracking_uri``). Falls back to the local file named by the ``df_ray.samples`` tag when the
    artifact cannot be fetched. ``detail`` stays a JSON string (see :func:`sample_detail`)."""
    if isinstance(run, str):
        run_id, local, uri = run, None, None
        if tracking_uri is None:
            raise ValueError("load_samples(run_id) needs tracking_uri")
    else:
        run_id = run["run_id"]
        tracking_uri = tracking_uri or run["tracking_uri"]
        local = run.get("tags.df_ray.samples")
        uri = run.get("samples_uri")
    try:
        path = _local_samples_path(tracking_uri, run_id, uri)
    except Exception:
        if local and isinstance(local, str) and os.path.isfile(local):
            path = local
        else:
            raise
    expected = None if isinstance(run, str) else run.get("tags.df_ray.samples_sha256")
    expected = expected if isinstance(expected, str) and expected else None
    from df_ray.pipeline.results import read_results

    # verified: a file whose content no longer matches the digest logged with its run (or
    # the one beside it) is refused, naming it, never reported
    return read_results(path, expected_sha256=expected).to_pandas()


def sample_detail(row) -> dict[str, Any]:
    """The decoded ``detail`` JSON of one sample row: observations, agent_correct, final, extra
    (extra.belief holds the clusters, top, runner_up and margin), calls."""
    d = row["detail"]
    return json.loads(d) if isinstance(d, str) else dict(d or {})


def extraction_rules(samples: pd.DataFrame) -> pd.DataFrame:
    """How often each extraction rule fired, per agent: the first thing to check when a
    model's score looks wrong. One row per (agent, rule, valid, reason) with its ``count`` and
    ``share`` of that agent's outputs; ``rule`` is empty and ``reason`` says why for outputs
    no rule could read. ``samples`` is :func:`load_samples`'s frame (or the results Parquet)."""
    rows = []
    for _, row in samples.iterrows():
        for o in sample_detail(row).get("observations", []):
            rows.append({"agent": o.get("agent", ""), "rule": o.get("rule", ""),
                         "valid": bool(o.get("valid", False)),
                         "reason": "" if o.get("valid") else o.get("reason", "")})
    if not rows:
        return pd.DataFrame(columns=["agent", "rule", "valid", "reason", "count", "share"])
    df = pd.DataFrame(rows)
    out = df.groupby(["agent", "rule", "valid", "reason"], dropna=False).size()
    out = out.rename("count").reset_index()
    out["share"] = out["count"] / out.groupby("agent")["count"].transform("sum")
    return out.sort_values(["agent", "count"], ascending=[True, False]).reset_index(drop=True)
