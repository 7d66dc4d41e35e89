"""Evaluator side: start the sandbox, feed it, time it out, read the launcher's verdict."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from df_ray.sandbox import policy, seccomp
from df_ray.sandbox.policy import Plan

SandboxStatus = Literal["passed", "failed", "timeout", "error"]

LAUNCHER = Path(__file__).with_name("launcher.py")
SETUP_ERROR = 70
#: The uid programs see inside a user namespace.
INNER_UID = 65534


@dataclass(frozen=True, slots=True)
class SandboxResult:
    status: SandboxStatus
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    detail: str = ""
    isolation: tuple[str, ...] = ()
    level: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0
    memory_mb: int = 1024
    cpu_s: int | None = None
    file_size_mb: int = 16
    tmpfs_mb: int = 64
    max_output_bytes: int = 64 * 1024
    nofile: int = 64
    nproc: int = 64


# ----------------------------------------------------------------------------- uid pool


class _UidSlot:
    """One uid of the pool, held (flock) for one sandbox's lifetime, across processes."""

    def __init__(self) -> None:
        d = Path("/run/df_ray-sandbox") if os.access("/run", os.W_OK) else \
            Path(tempfile.gettempdir()) / f"df_ray-sandbox-{os.getuid()}"
        d.mkdir(mode=0o700, exist_ok=True)
        self.fd = -1
        self.uid = -1
        start = (os.getpid() * 7919 + threading.get_ident()) % policy.UID_SLOTS
        for i in range(policy.UID_SLOTS):
            slot = (start + i) % policy.UID_SLOTS
            fd = os.open(d / f"slot-{slot}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.fd, self.uid = fd, policy.UID_BASE + slot
            return
        raise RuntimeError("no free sandbox uid slot")

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# ----------------------------------------------------------------------------- argv


def _bwrap_argv(plan: Plan, limits: Limits, launcher_fd: int, result_fd: int,
                seccomp_fd: int = -1) -> list[str]:
    assert plan.bwrap and plan.interpreter
    a = [plan.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
         "--unshare-cgroup-try", "--as-pid-1", "--die-with-parent", "--new-session",
         "--hostname", "sandbox", "--cap-drop", "ALL"]
    if plan.root:
        # Privileged mode: the launcher keeps only what it needs to drop its children to
        # their pool uid; the drop clears every capability, NO_NEW_PRIVS is set by bwrap.
        a += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        a += ["--unshare-user", "--disable-userns", "--uid", str(INNER_UID),
              "--gid", str(INNER_UID)]
    bound: list[str] = []
    made: set[str] = set()
    for d in policy.SYSTEM_DIRS:
        if os.path.islink(d):
            a += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            a += ["--ro-bind", d, d]
            bound.append(d)
    interp = plan.interpreter
    for p in (*interp.prefixes, os.path.dirname(interp.executable)):
        rp = os.path.realpath(p)
        if not any(rp == b or rp.startswith(b + "/") for b in bound):
            # Ancestors are created traversable (bwrap would copy the host's modes, and a
            # 0700 home would shut the unprivileged uid out).
            parts = rp.strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                anc = "/" + "/".join(parts[:i])
                if anc not in made:
                    a += ["--perms", "0755", "--dir", anc]
                    made.add(anc)
            a += ["--ro-bind", rp, rp]
            bound.append(rp)
    if seccomp_fd >= 0:
        a += ["--add-seccomp-fd", str(seccomp_fd)]
    a += ["--proc", "/proc", "--dev", "/dev",
          "--size", str(limits.tmpfs_mb * 1024 * 1024), "--perms", "1777", "--tmpfs", "/tmp",
          "--size", str(limits.tmpfs_mb * 1024 * 1024), "--perms", "1777",
          "--tmpfs", policy.WORKDIR,
          "--file", str(launcher_fd), policy.LAUNCHER_PATH,
          "--chdir", policy.WORKDIR,
          "--", interp.executable, "-I", "-S", "-B", policy.LAUNCHER_PATH, str(result_fd)]
    return a


def _frame(b: bytes) -> bytes:
    return len(b).to_bytes(4, "big") + b


# ----------------------------------------------------------------------------- helpers


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


def _drain(fd: int, limit: int = 8192) -> str:
    os.set_blocking(fd, False)
    chunks, total = [], 0
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


def _rmtree(path: Path) -> None:
    def onerror(func, p, exc):
        try:
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)


def _why(d: dict) -> str:
    if "signal" in d:
        try:
            return f"killed by {signal.Signals(d['signal']).name}"
        except ValueError:
            return f"killed by signal {d['signal']}"
    if d.get("exited") is None:
        return "no exit status"
    return f"exit status {d['exited']}"


# ----------------------------------------------------------------------------- core


