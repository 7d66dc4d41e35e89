"""The Hugging Face Hub as the benchmark loaders reach it: data sets through ``datasets``, file
trees (a parquet conversion branch) through ``huggingface_hub``'s snapshots, and the commit
each load resolved to.

Offline (``HF_HUB_OFFLINE``, the usual setting on an air-gapped cluster with a pre-warmed
``HF_HOME``) means "from the cache": ``datasets`` and ``huggingface_hub`` read their caches
themselves, and only a miss becomes :class:`HubUnavailable`, one line naming the data set, the
cache folder looked in and the command that fills it on a machine with internet access.

Every load records the commit it resolved to (:func:`resolved_commits`): ``datasets`` keeps a
hub data set's arrow files under ``<name>/<config>/<version>/<commit>/``, a snapshot lives in
``snapshots/<commit>/``. A run logs them (``provenance.data_commit.*``) and a sweep pins one
with ``data_revision``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any


class HubUnavailable(RuntimeError):
    """The Hugging Face hub cannot be used (offline mode or no network), and what was asked for
    is not in the cache."""


_TRUE = {"1", "true", "yes", "on"}
_COMMIT = re.compile(r"[0-9a-f]{40}")


def hub_offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in _TRUE
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


_PINNED: ContextVar[str | None] = ContextVar("df_ray_data_revision", default=None)


@contextmanager
def pinned_revision(revision: str | None) -> Iterator[None]:
    """Within the block, hub data sets load at ``revision`` (a commit, tag or branch of the
    data set repository; the run's ``data_revision``). None: each loader's default."""
    token = _PINNED.set(revision)
    try:
        yield
    finally:
        _PINNED.reset(token)


def pinned() -> str | None:
    return _PINNED.get()


#: repository -> the commit its last load in this process resolved to.
_COMMITS: dict[str, str] = {}


def resolved_commits(repos: Sequence[str] | None = None) -> dict[str, str]:
    """The commits hub loads of this process resolved to (of ``repos`` only, if given)."""
    return {r: c for r, c in sorted(_COMMITS.items()) if repos is None or r in repos}


def record_commit(repo: str, commit: str | None) -> None:
    if commit and _COMMIT.fullmatch(commit):
        _COMMITS[repo] = commit


def datasets_cache() -> str:
    """The folder ``datasets`` keeps prepared data sets in (``HF_DATASETS_CACHE``)."""
    import datasets.config

    return str(datasets.config.HF_DATASETS_CACHE)


def hub_cache() -> str:
    """The folder ``huggingface_hub`` keeps repository snapshots in (``HF_HUB_CACHE``), read
    from the environment at call time."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_CACHE")
    if env:
        return os.path.expanduser(env)
    home = os.environ.get("HF_HOME")
    return os.path.join(os.path.expanduser(home), "hub") if home else constants.HF_HUB_CACHE


def _dataset_commit(ds: Any) -> str | None:
    """The commit a hub data set loaded by ``datasets`` came from: its cache folder's name."""
    for f in getattr(ds, "cache_files", None) or ():
        name = Path(f.get("filename", "")).parent.name
        if _COMMIT.fullmatch(name):
            return name
    return None


def _miss(what: str, folder: str, fill: str) -> HubUnavailable:
    return HubUnavailable(f"{what} is not in the Hugging Face cache {folder} and the hub is "
                          f"offline (HF_HUB_OFFLINE); fill the cache on a machine with internet "
                          f"access and the same HF_HOME: {fill}")


def _is_miss(e: BaseException) -> bool:
    """A ``datasets`` error that, offline, means the data set is not in the cache."""
    if isinstance(e, ConnectionError | FileNotFoundError):
        return True
    return isinstance(e, ValueError) and "find cache" in str(e).lower()


def load_hub_dataset(path: str, name: str | None = None, *, split: str,
                     revision: str | None = None, token: str | None = None) -> Any:
    """``datasets.load_dataset`` for a hub repository (one place, so tests can stub it).

    Offline, ``datasets`` reads its cache; a miss is a :class:`HubUnavailable` naming the cache
    folder. A revision pinned with :func:`pinned_revision` wins over ``revision``.
    """
    revision = _PINNED.get() or revision
    import datasets

    kwargs: dict[str, Any] = {"split": split}
    if revision:
        kwargs["revision"] = revision
    if token:
        kwargs["token"] = token
    try:
        ds = datasets.load_dataset(path, name, **kwargs)
    except Exception as e:
        if hub_offline() and _is_miss(e):
            args = ", ".join(repr(a) for a in (path, name) if a)
            extra = f", revision={revision!r}" if revision else ""
            fill = (f"python -c \"import datasets; datasets.load_dataset({args}, "
                    f"split={split!r}{extra})\"")
            raise _miss(f"{path}{'/' + name if name else ''} ({split})", datasets_cache(),
                        fill) from None
        raise
    record_commit(path, _dataset_commit(ds))
    return ds


def hub_snapshot(repo: str, *, revision: str | None = None, repo_type: str = "dataset",
                 allow_patterns: Sequence[str] | None = None) -> Path:
    """The local folder of ``repo`` at ``revision`` (``huggingface_hub.snapshot_download``:
    downloaded once, then from the cache; offline, from the cache only). A revision pinned
    with :func:`pinned_revision` wins over ``revision``."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    revision = _PINNED.get() or revision
    cache = hub_cache()
    try:
        folder = Path(snapshot_download(repo, repo_type=repo_type, revision=revision,
                                        cache_dir=cache, local_files_only=hub_offline(),
                                        allow_patterns=list(allow_patterns)
                                        if allow_patterns else None))
    except LocalEntryNotFoundError:
        cmd = ["hf", "download", repo, "--repo-type", repo_type]
        if revision:
            cmd += ["--revision", revision]
        raise _miss(f"{repo}{'@' + revision if revision else ''}", cache,
                    shlex.join(cmd)) from None
    record_commit(repo, folder.name)
    return folder
