"""Run a parsing function under a wall-clock bound, on any thread.

sympy and math-verify can take seconds (or forever) on adversarial answers: deep nesting,
huge powers. math-verify's own timeout is ``signal.alarm``, which works only on the main
thread, and Ray stages parse on worker threads. ``call_bounded`` therefore bounds a call

- on the main thread, with a ``SIGALRM`` interval timer (no extra process), and
- on any other thread, by running it in a helper process (a plain ``python -m`` child that
  speaks length-prefixed pickles over its pipes) that is killed when it overruns; idle helpers
  are reused, so the cost is one round trip per call after the first.

Either way an overrun raises ``ParseTimeout``; the caller records it as the reason an output
is invalid. The function must be importable by name (a module-level function) and its
arguments and result picklable.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: Seconds a helper process may take to start and import what it preloads.
STARTUP_TIMEOUT_S = 120.0
#: Helper processes at most (per parent process); more threads wait for a free one.
MAX_WORKERS = max(2, min(8, os.cpu_count() or 2))
#: Idle helper processes kept for reuse (per parent process).
MAX_IDLE_WORKERS = MAX_WORKERS
#: Modules a helper imports before it reports ready (so a call's bound excludes imports);
#: a module that bounds its calls adds itself with ``preload(__name__)``, and a ``warm()`` it
#: defines runs there too.
PRELOAD: list[str] = ["sympy"]


def preload(module: str) -> None:
    """Have helper processes started from now on import ``module`` (and run its ``warm()``,
    if it has one) before they take a call."""
    if module not in PRELOAD:
        PRELOAD.append(module)


class ParseTimeout(BaseException):
    """A bounded parsing call ran past its time limit.

    A BaseException (like KeyboardInterrupt) so that the ``except Exception`` blocks inside
    math-verify and sympy cannot swallow it and turn a timeout into "no answer"."""


def _write(stream, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise ParseTimeout("no answer from the helper process in time")
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError("helper process closed its pipe")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read(fd: int, deadline: float | None) -> Any:
    (n,) = struct.unpack("<Q", _read_exact(fd, 8, deadline))
    return pickle.loads(_read_exact(fd, n, deadline))


class _Worker:
    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[3])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "df_ray.core.parsing._bounded", *PRELOAD],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.pid_owner = os.getpid()
        try:
            ready = _read(self.proc.stdout.fileno(), time.monotonic() + STARTUP_TIMEOUT_S)
        except BaseException:
            self.kill()
            raise
        if ready != "ready":
            self.kill()
            raise RuntimeError(f"helper process did not start: {ready!r}")

    def call(self, module: str, name: str, args: tuple, timeout_s: float) -> Any:
        _write(self.proc.stdin, (module, name, args))
        ok, value = _read(self.proc.stdout.fileno(), time.monotonic() + timeout_s)
        if not ok:
            raise value if isinstance(value, Exception) else RuntimeError(str(value))
        return value

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)


_lock = threading.Lock()
_idle: list[_Worker] = []
_slots = threading.BoundedSemaphore(MAX_WORKERS)


def _take() -> _Worker:
    with _lock:
        while _idle:
            w = _idle.pop()
            if w.pid_owner == os.getpid() and w.proc.poll() is None:
                return w
    return _Worker()


def _give(w: _Worker) -> None:
    with _lock:
        if len(_idle) < MAX_IDLE_WORKERS and w.pid_owner == os.getpid():
            _idle.append(w)
            return
    w.kill()


@atexit.register
def _shutdown() -> None:
    with _lock:
        workers = list(_idle)
        _idle.clear()
    for w in workers:
        if w.pid_owner == os.getpid():
            w.kill()


def _in_process_with_alarm(fn, args: tuple, timeout_s: float) -> Any:
    def on_alarm(signum, frame):
        raise ParseTimeout(f"ran past {timeout_s:g}s")

    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    old_delay, _ = signal.setitimer(signal.ITIMER_REAL, timeout_s)
    started = time.monotonic()
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:  # an outer timer was running: give it back what is left of it
            left = old_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3))


def _can_use_alarm() -> bool:
    return (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None))


def call_bounded(fn, *args: Any, timeout_s: float) -> Any:
    """``fn(*args)``, or ParseTimeout when it runs longer than ``timeout_s`` seconds.

    Exceptions raised by ``fn`` propagate (in a helper process they are re-raised here when
    they pickle, as RuntimeError otherwise).
    """
    if _can_use_alarm():
        return _in_process_with_alarm(fn, args, timeout_s)
    with _slots:
        w = _take()
        try:
            result = w.call(fn.__module__, fn.__qualname__, args, timeout_s)
        except (ParseTimeout, EOFError, OSError):
            w.kill()
            raise ParseTimeout(f"ran past {timeout_s:g}s (helper process killed)") from None
        except BaseException:
            _give(w)
            raise
        _give(w)
        return result


def _serve() -> None:  # pragma: no cover - runs in the helper process
    out = sys.stdout.buffer
    fd_in = sys.stdin.buffer.fileno()
    sys.stdout = sys.stderr  # nothing else may write to the result pipe
    for name in sys.argv[1:]:
        with contextlib.suppress(Exception):
            warm = getattr(importlib.import_module(name), "warm", None)
            if callable(warm):
                warm()
    with contextlib.suppress(Exception):
        import logging

        logging.getLogger("math_verify").setLevel(logging.ERROR)
    _write(out, "ready")
    while True:
        try:
            module, name, args = _read(fd_in, None)
        except EOFError:
            return
        try:
            fn: Any = importlib.import_module(module)
            for part in name.split("."):
                fn = getattr(fn, part)
            result = (True, fn(*args))
        except BaseException as e:  # report it; the parent decides
            try:
                pickle.dumps(e)
                result = (False, e)
            except Exception:
                result = (False, repr(e))
        _write(out, result)


if __name__ == "__main__":  # pragma: no cover
    _serve()
