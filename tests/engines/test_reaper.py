"""The reaper sidecar: a process killed with SIGKILL leaves none of its descendants running
(as vLLM's engine core would, holding the GPU), and a reused pid is never hit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from df_ray.engines import reaper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The watched process: starts the sidecar, then a child and a grandchild that would run for
# ten minutes (an engine core and its worker), and prints their pids.
PARENT = """
import subprocess, sys
from df_ray.engines import reaper
reaper.watch(interval=0.1, state=sys.argv[1])
child = subprocess.Popen([sys.executable, "-c", '''
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(g.pid, flush=True)
time.sleep(600)
'''], stdout=subprocess.PIPE, text=True)
grandchild = child.stdout.readline().strip()
print(child.pid, grandchild, flush=True)
import time; time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pids: list[int], limit_s: float = 60.0) -> list[int]:
    """The pids still running after ``limit_s`` (a bound on a hang, not a timing check)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end and not all(_gone(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if not _gone(p)]


def _watched(state, pids: list[int], limit_s: float = 60.0) -> bool:
    """Whether the sidecar noted ``pids`` within ``limit_s`` (a bound on a hang)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if state.exists() and set(pids) <= {int(x) for x in state.read_text().split()}:
            return True
        time.sleep(0.05)
    return False


def test_descendants_of_a_killed_process_are_reaped(tmp_path):
    env = {**os.environ, "PYTHONPATH": REPO}
    state = tmp_path / "watched"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(state)],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(x) for x in parent.stdout.readline().split()]
        assert len(pids) == 2 and not any(_gone(p) for p in pids)
        assert _watched(state, pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _wait_gone(pids) == []
    finally:
        if parent.poll() is None:
            for p in psutil.Process(parent.pid).children(recursive=True):
                p.kill()
            parent.kill()


def test_a_reused_pid_is_left_alone():
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        started = psutil.Process(victim.pid).create_time()
        assert reaper.reap({victim.pid: started - 100.0}) == []  # another process's start
        assert victim.poll() is None
        assert reaper.reap({victim.pid: started}) == [victim.pid]
        assert victim.wait() == -signal.SIGKILL
    finally:
        if victim.poll() is None:
            victim.kill()
