"""Where a run's files go, and under whose name, so that nothing a job computes is lost.

Under ``ray job submit`` a job's current directory is a temporary copy of the uploaded
working dir: a relative ``results_dir``, ``calibration.dir``, ``cache_root`` or a relative
local MLflow store (``sqlite:///mlflow.db``, the paper's sweep files' default) would be
written there and deleted with it. df_ray therefore **resolves** every such relative path
against ``DF_RAY_HOME`` (a folder on shared storage that every node sees) when it runs inside
a Ray job, and **refuses** to start, before any engine or data set is touched, when
``DF_RAY_HOME`` is not set (or not absolute) and a relative path needs it:

=========================  ==================================================================
field (relative, in a job)  becomes
=========================  ==================================================================
``tracking.uri``            ``$MLFLOW_TRACKING_URI`` when set (the lab's server), else
                            ``sqlite:///$DF_RAY_HOME/<the file>``
``results_dir``             ``$DF_RAY_HOME/users/<user>/<results_dir>``
``calibration.dir``         ``$DF_RAY_HOME/<dir>``; the frozen files the working dir ships in
                            that folder are copied there first (never overwriting)
``calibration.path``        kept when the file is in the working dir, else ``$DF_RAY_HOME/<path>``
``cache_root``              ``$DF_RAY_HOME/users/<user>/<cache_root>``
=========================  ==================================================================

Outside a job relative paths keep meaning "relative to the current directory".

The generation cache is per user by default: ``$DF_RAY_HOME/users/<user>/generations`` (or
``~/.cache/df_ray/generations`` without ``DF_RAY_HOME``). A run writes its parts under its
``cache_user`` (the user) and replays only its own parts of its root; other users' entries
are read only on opt-in (``cache_read_from``, or ``DF_RAY_CACHE_READ_FROM``): a user name
reads their parts in the run's root and their own root
``$DF_RAY_HOME/users/<name>/generations``; ``*`` every writer's parts in the run's root and
every user's root under ``$DF_RAY_HOME/users``; a path or URI that root, read only
(``df_ray.pipeline.cache``).

The MLflow experiment is namespaced per user (``<user>/<experiment>``) wherever a store is
shared: inside a Ray job, or with a tracking server (``http(s)://``). ``tracking.per_user``
turns it on or off explicitly; an experiment name that already holds a ``/`` is used as
given. The user is ``DF_RAY_USER``, else ``USER``, else the login name.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from df_ray.config import RunConfig
from df_ray.errors import ConfigError
from df_ray.user_names import (
    READ_FROM_ENV,
    current_user,
    is_root,
    read_from_env,
    safe_user,
    validate_user,
)

__all__ = ["current_user", "validate_user"]  # re-exported: their home is df_ray.user_names

log = logging.getLogger(__name__)

#: Set by Ray's job supervisor in the environment of a submitted job's entrypoint.
RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
#: "1"/"0": force (or deny) job mode, whatever the environment says.
JOB_MODE_ENV = "DF_RAY_JOB"


def in_ray_job() -> bool:
    """True inside the entrypoint of a ``ray job submit`` job (or with ``DF_RAY_JOB=1``)."""
    forced = os.environ.get(JOB_MODE_ENV)
    if forced is not None and forced.strip() != "":
        return forced.strip().lower() in ("1", "true", "yes")
    return bool(os.environ.get(RAY_JOB_ENV))


_safe_user = safe_user


def is_server_uri(uri: str) -> bool:
    return uri.startswith(("http://", "https://", "databricks"))


def experiment_name(experiment: str, uri: str, per_user: bool | None = None,
                    user: str | None = None, job: bool | None = None) -> str:
    """The MLflow experiment a run logs to: ``<user>/<experiment>`` on a shared store."""
    if "/" in experiment:
        return experiment
    if per_user is None:
        per_user = (in_ray_job() if job is None else job) or is_server_uri(uri)
    if not per_user:
        return experiment
    return f"{user or current_user()}/{experiment}"


def _local_store_path(uri: str) -> str | None:
    """The path of a local MLflow store URI (sqlite, file or a bare path); None for servers."""
    if uri.startswith("sqlite:///"):
        return uri[len("sqlite:///"):]
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if "://" in uri or uri.startswith("databricks"):
        return None
    return uri


def _is_relative(path: str) -> bool:
    return "://" not in path and not os.path.isabs(os.path.expanduser(path))


def _home(fields: list[str]) -> Path:
    home = os.environ.get("DF_RAY_HOME", "").strip()
    if not home or not os.path.isabs(os.path.expanduser(home)):
        what = ", ".join(fields)
        got = f" (it is {home!r}, not an absolute path)" if home else ""
        raise ConfigError(
            f"this run is a Ray job, and {what} {'is' if len(fields) == 1 else 'are'} relative: "
            "inside a job they would be written to its temporary working directory and lost "
            f"when it ends. Set DF_RAY_HOME{got} to a folder on shared storage that every node "
            "sees (e.g. env_vars: {DF_RAY_HOME: /mnt/shared/df_ray} in "
            "cluster/runtime_env.yaml) and MLFLOW_TRACKING_URI to the lab's MLflow server, or "
            "give absolute paths (--set results_dir=/mnt/shared/...)")
    return Path(os.path.expanduser(home))


def resolve_storage(configs: Sequence[RunConfig], *, job: bool | None = None,
                    user: str | None = None) -> list[RunConfig]:
    """Validated configurations with their storage resolved (validated again): for a
    configuration held already. A run resolves its storage once, on the mapping, before its
    one validation (``df_ray.evaluation.plan.resolve``, with :func:`storage_mapping`)."""
    return [RunConfig.model_validate(storage_mapping(c.model_dump(mode="json"), job=job,
                                                     user=user)) for c in configs]


def storage_mapping(data: dict[str, Any], *, job: bool | None = None,
                    user: str | None = None) -> dict[str, Any]:
    """A configuration's mapping (not validated yet) with its storage resolved for where it
    runs (see the module docstring); raises :class:`ConfigError` naming what to set when a
    job would lose files. A mapping whose storage fields are malformed is returned as it is:
    its validation says what is wrong."""
    d = _storage_fields(data)
    if d is None:
        return data
    job = in_ray_job() if job is None else job
    user = user or current_user()
    if job:
        _in_job(d, user)
    d["cache_user"] = d.get("cache_user") or user
    try:
        env_read_from = read_from_env()
    except ValueError as e:
        raise ConfigError(f"{READ_FROM_ENV}: {e}") from None
    if isinstance(d.get("cache_read_from"), list):
        d["cache_read_from"] = cache_read_from(
            [*d["cache_read_from"], *env_read_from], d["cache_root"], d["cache_user"])
    tracking = d["tracking"]
    tracking["experiment"] = experiment_name(str(tracking["experiment"]), tracking["uri"],
                                             per_user=tracking.get("per_user"), user=user,
                                             job=job)
    return d


def _storage_fields(data: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of ``data`` with every storage field present (its default where not given), or
    None when one is malformed."""
    from df_ray.config import CalibrationSettings, default_cache_root, default_tracking_uri

    tracking, calibration = data.get("tracking") or {}, data.get("calibration") or {}
    if not (isinstance(tracking, dict) and isinstance(calibration, dict)):
        return None
    d = {**data, "tracking": {"uri": default_tracking_uri(), "experiment": "df_ray",
                              **tracking},
         "calibration": {**CalibrationSettings().model_dump(), **calibration}}
    d.setdefault("results_dir", RunConfig.model_fields["results_dir"].default)
    d.setdefault("cache_root", default_cache_root())
    d.setdefault("cache_read_from", [])
    paths = [d["results_dir"], d["cache_root"], d["tracking"]["uri"],
             d["calibration"]["dir"], d["calibration"]["path"] or ""]
    return d if all(isinstance(v, str) for v in paths) else None


