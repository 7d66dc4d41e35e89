"""Stopping a run cleanly on SIGINT (Ctrl-C) and SIGTERM (``kill``, ``ray job stop``).

The command (``df-ray``, ``jobs/sweep.py``) installs :func:`install`; its handler, on the
first signal,

1. asks every stage actor of the job to write the answers it holds but has not written yet
   (a stage writes a cache part at most every 30 s): a key in Ray's KV store that the
   workers' watch thread (:func:`watch`, started in every worker that registers something
   to write, :func:`on_interrupt`: the stage actors, not the engine replicas, whose answers
   are journaled as they finish) reads within half a second; the handler waits (at most :data:`FLUSH_WAIT_S`) until the stages have said so;
2. raises :class:`Interrupted` (a ``KeyboardInterrupt``) in the main thread: the run unwinds,
   its MLflow sweep run ends KILLED with the reason, the command stops the Ray it started and
   prints one line, and exits 130 (SIGINT) or 143 (SIGTERM).

A second signal while that happens ends the process at once, with the same status. Ray's
own SIGTERM handler (``sys.exit``, set by ``ray.init``) is replaced again after Ray starts
(:func:`rearm`). A library caller that did not install it keeps Python's behaviour.

Before it leaves (``os._exit``), the command ends the local Ray it started
(:func:`stop_started_ray`). Left to the kernel, that Ray's GCS and raylet die with the
process by SIGKILL (Ray's fate sharing, ``PR_SET_PDEATHSIG``); Ray's agents
(``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``, children of the raylet) then find their
raylet gone without the "Raylet received SIGTERM" line in its log, take that for a crash,
and block reporting it to the GCS that died too, past the run: every interrupted run left
two of them behind. Stopped as ``ray.shutdown`` stops it (the raylet by SIGTERM first), they
read the end as expected and exit with it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: Ray KV key prefix: ``<prefix>/<job id>`` asks the job's workers to write what they hold;
#: ``<prefix>/<job id>/done/<pid>`` is each worker's answer.
KV_PREFIX = "df_ray/interrupt"

#: The longest the handler waits for the stages to write their answers.
FLUSH_WAIT_S = 10.0

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal. ``exit_status``: 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


_installed = False
_received: int | None = None
_lock = threading.Lock()


def install() -> None:
    """Handle SIGINT and SIGTERM as the module docstring says (main thread only)."""
    global _installed, _received
    if threading.current_thread() is not threading.main_thread():
        return
    _received = None
    for sig in SIGNALS:
        signal.signal(sig, _handler)
    _installed = True


def rearm() -> None:
    """Install the handlers again if :func:`install` was called (after ``ray.init``, which
    sets its own SIGTERM handler)."""
    if _installed and threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _handler)


def uninstall() -> None:
    global _installed
    if _installed and threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT
                          else signal.SIG_DFL)
    _installed = False


def received() -> int | None:
    """The signal that stopped the run, if one did."""
    return _received


def _handler(signum: int, _frame: Any) -> None:
    global _received
    if _received is not None:  # a second signal: leave now, the Ray we started with us
        stop_started_ray()
        os._exit(128 + signum)
    _received = signum
    flush_now()  # this process's own writers (the library path runs the driver here)
    try:
        n = request_flush()
        if n:
            log.info("%d stage worker(s) wrote the answers they held", n)
    except Exception as e:  # the answers then come again on the rerun, nothing worse
        log.debug("asking the stages to write their answers failed: %s", e)
    raise Interrupted(signum)


def stop_started_ray() -> None:
    """End the local Ray node this process started, as ``ray.shutdown`` ends it: the driver
    disconnects (its raylet ending first would make Ray's core worker end this process with
    status 1), then the raylet goes by SIGTERM, so that its workers and agents see an
    expected end, then the GCS and the rest. Ray's automatic ``ray.init`` is turned off
    first: the pipeline's executor thread, still running, would otherwise start a new Ray on
    its next call. A Ray this process only joined has no processes here and is left alone;
    the caller leaves with ``os._exit`` next."""
    ray = sys.modules.get("ray")
    node = getattr(sys.modules.get("ray._private.worker"), "_global_node", None)
    if ray is None or node is None or not getattr(node, "all_processes", None):
        return
    # what Ray's threads say as the pipeline loses its Ray under them is noise
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        from ray._private import auto_init_hook

        auto_init_hook.enable_auto_connect = False  # RAY_ENABLE_AUTO_CONNECT=0, read at import
        ray.shutdown()
    except Exception as e:  # its processes then end with this one (fate sharing)
        log.debug("stopping the local Ray failed: %s", e)


def _job_key() -> str | None:
    try:
        import ray

        if not ray.is_initialized():
            return None
        return f"{KV_PREFIX}/{ray.get_runtime_context().get_job_id()}"
    except Exception:
        return None


def request_flush(wait_s: float = FLUSH_WAIT_S) -> int:
    """Ask this job's workers to write what they hold; wait until the stage workers said
    they did (no new answer for a second, at most ``wait_s``). How many answered."""
    key = _job_key()
    if key is None:
        return 0
    from ray.experimental.internal_kv import _internal_kv_list, _internal_kv_put

    _internal_kv_put(key, b"1", overwrite=True)
    deadline = time.monotonic() + wait_s
    seen, quiet_since = 0, time.monotonic()
    while time.monotonic() < deadline:
        n = len(_internal_kv_list(f"{key}/done/"))
        if n != seen:
            seen, quiet_since = n, time.monotonic()
        elif seen and time.monotonic() - quiet_since > 1.0:
            break
        elif not seen and time.monotonic() - quiet_since > 3.0:
            break  # no stage with anything to write (or none running)
        time.sleep(0.1)
    return seen


# ------------------------------------------------------------------------- in the workers

_flushers: weakref.WeakSet = weakref.WeakSet()
_watching = False


class _Flusher:
    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn


def on_interrupt(owner: Any, fn: Callable[[], None]) -> None:
    """Call ``fn`` (e.g. a cache writer's flush) when the run is interrupted, for as long as
    ``owner`` lives."""
    f = _Flusher(fn)
    with _lock:
        _flushers.add(f)
    # tie the flusher's life to its owner's
    try:
        owner.__dict__.setdefault("_df_ray_on_interrupt", []).append(f)
    except AttributeError:  # no __dict__: kept until the process ends
        _keep.append(f)
    watch()


_keep: list[_Flusher] = []


def flush_now() -> int:
    """Run every registered flush once; how many ran without raising."""
    with _lock:
        fs = list(_flushers)
    n = 0
    for f in fs:
        try:
            f.fn()
            n += 1
        except Exception as e:
            log.warning("writing held answers at an interrupt failed: %s", e)
    return n


def watch(interval_s: float = 0.5) -> None:
    """In a Ray worker: a daemon thread that runs the registered flushes once when the
    driver asks (see :func:`request_flush`). Started once per process."""
    global _watching
    with _lock:
        if _watching:
            return
        _watching = True
    threading.Thread(target=_watch, args=(interval_s,), name="df-ray-interrupt-watch",
                     daemon=True).start()


def _watch(interval_s: float) -> None:
    key = None
    while key is None:
        key = _job_key()
        if key is None:
            time.sleep(interval_s)
    from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_put

    while True:
        time.sleep(interval_s)
        try:
            if _internal_kv_get(key) is None:
                continue
        except Exception:
            continue
        with _lock:
            holding = len(_flushers)
        if holding:
            flush_now()
            with contextlib.suppress(Exception):
                _internal_kv_put(f"{key}/done/{os.getpid()}", b"1", overwrite=True)
        return
