"""Native engines (llama.cpp, vLLM) in their own process, for tests.

A native crash (SIGILL from an instruction the CPU lacks, SIGSEGV) kills the process it
happens in. Loaded into pytest's own process it kills the whole test session, so no test
reports anything. `IsolatedEngine` runs the engine in a child process instead and forwards
calls to it: a crash is then the failure of the one test that made the call, with the signal
and the native stack in the message, and the next call starts a fresh child.

``run(fn, ...)`` calls a test's own function on the engine in its process. Attribute access
is forwarded too (``engine.prompt_format``, ``engine.llm.tokenize(...)``):
values that pickle come back as values, anything else (a method, the Llama object) as a
reference that can be called or looked into further.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import signal
import tempfile
import traceback
from pathlib import Path
from typing import Any

from df_ray.pipeline.faults import exit_text, parse_fault_log

_SIMPLE = (type(None), bool, int, float, str, bytes)


_REF = object()  # "the value stays in the child: use a reference"


class EngineProcessDied(AssertionError):
    """The engine's process died during a call (the message names the signal)."""


def _simple(v: Any) -> bool:
    if isinstance(v, _SIMPLE):
        return True
    if isinstance(v, (list, tuple)):
        return all(_simple(x) for x in v)
    if isinstance(v, dict):
        return all(_simple(k) and _simple(x) for k, x in v.items())
    return False


def _serve(conn, spec: dict, fault_path: str) -> None:  # the child process
    import faulthandler

    os.setpgrp()  # its own process group: close() ends what the engine started too

    with open(fault_path, "w") as f:
        faulthandler.enable(file=f, all_threads=True)
        try:
            from df_ray.engines import make_engine

            engine = make_engine(spec)
        except BaseException as e:
            conn.send(("error", _portable(e)))
            return
        conn.send(("ok", None))
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return
            op, path, args, kwargs = msg
            try:
                obj = engine
                for name in path:
                    obj = getattr(obj, name)
                if op == "call":
                    conn.send(("ok", obj(*args, **kwargs)))
                elif op == "run":  # a test's function of the engine, run beside it
                    conn.send(("ok", args[0](engine, *args[1:], **kwargs)))
                elif callable(obj) or not _picklable(obj):
                    conn.send(("ref", None))
                else:
                    conn.send(("ok", obj))
            except BaseException as e:
                conn.send(("error", _portable(e)))


def _picklable(v: Any) -> bool:
    if _simple(v):
        return True
    try:
        pickle.dumps(v)
    except Exception:
        return False
    return True


def _portable(e: BaseException) -> BaseException:
    """The exception itself when it pickles, else a RuntimeError with its text."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        tb = "".join(traceback.format_exception(e))
        return RuntimeError(f"{type(e).__name__}: {e}\n{tb}")


class _Ref:
    def __init__(self, owner: IsolatedEngine, path: tuple[str, ...]) -> None:
        self._owner, self._path = owner, path

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._owner._get((*self._path, name))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._owner._request(("call", self._path, args, kwargs))


class IsolatedEngine:
    """``make_engine(spec)`` in a child process (see module docstring)."""

    def __init__(self, spec: Any, timeout_s: float = 900.0) -> None:
        self._spec = spec.model_dump(mode="json") if hasattr(spec, "model_dump") else dict(spec)
        self._timeout_s = timeout_s
        self._proc = None
        self._start()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # never fork a process that holds threads
        self._conn, child = ctx.Pipe()
        fd, self._fault_path = tempfile.mkstemp(prefix="df-ray-engine-", suffix=".log")
        os.close(fd)
        # Not a daemon: vLLM's async engine starts its engine core as a child process.
        self._proc = ctx.Process(target=_serve, args=(child, self._spec, self._fault_path),
                                 daemon=False)
        self._proc.start()
        child.close()
        self._receive()

    def _receive(self) -> Any:
        if not self._conn.poll(self._timeout_s):
            self.close()
            raise TimeoutError(f"the engine process did not answer in {self._timeout_s:.0f} s")
        try:
            kind, value = self._conn.recv()
        except (EOFError, ConnectionError):
            raise self._died() from None
        if kind == "error":
            raise value
        return _REF if kind == "ref" else value

    def _died(self) -> EngineProcessDied:
        self._proc.join(timeout=10)
        code = self._proc.exitcode
        fault = parse_fault_log(Path(self._fault_path).read_text(errors="replace"))
        self._proc = None
        what = fault.describe(frames=6) if fault else exit_text(code if code is not None else 0)
        return EngineProcessDied(f"the engine process ({self._spec.get('kind')}: "
                                 f"{self._spec.get('model')}) died: {what}")

    def _request(self, msg: tuple) -> Any:
        if self._proc is None:  # the previous process died: start a fresh one
            self._start()
        try:
            self._conn.send(msg)
        except (BrokenPipeError, ConnectionError):
            raise self._died() from None
        return self._receive()

    def _get(self, path: tuple[str, ...]) -> Any:
        out = self._request(("get", path, (), {}))
        return _Ref(self, path) if out is _REF else out

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._get((name,))

    def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(engine, *args, **kwargs)`` in the engine's process (``fn`` a module-level
        function): for what does not cross processes, such as futures of ``submit``."""
        return self._request(("run", (), (fn, *args), kwargs))

    def close(self) -> None:
        if self._proc is not None:
            # The whole group: vLLM's engine core, a child of the engine's process, too.
            with contextlib.suppress(OSError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.kill()
            self._proc.join(timeout=10)
            self._proc = None
        with contextlib.suppress(OSError):
            os.unlink(self._fault_path)