def _in_job(d: dict[str, Any], user: str) -> None:
    """Inside a Ray job: every relative storage path under ``DF_RAY_HOME`` (``d`` in place),
    or a ConfigError naming them when it is not set."""
    tracking, calibration = d["tracking"], d["calibration"]
    store = _local_store_path(tracking["uri"])
    path = calibration["path"]
    relative = [f"{name} ({v})" for name, v, rel in (
        ("tracking.uri", tracking["uri"], store is not None and _is_relative(store)),
        ("results_dir", d["results_dir"], _is_relative(d["results_dir"])),
        ("calibration.dir", calibration["dir"], _is_relative(calibration["dir"])),
        ("cache_root", d["cache_root"], _is_relative(d["cache_root"])),
        ("calibration.path", path, bool(path) and _is_relative(path)
         and not Path(path).is_file())) if rel]
    env_uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if relative == [f"tracking.uri ({tracking['uri']})"] and env_uri:
        relative = []  # only the store, and the lab's server replaces it
    home = _home(relative) if relative else None
    if store is not None and _is_relative(store):
        tracking["uri"] = env_uri or f"sqlite:///{home / store}"
    if _is_relative(d["results_dir"]):
        d["results_dir"] = str(home / "users" / user / d["results_dir"])
    if _is_relative(calibration["dir"]):
        target = home / calibration["dir"]
        seed_calibration(Path(calibration["dir"]), target)
        calibration["dir"] = str(target)
    if path and _is_relative(path):
        calibration["path"] = (str(Path(path).resolve()) if Path(path).is_file()
                               else str(home / path))
    if _is_relative(d["cache_root"]):
        d["cache_root"] = str(home / "users" / user / d["cache_root"])


