"""Make df_ray's actors die with their node.

A Ray worker notices that its raylet died by probing the raylet's pid. Where nothing reaps
orphans (a container whose init does not), the killed raylet stays a zombie, the probe keeps
succeeding, and an actor blocked in ``ray.get`` outlives the job that started it, holding a
GPU or a core. The lifeline watches the parent pid instead: when the raylet dies, the worker
is re-parented, and the worker exits at once.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)

_started = False
_lock = threading.Lock()


def _raylet_pid() -> int:
    try:
        return int(os.environ.get("RAY_RAYLET_PID", ""))
    except ValueError:
        return os.getppid()


def hold(interval_s: float = 1.0) -> None:
    """Start (once per process) a daemon thread that exits the process when its raylet dies.

    Does nothing outside a Ray worker whose parent is the raylet (a driver, a test calling a
    stage class directly).
    """
    global _started
    with _lock:
        if _started:
            return
        parent = _raylet_pid()
        if os.getppid() != parent:
            return
        _started = True
    threading.Thread(target=_watch, args=(parent, interval_s), name="df-ray-lifeline",
                     daemon=True).start()


def _watch(parent: int, interval_s: float) -> None:
    stop = threading.Event()
    while not stop.wait(interval_s):
        if os.getppid() != parent:
            log.warning("the raylet (pid %d) is gone; this worker exits", parent)
            os._exit(1)
