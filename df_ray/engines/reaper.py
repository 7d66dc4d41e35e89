"""A sidecar that ends what an engine process started once that process is gone.

vLLM's async engine runs its engine core (and, with tensor parallelism, its workers) in child
processes that hold the GPU. A Ray actor killed with SIGKILL (``ray.kill``, the OOM killer, a
native crash) runs no cleanup, and its engine core may outlive it still holding the memory, so
the restarted actor's engine finds no free GPU memory. ``watch(pid)`` starts a small process in
a session of its own that notes ``pid``'s descendants (with their start times, so a reused pid
is never hit) every ``interval`` seconds while ``pid`` lives, and kills the last ones noted once
it dies. Ray's own ``RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper`` does the
same when the cluster enables it; this one needs nothing from the cluster.

Run as ``python -m df_ray.engines.reaper PID [INTERVAL [STATE]]``; ``STATE``, a file the
sidecar rewrites with the pids it would reap whenever they change (what it is watching).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: Seconds between two looks at the watched process's descendants.
INTERVAL_S = 1.0


def watch(pid: int | None = None, interval: float = INTERVAL_S,
          state: str | None = None) -> subprocess.Popen:
    """Start the sidecar for ``pid`` (default: this process); it ends by itself after it
    reaped, or when ``pid`` ends with no descendant left."""
    pid = os.getpid() if pid is None else pid
    return subprocess.Popen([sys.executable, "-m", "df_ray.engines.reaper", str(pid),
                             str(interval), *([state] if state else [])],
                            start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, close_fds=True)


def _descendants(proc) -> dict[int, float]:
    import psutil

    out = {}
    for child in proc.children(recursive=True):
        try:
            out[child.pid] = child.create_time()
        except psutil.Error:
            continue
    return out


def reap(seen: dict[int, float]) -> list[int]:
    """SIGKILL the processes of ``seen`` (pid -> start time) that are still the same
    processes; returns the pids killed."""
    import psutil

    killed = []
    for pid, started in seen.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() != started:
                continue  # the pid was reused by another process
            p.send_signal(signal.SIGKILL)
            killed.append(pid)
        except psutil.Error:
            continue
    return killed


def _write_state(path: str | None, pids: list[int]) -> None:
    if path:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(" ".join(map(str, pids)))
        os.replace(tmp, path)


def run(pid: int, interval: float = INTERVAL_S, state: str | None = None) -> None:
    import psutil

    me = os.getpid()
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    seen: dict[int, float] = {}
    written: set[int] = set()
    _write_state(state, [])
    while True:
        try:
            if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                break
            now = _descendants(proc)
        except psutil.NoSuchProcess:
            break
        now.pop(me, None)
        seen.update(now)
        # forget those that ended by themselves (their pids may be reused)
        seen = {p: t for p, t in seen.items() if psutil.pid_exists(p)}
        if set(seen) != written:
            written = set(seen)
            _write_state(state, sorted(written))
        time.sleep(interval)
    reap(seen)


if __name__ == "__main__":  # pragma: no cover - the sidecar's own process
    run(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else INTERVAL_S,
        sys.argv[3] if len(sys.argv) > 3 else None)
