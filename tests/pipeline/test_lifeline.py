"""The lifeline: a worker whose raylet dies exits even when nothing reaps the raylet."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import ray

from df_ray.pipeline import lifeline

# The intermediate process plays the raylet: it starts a "worker" that holds the lifeline,
# prints the worker's pid and waits.
RAYLET = r"""
import os, subprocess, sys
env = dict(os.environ, RAY_RAYLET_PID=str(os.getpid()))
worker = subprocess.Popen([sys.executable, "-c",
    "import time; from df_ray.pipeline import lifeline; lifeline.hold(0.1); time.sleep(120)"],
    env=env)
print(worker.pid, flush=True)
worker.wait()
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_worker_exits_when_its_raylet_is_killed():
    raylet = subprocess.Popen([sys.executable, "-c", RAYLET], stdout=subprocess.PIPE, text=True)
    worker = int(raylet.stdout.readline())
    time.sleep(1.0)
    assert not _gone(worker), "the worker died before its raylet"
    os.kill(raylet.pid, signal.SIGKILL)
    raylet.wait()
    deadline = time.monotonic() + 20
    while not _gone(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = not _gone(worker)
    if alive:
        os.kill(worker, signal.SIGKILL)
    assert not alive, "the worker outlived its raylet"


def test_hold_is_a_no_op_outside_a_raylet_child(monkeypatch):
    monkeypatch.setenv("RAY_RAYLET_PID", "1")  # not this process's parent
    monkeypatch.setattr(lifeline, "_started", False)
    lifeline.hold(0.1)
    assert not lifeline._started
    time.sleep(0.3)  # and the test process is still here


def test_ray_workers_are_children_of_the_raylet_it_names(ray_local):
    """The lifeline's premise on a real local Ray: RAY_RAYLET_PID is the worker's parent."""
    @ray.remote
    def where():
        return os.environ.get("RAY_RAYLET_PID"), os.getppid()

    named, parent = ray.get(where.remote())
    assert named is not None and int(named) == parent