def cache_read_from(items: Sequence[str], own_root: str, user: str) -> list[str]:
    """A run's cache opt-in resolved: the items as given, plus, with ``DF_RAY_HOME`` set, the
    own root of each user named (``$DF_RAY_HOME/users/<name>/generations``; for ``*`` every
    user's there), never the run's own root."""
    out = list(dict.fromkeys(items))
    home = os.environ.get("DF_RAY_HOME", "").strip()
    if not home or not os.path.isabs(os.path.expanduser(home)):
        return out
    users = Path(os.path.expanduser(home)) / "users"
    names = [i for i in out if i != "*" and not is_root(i)]
    if "*" in out and users.is_dir():
        names += sorted(d.name for d in users.iterdir() if d.is_dir())
    own = os.path.abspath(os.path.expanduser(own_root)) if "://" not in own_root else own_root
    for name in dict.fromkeys(names):
        root = str(users / name / "generations")
        if name != user and root != own and root not in out:
            out.append(root)
    return out


def seed_calibration(source: Path, target: Path) -> int:
    """Copy the calibration files a working dir ships (``source``) into the shared folder
    ``target``, never overwriting one already there; returns how many were copied.

    Only files that parse as a calibration (a JSON object) and, in a git checkout, are
    what it has committed (not modified, not untracked) are seeded: a modified copy in one
    checkout never becomes every user's. Outside a checkout (a job's uploaded copy, which
    has no history to check against) a file is seeded with a warning saying so. A
    shared file that differs from this job's own copy is reported (a warning naming both
    sha256), and the shared one is what the run uses."""
    target.mkdir(parents=True, exist_ok=True)
    if not source.is_dir() or source.resolve() == target.resolve():
        return 0
    n = 0
    for f in sorted(source.glob("*.json")):
        dest = target / f.name
        if dest.exists():
            mine, shared = _sha256(f), _sha256(dest)
            if mine != shared:
                log.warning("calibration %s in the shared folder %s differs from this job's "
                            "copy %s (sha256 %s there, %s here): the shared one is used",
                            f.name, target, f, shared[:12], mine[:12])
            continue
        why = _unseedable(f)
        if why:
            log.warning("calibration %s not seeded into the shared folder %s: %s",
                        f, target, why)
            continue
        tmp = target / f".{f.name}.{os.getpid()}.tmp"
        shutil.copyfile(f, tmp)
        try:
            os.link(tmp, dest)  # atomic, and fails rather than replace a concurrent copy
            n += 1
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    return n


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _unseedable(path: Path) -> str | None:
    """Why ``path`` may not seed a shared folder, or None: it must parse as a JSON object and
    be unmodified against its git checkout (when it is in one)."""
    import json
    import subprocess

    try:
        if not isinstance(json.loads(path.read_text()), dict):
            return "not a calibration (a JSON object)"
    except (OSError, ValueError) as e:
        return f"unreadable ({type(e).__name__})"
    try:
        r = subprocess.run(["git", "-C", str(path.parent), "status", "--porcelain", "--",
                            path.name], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        log.warning("calibration %s: no git to check it against a commit; seeded", path)
        return None
    if r.returncode != 0:
        log.warning("calibration %s is in no git checkout: seeded without a check against "
                    "a commit", path)
        return None
    if r.stdout.strip():
        return "it differs from the committed file (modified or untracked in this checkout)"
    return None
