"""Locks that make concurrent runs of one sweep agree: one MLflow run per configuration.

MLflow's API has no compare-and-set, so two runs of one sweep on one store would both find a
configuration unfinished, both run it and both log it. df_ray therefore takes an exclusive
advisory lock (``fcntl.flock``) on a small file per sweep and per configuration before it
looks a configuration up and holds it until the configuration's run is logged: the second
run waits, then finds the first one's FINISHED run and skips it. The operating system drops a
lock when its holder dies, so a killed run never leaves a stale one; the rerun then closes the
killed run's RUNNING configuration runs (KILLED, with the reason) under the same lock.

Where the lock files live: beside a local store (``sqlite:///.../mlflow.db`` ->
``.../.mlflow.db.df_ray-locks/``; a ``file:`` store -> inside it), and for a tracking server
under the results directory (``<results_dir>/.df_ray-locks/``, on shared storage inside a Ray
job; runs that share a server but not a results directory do not coordinate; a tracker given
no results directory locks in this machine's temporary folder). A fresh sqlite
store is also created under such a lock, once: MLflow's schema migration is not safe when two
processes start it at the same moment.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from df_ray.storage import _local_store_path as local_store_path


def lock_dir(uri: str, results_dir: str | None = None) -> Path:
    """The folder that holds the locks of a store (see the module docstring)."""
    store = local_store_path(uri)
    if store is not None:
        p = Path(os.path.abspath(os.path.expanduser(store)))
        if uri.startswith("sqlite:"):
            return p.parent / f".{p.name}.df_ray-locks"
        return p / ".df_ray-locks"
    if results_dir is None or "://" in results_dir:  # this machine's runs only
        digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
        # a folder of this user's own in the shared temporary folder (checked before use)
        return Path(tempfile.gettempdir()) / f"df_ray-locks-{os.getuid()}" / digest
    return Path(os.path.abspath(os.path.expanduser(results_dir))) / ".df_ray-locks"


class LockDirError(RuntimeError):
    """A lock folder that is not safe to hold locks in (a link, another user's)."""


def _private_dir(directory: Path) -> None:
    """Make ``directory`` (0700 when new) and refuse it when it, or a folder made for it in the
    shared temporary folder, is a symlink or belongs to another user."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = Path(tempfile.gettempdir())
    check = [directory] + ([directory.parent] if directory.parent.parent == tmp else [])
    for d in check:
        st = os.lstat(d)
        if not os.path.isdir(d) or os.path.islink(d):
            raise LockDirError(f"lock folder {d} is a link, not a folder: refusing to use it")
        if st.st_uid != os.getuid() and d.parent == tmp:
            raise LockDirError(f"lock folder {d} belongs to uid {st.st_uid}, not this user: "
                               "refusing to use it")


def _holder() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


@contextlib.contextmanager
def exclusive(directory: Path, names: Sequence[str],
              waiting: Callable[[str, str], None] | None = None) -> Iterator[None]:
    """Hold the locks ``names`` (taken in sorted order, so two holders of overlapping sets
    cannot deadlock) in ``directory``. ``waiting(name, holder)`` is called once before
    blocking on a lock another process holds."""
    _private_dir(directory)
    held: list[int] = []
    try:
        for name in sorted(set(names)):
            path = directory / f"{name}.lock"
            # never through a link: a planted symlink must not make the holder's pwrite
            # below overwrite another file
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if waiting is not None:
                        try:
                            holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                        except OSError:
                            holder = ""
                        waiting(name, holder or "another process")
                    fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            held.append(fd)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{_holder()} since {time.strftime('%H:%M:%S')}".encode(), 0)
        yield
    finally:
        for fd in reversed(held):
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