def execute(plan: Plan, mode: Literal["program", "tests"], program: str,
            harness: dict | None, limits: Limits) -> SandboxResult:
    """Run one program under ``plan`` (see :func:`df_ray.sandbox.run_untrusted`)."""
    start = time.monotonic()
    if plan.error:
        return SandboxResult("error", None, "", "", 0.0, plan.error, (), plan.level)
    assert plan.interpreter is not None
    slot = _UidSlot() if plan.root and "uid" in plan.layers else None
    root = Path(tempfile.mkdtemp(prefix="df_ray_sandbox_"))
    r_fd = w_fd = launcher_fd = seccomp_fd = -1
    try:
        if plan.backend == "bwrap":
            workdir = policy.WORKDIR
        else:
            work = root / "work"
            work.mkdir()
            workdir = str(work)
            if slot is not None:
                os.chmod(root, 0o711)
                os.chown(work, slot.uid, slot.uid)
        env_inside = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                      "HOME": workdir, "TMPDIR": workdir}
        cfg = {
            "mode": mode, "workdir": workdir, "env": env_inside,
            "memory_mb": limits.memory_mb,
            "cpu_s": limits.cpu_s if limits.cpu_s is not None else int(limits.timeout_s) + 1,
            "file_size_mb": limits.file_size_mb, "nofile": limits.nofile,
            "nproc": limits.nproc, "uid": slot.uid if slot else None,
            "hooks": plan.backend != "bwrap",
            "read_roots": list(plan.interpreter.prefixes),
            "entry_point": (harness or {}).get("entry_point"),
        }
        payload = _frame(json.dumps(cfg).encode()) + _frame(program.encode("utf-8"))
        if mode == "tests":
            payload += _frame(json.dumps(harness).encode())
        r_fd, w_fd = os.pipe()
        launcher_fd = os.open(LAUNCHER, os.O_RDONLY)
        pass_fds = [w_fd, launcher_fd]
        if plan.backend == "bwrap":
            if "seccomp" in plan.layers:
                bpf = seccomp.build()
                assert bpf is not None
                seccomp_fd, sw = os.pipe()
                os.write(sw, bpf)  # a few hundred bytes: fits the pipe's buffer
                os.close(sw)
                pass_fds.append(seccomp_fd)
            argv = _bwrap_argv(plan, limits, launcher_fd, w_fd, seccomp_fd)
            cwd = "/"
        else:
            argv = [*(plan.unshare or ()), plan.interpreter.executable, "-I", "-S", "-B",
                    str(LAUNCHER), str(w_fd)]
            cwd = workdir
        out_path, err_path = root / "stdout", root / "stderr"
        timed_out = False
        with out_path.open("wb") as out_f, err_path.open("wb") as err_f:
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=out_f, stderr=err_f, cwd=cwd,
                    env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                    pass_fds=tuple(pass_fds), start_new_session=True, close_fds=True)
            except OSError as e:
                return SandboxResult("error", None, "", "", time.monotonic() - start,
                                     f"could not start the sandbox: {e}", plan.layers,
                                     plan.level)
            finally:
                os.close(w_fd)
                w_fd = -1

            def feed() -> None:
                try:
                    assert proc.stdin is not None
                    proc.stdin.write(payload)
                    proc.stdin.close()
                except (OSError, ValueError):
                    pass

            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
            try:
                proc.wait(timeout=limits.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)  # anything left in its group
            feeder.join(timeout=1)
            report_text = _drain(r_fd)
        rc = proc.returncode
        stdout = _read_capped(out_path, limits.max_output_bytes)
        stderr = _read_capped(err_path, limits.max_output_bytes)
        duration = time.monotonic() - start

        def result(status: SandboxStatus, detail: str) -> SandboxResult:
            return SandboxResult(status, rc, stdout, stderr, duration, detail, plan.layers,
                                 plan.level)

        if timed_out:
            return result("timeout", f"wall-clock timeout after {limits.timeout_s}s")
        report = None
        for line in report_text.splitlines():
            with contextlib.suppress(ValueError):
                report = json.loads(line)
        if not isinstance(report, dict):
            if rc == SETUP_ERROR or "bwrap:" in stderr:
                return result("error", "sandbox setup failed: " + stderr.strip()[-500:])
            return result("failed", f"no verdict from the launcher (exit status {rc})")
        decider = report.get("decider") or {}
        if decider.get("exited") == 0:
            return result("passed", "")
        if decider.get("exited") == SETUP_ERROR and "sandbox setup error" in stderr:
            return result("error", "sandbox setup failed: " + stderr.strip()[-500:])
        who = "tests" if mode == "tests" else "program"
        return result("failed", f"{who}: {_why(decider)}")
    finally:
        for fd in (r_fd, w_fd, launcher_fd, seccomp_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        _rmtree(root)
        if slot is not None:
            slot.release()


# ----------------------------------------------------------------------------- probe

_PROBE_PROGRAM = ("import collections, functools, hashlib, heapq, itertools, json, math, "
                  "random, re, string, typing, tempfile, os\n"
                  "def f(x):\n    return [x, (x,), {x: x}, 1.5, None, True]\n")
_PROBE_TESTS = {"entry_point": "f", "prelude": "",
                "tests": "def check(c):\n    assert c(3) == [3, (3,), {3: 3}, 1.5, None, True]\n"}


def probe_plan(cand: Plan) -> str | None:
    """Run a probe through ``cand``; None when it works, else why not."""
    res = execute(cand, "tests", _PROBE_PROGRAM, _PROBE_TESTS, Limits(timeout_s=60))
    if res.status == "passed":
        return None
    tail = (res.detail + " " + res.stderr[-400:]).strip()
    if cand.root and ("Permission denied" in tail or "ModuleNotFoundError" in tail
                      or "Errno 13" in tail):
        tail += (f" (the interpreter {cand.interpreter.executable if cand.interpreter else ''}"
                 " must be readable by other users: its installation is run by an "
                 "unprivileged uid; its parent directories need not be)")
    return f"a probe program failed in the sandbox ({res.status}): {tail}"
