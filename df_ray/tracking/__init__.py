"""MLflow logging: one run per configuration, nested under one run per sweep.

Only the driver writes to MLflow. A configuration's run is created when its samples are all
graded and marked FINISHED in the same breath; a rerun finds finished configurations by their
fingerprint tag and skips them, and reuses the sweep's parent run.

Concurrent runs of one sweep on one store agree through locks (``df_ray.tracking.locks``):
the sweep's parent run is found or created under the sweep's lock, and each configuration is
looked up, run and logged under its own, so the second run waits for the first and then
skips what it finished: exactly one FINISHED run per configuration. A run killed while it
logged leaves its configuration's run RUNNING; the rerun, holding the configuration's lock,
ends it KILLED with the reason (tag ``df_ray.failure_reason``) before it runs the
configuration again, and then logs the configuration into that same run (FINISHED, the
reason removed): no KILLED run is left beside the finished one. A rerun that fails again
leaves it KILLED for the next.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from df_ray.config import ConfigError, RunConfig, SweepConfig
from df_ray.tracking import locks

FINGERPRINT_TAG = "df_ray.fingerprint"
SWEEP_TAG = "df_ray.sweep"
#: The Ray head a sweep's run was last started on (its GCS address) and that cluster's
#: session: a parent run RUNNING under another session lost its driver with its head.
HEAD_TAG = "df_ray.ray_head"
SESSION_TAG = "df_ray.ray_session"
PARENT_TAG = "mlflow.parentRunId"
#: Why a configuration (or a sweep) FAILED: too many failed calls, an engine that died.
FAILURE_TAG = "df_ray.failure_reason"
#: The SHA-256 of a configuration's samples.parquet, verified when a report reads it.
SAMPLES_SHA_TAG = "df_ray.samples_sha256"


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


#: The URI schemes (and forms) MLflow's tracking stores accept.
STORE_SCHEMES = ("sqlite", "file", "http", "https", "databricks", "postgresql", "mysql",
                 "mssql", "uc")


def check_store_uri(uri: str) -> None:
    """Refuse, naming it, a tracking URI no MLflow store reads (``nosuch://x``)."""
    if "://" not in uri and not uri.startswith("databricks"):
        return  # a bare path: a file store
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme not in STORE_SCHEMES:
        raise ConfigError(
            f"tracking.uri {uri!r}: MLflow has no store for the scheme {scheme!r}; use "
            "sqlite:///mlflow.db (a local file), file:/path, or http(s)://host:port (a "
            "tracking server)")


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


class TrackingStoreError(RuntimeError):
    """The MLflow store cannot be used (unreadable, locked, full): one line that names it and
    says what to do. ``exit_status`` 2 when found before anything ran, 1 during a run."""

    def __init__(self, message: str, exit_status: int = 1) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def describe_store_error(uri: str, e: BaseException, during: str) -> str:
    """One line for an MLflow store fault: which store, what happened, what to do."""
    text = " ".join(str(e).split())[:300]
    low = text.lower()
    if "database is locked" in low:
        return (f"the MLflow store {uri} is locked by another process ({during}); wait for "
                "it to finish, or use another tracking.uri")
    if "not a database" in low or "malformed" in low or "file is encrypted" in low:
        store = _local_store(uri)
        return (f"the MLflow store {uri} is not a readable sqlite database ({during}: {text})"
                f"; move {store or 'it'} aside (a new store is created) or fix tracking.uri")
    if "no space left" in low:
        return f"no space left on the device of the MLflow store {uri} ({during})"
    return f"the MLflow store {uri} failed ({during}: {type(e).__name__}: {text})"


def _is_store_fault(e: BaseException) -> bool:
    """An error of the store itself (its database, its files), not a df_ray bug."""
    return isinstance(e, OSError) or type(e).__module__.startswith(
        ("sqlalchemy", "mlflow", "sqlite3", "alembic"))


def _local_store(uri: str) -> str | None:
    from df_ray.storage import _local_store_path

    return _local_store_path(uri)


class Tracker:
    def __init__(self, uri: str, experiment: str, results_dir: str | None = None) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        # MLflow's sqlite store logs every database error with its traceback before raising
        # it; df_ray reports a store fault itself, in one line (describe_store_error)
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
        check_reachable(uri)
        check_store_uri(uri)
        self.uri = uri
        self.lock_dir = locks.lock_dir(uri, results_dir)
        mlflow.set_tracking_uri(uri)
        try:
            # A fresh sqlite store is created (MLflow's schema migration) by its first use:
            # once, under the store's lock, never by two processes at the same moment.
            with locks.exclusive(self.lock_dir, ["store"]):
                self.client = MlflowClient(tracking_uri=uri)
                exp = self.client.get_experiment_by_name(experiment)
                self.experiment_id = (exp.experiment_id if exp
                                      else self.client.create_experiment(experiment))
        except (ConfigError, TrackingStoreError):
            raise
        except Exception as e:
            if _is_store_fault(e):
                raise TrackingStoreError(describe_store_error(uri, e, "opening it"),
                                         exit_status=2) from None
            raise
        self.experiment = experiment
        self.parent_id: str | None = None
        #: Runs a kill left behind, per configuration fingerprint: the rerun logs into them.
        self._interrupted: dict[str, list[str]] = {}

    def _waiting(self, say: Callable[[str], None]) -> Callable[[str, str], None]:
        def waiting(name: str, holder: str) -> None:
            say(f"another run of this sweep holds {name} ({holder}); waiting for it, to "
                "reuse what it finishes")
        return waiting

    @contextmanager
    def claim(self, cfgs: Sequence[RunConfig], say: Callable[[str], None] = lambda m: None):
        """Hold the configurations' locks while they are looked up, run and logged; runs a
        killed job left RUNNING are ended KILLED first (see the module docstring)."""
        names = [f"config-{c.fingerprint()}" for c in cfgs]
        with locks.exclusive(self.lock_dir, names, waiting=self._waiting(say)):
            for cfg in cfgs:
                self.close_interrupted(cfg)
            yield

    def close_interrupted(self, cfg: RunConfig) -> int:
        """End every RUNNING run of this configuration (in this sweep) KILLED, with the
        reason; only called under the configuration's lock. Returns how many."""
        fp = cfg.fingerprint()
        filt = f"tags.`{FINGERPRINT_TAG}` = '{fp}' and attributes.status = 'RUNNING'"
        if self.parent_id:
            filt += f" and tags.`{PARENT_TAG}` = '{self.parent_id}'"
        n = 0
        for run in self.client.search_runs([self.experiment_id], filter_string=filt):
            self.client.set_tag(run.info.run_id, FAILURE_TAG,
                                "interrupted: the job was killed while it logged this run; "
                                "closed by a rerun of its sweep")
            self.client.set_terminated(run.info.run_id, status="KILLED")
            n += 1
        # every interrupted run of it (this one's and an earlier rerun's): the next log of
        # the configuration goes into the newest, the others are deleted then
        killed = filt.replace("attributes.status = 'RUNNING'", "attributes.status = 'KILLED'")
        self._interrupted[fp] = [
            r.info.run_id for r in self.client.search_runs(
                [self.experiment_id], filter_string=killed,
                order_by=["attributes.start_time DESC"])
            if (r.data.tags.get(FAILURE_TAG) or "").startswith("interrupted")]
        return n

    @contextmanager
    def sweep(self, sweep: SweepConfig, head: dict[str, str] | None = None):
        """The sweep's parent run, RUNNING while the block runs. ``head``: the Ray cluster the
        job runs on (`HEAD_TAG`, `SESSION_TAG`), tagged on the run; a parent run still
        RUNNING from another cluster's session (its driver lost with its head) is left in
        ``lost_head`` (its head's tags) for the job to say so."""
        fp = sweep_fingerprint(sweep)
        self.lost_head: dict[str, str] | None = None
        # under the sweep's lock: two runs of one sweep share one parent run
        with locks.exclusive(self.lock_dir, [f"sweep-{fp}"]):
            found = self.client.search_runs(
                [self.experiment_id], filter_string=f"tags.`{SWEEP_TAG}` = '{fp}'",
                max_results=1, order_by=["attributes.start_time DESC"])
            if found:
                run = found[0]
                tags = run.data.tags
                if (run.info.status == "RUNNING" and head and tags.get(SESSION_TAG)
                        and tags[SESSION_TAG] != head.get(SESSION_TAG)):
                    self.lost_head = {k: tags[k] for k in (HEAD_TAG, SESSION_TAG)
                                      if k in tags}
                self.client.update_run(run.info.run_id, status="RUNNING")
            else:
                run = self.client.create_run(self.experiment_id, run_name=sweep.name,
                                             tags={SWEEP_TAG: fp, "df_ray.kind": "sweep"})
                self.client.log_param(run.info.run_id, "n_configurations",
                                      len(sweep.expand()))
            for k, v in (head or {}).items():
                self.client.set_tag(run.info.run_id, k, v)
        self.parent_id = run.info.run_id
        self._sweep_failure: str | None = None
        self._progress_step = 0
        status = "FAILED"
        try:
            yield run
            status = "FAILED" if self._sweep_failure else "FINISHED"
        except KeyboardInterrupt as e:  # SIGINT / SIGTERM (df_ray.pipeline.signals)
            status = "KILLED"
            self._sweep_failure = self._sweep_failure or f"interrupted by {e or 'SIGINT'}"
            raise
        except BaseException as e:
            self._sweep_failure = self._sweep_failure or f"{type(e).__name__}: {e}"
            raise
        finally:
            parent, self.parent_id = self.parent_id, None
            try:
                if self._sweep_failure:
                    self.client.set_tag(parent, FAILURE_TAG, self._sweep_failure[:5000])
                self.client.set_terminated(parent, status=status)
            except Exception as e:
                # the store failed (locked, full): a fault already on its way says what is
                # kept; the rerun finds and ends this parent run
                if status == "FINISHED" and not self._sweep_failure and _is_store_fault(e):
                    raise TrackingStoreError(describe_store_error(
                        self.uri, e, "ending the sweep's run") + "; every configuration "
                        "and LLM call is kept: rerun the same command to end it") from None
                if not _is_store_fault(e):
                    raise

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
                failure: str | None = None, samples_sha256: str | None = None) -> str:
        """Log one configuration (see :meth:`_log_run`); a fault of the store becomes a
        :class:`TrackingStoreError` that says what is kept. ``samples_sha256``: the results
        file's digest as its writer computed it (None: read from its ``.sha256`` file)."""
        try:
            return self._log_run(cfg, metrics, samples_path, calibration, params, failure,
                                 samples_sha256)
        except Exception as e:
            if not _is_store_fault(e):
                raise
            raise TrackingStoreError(
                describe_store_error(self.uri, e, f"logging configuration {cfg.name!r}")
                + f"; its per-sample results ({samples_path}) and every LLM call are kept: "
                "rerun the same command to log it without new calls") from None

    def _open_run(self, cfg: RunConfig, tags: dict[str, str],
                  reused: list[str]) -> tuple[str, dict[str, str]]:
        """The configuration's run, RUNNING, with the parameters it already has: the run a
        kill left (``reused``: logged into, so no KILLED run stays beside it; any others
        deleted), else a new one."""
        if not reused:
            return self.client.create_run(self.experiment_id, run_name=cfg.name,
                                          tags=tags).info.run_id, {}
        rid, extra = reused[0], reused[1:]
        self.client.update_run(rid, status="RUNNING")
        with contextlib.suppress(Exception):
            self.client.delete_tag(rid, FAILURE_TAG)
        for k, v in tags.items():
            self.client.set_tag(rid, k, v)
        logged = dict(self.client.get_run(rid).data.params)
        for other in extra:
            with contextlib.suppress(Exception):
                self.client.delete_run(other)
        return rid, logged

    def _log_run(self, cfg: RunConfig, metrics: dict[str, float], samples_path: str | Path,
                 calibration: Any = None, params: dict[str, str] | None = None,
                 failure: str | None = None, samples_sha256: str | None = None) -> str:
        """Log one configuration. ``params``: further parameters, such as the provenance
        (model revisions, data set fingerprint, prompt version) the runner computes. The run
        ends FINISHED, or FAILED with ``failure`` as its reason tag (a FAILED run is not
        skipped by a rerun)."""
        from mlflow.entities import Metric, Param, RunTag

        tags = {FINGERPRINT_TAG: cfg.fingerprint(), "df_ray.method": cfg.method,
                "df_ray.benchmark": cfg.benchmark, "df_ray.kind": "configuration"}
        tags.update(cfg.build_task().run_tags())
        if self.parent_id:
            tags[PARENT_TAG] = self.parent_id
        params_extra = dict(params or {})
        reused = self._interrupted.pop(cfg.fingerprint(), [])
        rid, logged = self._open_run(cfg, tags, reused)
        try:
            params = {**_flatten(cfg.model_dump(mode="json")), **_calibration_params(calibration),
                      **params_extra}
            items = [Param(k[:250], v[:6000]) for k, v in sorted(params.items())
                     if k[:250] not in logged]  # (a reused run has some: never re-logged)
            for i in range(0, len(items), 100):
                self.client.log_batch(rid, params=items[i:i + 100])
            now = int(time.time() * 1000)
            # NaN (e.g. coordinator agreement of a method without a coordinator) is logged as
            # NaN, so every configuration carries the same metric names.
            ms = [Metric(metric_name(k), float(v), now, 0) for k, v in sorted(metrics.items())
                  if v is not None]
            tags = [RunTag("df_ray.samples", str(samples_path))]
            digest = samples_sha256 or _samples_digest(samples_path)
            if digest:
                tags.append(RunTag(SAMPLES_SHA_TAG, digest))
            if failure:
                tags.append(RunTag(FAILURE_TAG, failure[:5000]))
            self.client.log_batch(rid, metrics=ms, tags=tags)
            self.client.log_artifact(rid, str(samples_path))
        except BaseException as e:
            try:
                if reused or isinstance(e, KeyboardInterrupt):  # for the next rerun
                    self.client.set_tag(rid, FAILURE_TAG, "interrupted: logging it failed; "
                                        "closed by a rerun of its sweep")
                    self.client.set_terminated(rid, status="KILLED")
                else:
                    self.client.set_terminated(rid, status="FAILED")
                    self.client.delete_run(rid)
            except Exception:  # the store that failed may fail again: the rerun closes it
                pass
            raise
        self.client.set_terminated(rid, status="FAILED" if failure else "FINISHED")
        return rid


def _calibration_params(calibration: Any) -> dict[str, str]:
    """What a run logs of its calibration file (none without one)."""
    if calibration is None:
        return {}
    return {"calibration.file_agents": ",".join(calibration.agents),
            "calibration.n_samples": str(calibration.n_samples),
            "calibration.data_source": calibration.data_source or "unknown",
            "calibration.data_fingerprint": calibration.data_fingerprint or "unknown",
            "calibration.keying": getattr(calibration, "keying", "text")}


def _samples_digest(samples_path: str | Path) -> str | None:
    """The SHA-256 the results file's writer recorded beside it, if any."""
    try:
        return Path(str(samples_path) + ".sha256").read_text().strip() or None
    except OSError:
        return None


def metric_name(key: str) -> str:
    """MLflow's allowed characters: ``pass@1`` becomes ``pass_at_1``."""
    key = key.replace("@", "_at_")
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", key)


def sweep_fingerprint(sweep: SweepConfig) -> str:
    """Same set of configurations (and sweep name) -> same parent run."""
    blob = sweep.name + "|" + ",".join(sorted(c.fingerprint() for c in sweep.expand()))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
