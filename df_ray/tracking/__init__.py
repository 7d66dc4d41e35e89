"""MLflow logging: one run per configuration, nested under one run per sweep.

Only the driver writes to MLflow. A configuration's run is created when its samples are all
graded and marked FINISHED in the same breath, so an interrupted job leaves no half runs; a
rerun finds finished configurations by their fingerprint tag and skips them, and reuses the
sweep's parent run.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from df_ray.config import ConfigError, RunConfig, SweepConfig

FINGERPRINT_TAG = "df_ray.fingerprint"
SWEEP_TAG = "df_ray.sweep"
PARENT_TAG = "mlflow.parentRunId"
#: Why a configuration (or a sweep) FAILED: too many failed calls, an engine that died.
FAILURE_TAG = "df_ray.failure_reason"


def _flatten(d: Any, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    elif isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        for i, v in enumerate(d):
            out.update(_flatten(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = json.dumps(d) if not isinstance(d, str) else d
    return out


def check_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """Fail early, naming the server, when an HTTP tracking server does not answer."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s)
    except (urllib.error.URLError, OSError) as e:
        raise ConfigError(
            f"cannot reach the MLflow tracking server at {uri} ({e}); start it, fix "
            "tracking.uri, or use a local store such as sqlite:///mlflow.db") from None


class Tracker:
    def __init__(self, uri: str, experiment: str) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        check_reachable(uri)
        self.uri = uri
        mlflow.set_tracking_uri(uri)
        self.client = MlflowClient(tracking_uri=uri)
        exp = self.client.get_experiment_by_name(experiment)
        self.experiment_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
        self.experiment = experiment
        self.parent_id: str | None = None

    @contextmanager
    def sweep(self, sweep: SweepConfig):
        fp = sweep_fingerprint(sweep)
        found = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{SWEEP_TAG}` = '{fp}'",
            max_results=1, order_by=["attributes.start_time DESC"])
        if found:
            run = found[0]
            self.client.update_run(run.info.run_id, status="RUNNING")
        else:
            run = self.client.create_run(self.experiment_id, run_name=sweep.name,
                                         tags={SWEEP_TAG: fp, "df_ray.kind": "sweep"})
            self.client.log_param(run.info.run_id, "n_configurations", len(sweep.expand()))
        self.parent_id = run.info.run_id
        self._sweep_failure: str | None = None
        self._progress_step = 0
        status = "FAILED"
        try:
            yield run
            status = "FAILED" if self._sweep_failure else "FINISHED"
        except BaseException as e:
            self._sweep_failure = self._sweep_failure or f"{type(e).__name__}: {e}"
            raise
        finally:
            if self._sweep_failure:
                self.client.set_tag(self.parent_id, FAILURE_TAG, self._sweep_failure[:5000])
            self.client.set_terminated(self.parent_id, status=status)
            self.parent_id = None

    def mark_sweep_failed(self, reason: str) -> None:
        """End the sweep's run FAILED with ``reason`` (its configurations keep their own)."""
        self._sweep_failure = reason

    def log_progress(self, figures: dict[str, float], step: int) -> None:
        """A running pipeline's progress, on the sweep's run as it arrives."""
        if not self.parent_id:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._progress_step = getattr(self, "_progress_step", 0) + 1
        self.client.log_batch(self.parent_id, metrics=[
            Metric(metric_name(k), float(v), now, self._progress_step)
            for k, v in figures.items()])

    def finished_run(self, cfg: RunConfig):
        """The FINISHED run of this exact configuration in this sweep, if any."""
        filt = f"tags.`{FINGERPRINT_TAG}` = '{cfg.fingerprint()}' and attributes.status = 'FINISHED'"
        if self.parent_id:
            filt += f" and tags.`{PARENT_TAG}` = '{self.parent_id}'"
        runs = self.client.search_runs([self.experiment_id], filter_string=filt, max_results=1)
        return runs[0] if runs else None

    def log_run(self, cfg: RunConfig, metrics: dict[str, float], samples_path: str | Path,
                calibration: Any = None, params: dict[str, str] | None = None,
                failure: str | None = None) -> str:
        """Log one configuration. ``params``: further parameters, such as the provenance
        (model revisions, data set fingerprint, prompt version) the runner computes. The run
        ends FINISHED, or FAILED with ``failure`` as its reason tag (a FAILED run is not
        skipped by a rerun)."""
        from mlflow.entities import Metric, Param, RunTag

        tags = {FINGERPRINT_TAG: cfg.fingerprint(), "df_ray.method": cfg.method,
                "df_ray.benchmark": cfg.benchmark, "df_ray.kind": "configuration"}
        if cfg.benchmark == "humaneval":
            from df_ray.sandbox import plan as sandbox_plan

            tags["df_ray.sandbox.isolation"] = cfg.sandbox.isolation
            # the layers this (the driver's) machine gives; workers probe their own
            tags["df_ray.sandbox.layers"] = ",".join(sandbox_plan(cfg.sandbox.isolation).layers)
        if self.parent_id:
            tags[PARENT_TAG] = self.parent_id
        params_extra = dict(params or {})
        run = self.client.create_run(self.experiment_id, run_name=cfg.name, tags=tags)
        rid = run.info.run_id
        try:
            params = _flatten(cfg.model_dump(mode="json"))
            if calibration is not None:
                params["calibration.file_agents"] = ",".join(calibration.agents)
                params["calibration.n_samples"] = str(calibration.n_samples)
                params["calibration.data_source"] = calibration.data_source or "unknown"
                params["calibration.data_fingerprint"] = calibration.data_fingerprint or "unknown"
            params.update(params_extra)
            items = [Param(k[:250], v[:6000]) for k, v in sorted(params.items())]
            for i in range(0, len(items), 100):
                self.client.log_batch(rid, params=items[i:i + 100])
            now = int(time.time() * 1000)
            # NaN (e.g. coordinator agreement of a method without a coordinator) is logged as
            # NaN, so every configuration carries the same metric names.
            ms = [Metric(metric_name(k), float(v), now, 0) for k, v in sorted(metrics.items())
                  if v is not None]
            tags = [RunTag("df_ray.samples", str(samples_path))]
            if failure:
                tags.append(RunTag(FAILURE_TAG, failure[:5000]))
            self.client.log_batch(rid, metrics=ms, tags=tags)
            self.client.log_artifact(rid, str(samples_path))
        except Exception:
            self.client.set_terminated(rid, status="FAILED")
            self.client.delete_run(rid)
            raise
        self.client.set_terminated(rid, status="FAILED" if failure else "FINISHED")
        return rid


def metric_name(key: str) -> str:
    """MLflow's allowed characters: ``pass@1`` becomes ``pass_at_1``."""
    key = key.replace("@", "_at_")
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", key)


def sweep_fingerprint(sweep: SweepConfig) -> str:
    """Same set of configurations (and sweep name) -> same parent run."""
    blob = sweep.name + "|" + ",".join(sorted(c.fingerprint() for c in sweep.expand()))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
