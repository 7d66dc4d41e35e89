"""Evaluator side: start the sandbox, feed it, time it out, read the launcher's verdict."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from df_ray.sandbox import cgroup, policy, seccomp
from df_ray.sandbox.policy import Plan

log = logging.getLogger(__name__)

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
    #: Read from the sandbox's cgroup after the run (None without the cgroup layer): the
    #: most memory charged to it at once, its CPU time, and whether the kernel killed a
    #: process of it at the memory limit.
    memory_peak_bytes: int | None = None
    cpu_time_s: float | None = None
    memory_limit_hit: bool = False
    #: Time every runnable process of the sandbox waited for a CPU (not counted as wall
    #: time); None where the kernel does not report it.
    cpu_wait_s: float | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"


#: A thread or process costs at least its kernel stack, task structures and the stack pages it
#: touches, charged to the sandbox's memory limit; the ceiling on tasks follows that limit.
MB_PER_TASK = 4
MIN_TASKS = 64


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0  # wall clock, not counting time spent waiting for a CPU
    memory_mb: int = 1024  # the whole sandbox (cgroup); rlimits are a looser second layer
    cpu_s: float | None = None  # CPU time of the whole sandbox; None: timeout_s
    file_size_mb: int = 16
    tmpfs_mb: int = 64  # each of /tmp, the work dir and /dev/shm
    max_output_bytes: int = 64 * 1024
    nofile: int = 64
    #: processes and threads of the whole sandbox (pids.max); None: what the memory limit
    #: allows, one per MB_PER_TASK (256 at 1024 MB, at least 64)
    nproc: int | None = None
    cpu_weight: int = 100  # relative CPU share (cgroup v2 cpu.weight scale)
    cpu_cores: float | None = 1.0  # CPU quota in cores (cpu.max); None: no quota

    @property
    def tasks(self) -> int:
        """The sandbox's process and thread ceiling."""
        if self.nproc is not None:
            return self.nproc
        return max(MIN_TASKS, self.memory_mb // MB_PER_TASK)

    @property
    def cpu_budget_s(self) -> float:
        return float(self.cpu_s) if self.cpu_s is not None else float(self.timeout_s)

    @property
    def wall_cap_s(self) -> float:
        """The wall-clock bound that holds even while the sandbox waits for a CPU."""
        return max(20 * self.timeout_s, self.timeout_s + 300.0)


# ----------------------------------------------------------------------------- uid pool

_rotation = itertools.count()


def _uid_busy(uids: tuple[int, ...]) -> bool:
    """Whether any task (process or thread) of ``uids`` is still alive or unreaped."""
    want = {str(u) for u in uids}
    try:
        names = os.listdir("/proc")
    except OSError:
        return False
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        if want & set(line.decode().split()[1:]):
                            return True
                        break
        except OSError:
            continue
    return False


class _UidSlot:
    """Two uids of the pool (the program's, the tests'), held (flock) for one sandbox's
    lifetime across processes. Slots rotate (a freed slot is the last one tried again), a
    slot whose uids still own a process is skipped, and one is released only once no
    process of its uids remains (a dying sandbox keeps its process count until reaped)."""

    def __init__(self) -> None:
        d = Path("/run/df_ray-sandbox") if os.access("/run", os.W_OK) else \
            Path(tempfile.gettempdir()) / f"df_ray-sandbox-{os.getuid()}"
        d.mkdir(mode=0o700, exist_ok=True)
        self.fd = -1
        self.uid = self.tests_uid = -1
        start = (os.getpid() * 7919 + next(_rotation) * 97) % policy.UID_SLOTS
        for i in range(policy.UID_SLOTS):
            slot = (start + i) % policy.UID_SLOTS
            fd = os.open(d / f"slot-{slot}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            uids = (policy.UID_BASE + 2 * slot, policy.UID_BASE + 2 * slot + 1)
            if _uid_busy(uids):  # left over from an evaluator that died
                os.close(fd)
                continue
            self.fd = fd
            self.uid, self.tests_uid = uids
            return
        raise RuntimeError("no free sandbox uid slot")

    def release(self, wait_s: float = 30.0) -> bool:
        """Release once no process of the slot's uids remains; False (slot kept held by
        this process) when some still do after ``wait_s``."""
        if self.fd < 0:
            return True
        end = time.monotonic() + wait_s
        while _uid_busy((self.uid, self.tests_uid)):
            if time.monotonic() > end:
                log.warning("sandbox uid %d/%d still owns processes; slot kept out of the pool",
                            self.uid, self.tests_uid)
                return False
            time.sleep(0.02)
        os.close(self.fd)
        self.fd = -1
        return True


# ----------------------------------------------------------------------------- argv

_CAP_SYS_RESOURCE = 24


def has_sys_resource() -> bool:
    """Whether this (root) evaluator holds CAP_SYS_RESOURCE, which setting an OOM priority
    floor (``oom_score_adj_min``) needs; some containers drop it from the bounding set."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_RESOURCE & 1)
    except (OSError, ValueError):
        pass
    return False



def _python_flags(seed: int | None) -> list[str]:
    """The launcher's interpreter flags: isolated mode (``-I``: no ``PYTHON*`` variable, no
    user site, no script directory on the path); with a seed, the same less ``-E``, so that
    the ``PYTHONHASHSEED`` of the environment this module sets takes effect (that
    environment is the whole of it: no other ``PYTHON*`` variable is in it)."""
    return ["-I", "-S", "-B"] if seed is None else ["-P", "-s", "-S", "-B"]


def _launcher_env(seed: int | None) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
           "MALLOC_ARENA_MAX": str(policy.MALLOC_ARENA_MAX)}
    if seed is not None:
        env["PYTHONHASHSEED"] = str(seed)
    return env


def _bwrap_argv(plan: Plan, limits: Limits, launcher_fd: int, result_fd: int,
                seccomp_fd: int = -1, seed: int | None = None) -> list[str]:
    assert plan.bwrap and plan.interpreter
    a = [plan.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
         "--unshare-cgroup-try", "--as-pid-1", "--die-with-parent", "--new-session",
         "--hostname", "sandbox", "--cap-drop", "ALL"]
    if plan.root:
        # Privileged mode: the launcher keeps only what it needs to drop its children to
        # their pool uid; the drop clears every capability, NO_NEW_PRIVS is set by bwrap.
        a += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        if has_sys_resource():
            # The launcher and its children set their OOM priority before the uid drop,
            # which makes it a floor no process of the program can go below.
            a += ["--cap-add", "CAP_SYS_RESOURCE"]
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
    offered = policy.offered_site(interp)
    if offered:
        a += ["--perms", "0755", "--dir", os.path.dirname(policy.SITE_DIR),
              "--perms", "0755", "--dir", policy.SITE_DIR]
    for path, name in offered:
        a += ["--ro-bind", path, f"{policy.SITE_DIR}/{name}"]
    if seccomp_fd >= 0:
        a += ["--add-seccomp-fd", str(seccomp_fd)]
    size = str(limits.tmpfs_mb * 1024 * 1024)
    a += ["--proc", "/proc", "--dev", "/dev",
          # POSIX semaphores and shared memory (multiprocessing) need a writable /dev/shm;
          # a tmpfs of its own, size-capped, charged to the sandbox's cgroup.
          "--size", size, "--perms", "1777", "--tmpfs", "/dev/shm",
          # No pseudo-terminals: the devpts instance bwrap mounts is hidden, so a program
          # cannot take the host-wide pty count (kernel.pty.max) from its neighbours.
          "--perms", "0755", "--tmpfs", "/dev/pts",
          "--size", size, "--perms", "1777", "--tmpfs", "/tmp",
          "--size", size, "--perms", "1777", "--tmpfs", policy.WORKDIR,
          "--perms", "0444", "--ro-bind-data", str(launcher_fd), policy.LAUNCHER_PATH,
          "--chdir", policy.WORKDIR,
          "--", interp.executable, *_python_flags(seed), policy.LAUNCHER_PATH, str(result_fd)]
    return a


def _in_cgroup(cg: cgroup.Cgroup, argv: list[str]) -> list[str]:
    """``argv`` started by a shell that first moves itself into ``cg`` (so every process
    the sandbox starts is charged to it), then becomes ``argv``."""
    files = cg.procs_files
    script = (f'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit {SETUP_ERROR}; '
              'shift; n=$((n - 1)); done; exec "$@"')
    return ["/bin/sh", "-c", script, "sh", str(len(files)), *files, *argv]


def _frame(b: bytes) -> bytes:
    return len(b).to_bytes(4, "big") + b


# ----------------------------------------------------------------------------- helpers


_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                       "\u2066-\u2069]")


def strip_controls(text: str) -> str:
    """``text`` without control characters (C0 but tab and newline, DEL, C1, and the
    bidirectional overrides): what a sandboxed program wrote can reach a log or a terminal,
    and must not move its cursor, rewrite its lines or reorder what it shows."""
    return _CONTROLS.sub("", text)


#: The pipe buffer the runner asks for (root may go above ``/proc/sys/fs/pipe-max-size``):
#: an output flood is discarded in chunks of this size.
PIPE_BUFFER = 1 << 20


class _CappedReader:
    """Reads a pipe to its end on a thread, keeping the first ``limit`` bytes: a program
    may print as much as it likes, its output costs no disk and at most ``limit`` memory.
    Past the limit the rest is moved to ``/dev/null`` inside the kernel (``splice``, in
    pipe-buffer-sized chunks), never copied into the evaluator: reading a flood costs the
    evaluator a few system calls per megabyte. ``copied`` counts the bytes it did copy."""

    def __init__(self, fd: int, limit: int):
        self.fd, self.limit = fd, limit
        self.chunks: list[bytes] = []
        self.kept = self.total = self.copied = 0
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BUFFER)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _discard(self) -> None:
        try:
            sink = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            sink = -1
        try:
            while True:
                if sink >= 0 and hasattr(os, "splice"):
                    try:
                        n = os.splice(self.fd, sink, PIPE_BUFFER)
                    except OSError:
                        os.close(sink)
                        sink = -1
                        continue
                else:
                    n = len(os.read(self.fd, 1 << 16))
                    self.copied += n
                if not n:
                    return
                self.total += n
        finally:
            if sink >= 0:
                os.close(sink)

    def _run(self) -> None:
        try:
            while self.kept <= self.limit:
                b = os.read(self.fd, min(1 << 16, self.limit + 1 - self.kept))
                if not b:
                    return
                self.copied += len(b)
                self.total += len(b)
                self.chunks.append(b)
                self.kept += len(b)
            self._discard()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(self.fd)

    def text(self, wait_s: float = 5.0) -> str:
        self.thread.join(wait_s)
        data = b"".join(self.chunks)
        text = strip_controls(data[: self.limit].decode("utf-8", errors="replace"))
        if self.total > self.limit:
            text += f"\n[... output truncated: {self.total} bytes ...]"
        return text


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


class _Waiter:
    """Waits for the sandbox's first process with a pidfd (woken at once when it exits, or
    when the launcher writes on the result pipe), else by polling. Keeps what the launcher
    wrote and notes when it said it had started."""

    def __init__(self, proc: subprocess.Popen, result_fd: int):
        self.proc = proc
        self.result_fd = result_fd
        self.pidfd = -1
        self.buf = b""
        self.started_at: float | None = None
        os.set_blocking(result_fd, False)
        with contextlib.suppress(AttributeError, OSError):
            self.pidfd = os.pidfd_open(proc.pid)

    def _read_result(self) -> None:
        while True:
            try:
                b = os.read(self.result_fd, 8192)
            except (BlockingIOError, OSError):
                return
            if not b:
                return
            self.buf = (self.buf + b)[-65536:]
            if self.started_at is None and b'"started"' in self.buf:
                self.started_at = time.monotonic()

    def wait(self, timeout: float) -> bool:
        if self.proc.poll() is not None:
            return True
        fds = [self.result_fd] + ([self.pidfd] if self.pidfd >= 0 else [])
        with contextlib.suppress(OSError, ValueError):
            select.select(fds, [], [], max(0.0, timeout))
        self._read_result()
        return self.proc.poll() is not None

    def close(self) -> None:
        if self.pidfd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = -1


def _supervise(proc: subprocess.Popen, cg: cgroup.Cgroup | None, limits: Limits,
               waiter: _Waiter) -> str | None:
    """Wait for the sandbox to end; None when it ended by itself, else why it was stopped.

    The wall clock starts when the launcher has set the sandbox up and read its input, and
    counts only while the sandbox is not stalled waiting for a CPU (the cgroup's
    ``cpu.pressure`` ``full`` time, where the kernel reports it). CPU time counts every
    process of the sandbox (its cgroup). ``wall_cap_s`` bounds a starved sandbox too."""
    t_start = time.monotonic()
    t0: float | None = None
    stall0 = 0.0
    budget = limits.cpu_budget_s
    try:
        while True:
            if waiter.wait(0.05):
                return None
            now = time.monotonic()
            if t0 is None and waiter.started_at is not None:
                t0 = waiter.started_at
                stall0 = (cg.cpu_stall_s() if cg else None) or 0.0
            if cg is not None and cg.cpu_usage_s() > budget:
                return f"CPU time limit ({budget:g}s of CPU, all processes)"
            if t0 is not None:
                stall = 0.0
                if cg is not None:
                    s = cg.cpu_stall_s()
                    stall = (s - stall0) if s is not None else 0.0
                if now - t0 - stall > limits.timeout_s:
                    extra = (f", not counting {stall:.1f}s waiting for a CPU"
                             if stall >= 0.05 else "")
                    return f"wall-clock timeout after {limits.timeout_s:g}s{extra}"
            if now - t_start > limits.wall_cap_s:
                return (f"wall-clock timeout after {now - t_start:.0f}s (setup and waiting "
                        "for a CPU included)")
    finally:
        waiter.close()


# ----------------------------------------------------------------------------- core


def _create_cgroup(plan: Plan, limits: Limits) -> cgroup.Cgroup:
    """The sandbox's cgroup. An OOM kill takes the whole sandbox where the launcher cannot be
    protected from it (no CAP_SYS_RESOURCE): a failed answer, never one process the program
    chose to be killed instead of itself."""
    return cgroup.manager().create(cgroup.CgroupLimits(
        memory_bytes=limits.memory_mb * 1024 * 1024, pids=limits.tasks,
        cpu_weight=limits.cpu_weight, cpu_max=limits.cpu_cores,
        oom_group=not (plan.root and has_sys_resource())))


def _workdir_and_site(plan: Plan, root: Path, slot: _UidSlot | None) -> tuple[str, str | None]:
    """The program's working directory and the site directory it is offered, as the
    launcher sees them (inside bubblewrap: fixed paths; without it: under ``root``)."""
    assert plan.interpreter is not None
    if plan.backend == "bwrap":
        workdir = policy.WORKDIR
    else:
        work = root / "work"
        work.mkdir()
        workdir = str(work)
        if slot is not None:
            os.chmod(root, 0o711)
            os.chown(work, slot.uid, slot.uid)
            os.chmod(work, 0o1777)  # the tests' uid shares it
    offered = policy.offered_site(plan.interpreter)
    if offered and plan.backend == "bwrap":
        return workdir, policy.SITE_DIR
    if not offered:
        return workdir, None
    site_dir = root / "site"  # best_effort without bubblewrap: links to the same directories
    site_dir.mkdir()
    for path, name in offered:
        os.symlink(path, site_dir / name)
    os.chmod(root, 0o711)
    site_dir.chmod(0o755)
    return workdir, str(site_dir)


def _launcher_config(plan: Plan, mode: str, limits: Limits, workdir: str, site: str | None,
                     slot: _UidSlot | None, cg: cgroup.Cgroup | None,
                     harness: dict | None) -> dict:
    """What the launcher is told (the first frame it reads)."""
    assert plan.interpreter is not None
    env_inside = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                  "HOME": workdir, "TMPDIR": workdir,
                  "MALLOC_ARENA_MAX": str(policy.MALLOC_ARENA_MAX), **policy.THREAD_ENV}
    mem_rlimit = limits.memory_mb * (policy.RLIMIT_AS_FACTOR if cg is not None else 1)
    return {
        "mode": mode, "workdir": workdir, "env": env_inside,
        "memory_mb": mem_rlimit,
        "cpu_s": int(limits.cpu_budget_s) + 1,
        "file_size_mb": limits.file_size_mb, "nofile": limits.nofile,
        # the cgroup's pids.max bounds the sandbox; RLIMIT_NPROC (per uid) stays a layer
        "nproc": limits.tasks, "uid": slot.uid if slot else None,
        "tests_uid": slot.tests_uid if slot else None,
        "hooks": plan.backend != "bwrap",
        "read_roots": list(plan.interpreter.prefixes),
        "entry_point": (harness or {}).get("entry_point"),
        "oom_protect": plan.root and has_sys_resource(),
        "site": site,
    }


def _seccomp_fd(cg: cgroup.Cgroup | None) -> int:
    """A pipe's read end holding the seccomp filter bubblewrap installs. cgroup v1 charges
    no datagram socket's buffers: UDP is refused there."""
    bpf = seccomp.build(deny_inet_datagrams=cg is None or cg.version == "v1")
    assert bpf is not None
    fd, sw = os.pipe()
    os.write(sw, bpf)  # a few hundred bytes: fits the pipe's buffer
    os.close(sw)
    return fd


def _verdict(report_text: str, started: bool, stopped: str | None, rc: int | None,
             stderr: str, mode: str) -> tuple[SandboxStatus, str]:
    """The run's status and why, from what the launcher wrote on the result pipe."""
    report = setup = None
    for line in report_text.splitlines():
        with contextlib.suppress(ValueError):
            d = json.loads(line)
            if isinstance(d, dict) and "decider" in d:
                report = d
            elif isinstance(d, dict) and "setup_error" in d:
                setup = str(d["setup_error"])
    if not started:
        # Only the launcher writes on the result pipe, and only it says "started": before
        # that no untrusted code ran, so what went wrong is the sandbox's (bubblewrap,
        # the launcher's setup), and stderr is theirs alone.
        why = setup or stopped or f"exit status {rc}"
        return "error", f"sandbox setup failed ({why}): " + stderr.strip()[-500:]
    if stopped is not None:
        return "timeout", stopped
    if not isinstance(report, dict):
        # Started, then no verdict: the launcher was killed or stopped by what the
        # program did (memory, a held pipe). The answer failed; it was no sandbox error.
        return "failed", ("no verdict from the launcher (the sandbox was killed before it "
                          f"decided; exit status {rc})")
    decider = report.get("decider") or {}
    if decider.get("exited") == 0:
        return "passed", ""
    who = "tests" if mode == "tests" else "program"
    return "failed", f"{who}: {_why(decider)}"


def _run_to_end(proc: subprocess.Popen, payload: bytes, r_fd: int,
                cg: cgroup.Cgroup | None, limits: Limits) -> tuple[_Waiter, str | None]:
    """Feed the launcher its payload and supervise it to its end (killed when a limit
    stops it, and whatever it left behind killed after); the waiter holds what it reported,
    with why it was stopped (None: it ended by itself)."""

    def feed() -> None:
        try:
            assert proc.stdin is not None
            proc.stdin.write(payload)
            proc.stdin.close()
        except (OSError, ValueError):
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    waiter = _Waiter(proc, r_fd)
    stopped = _supervise(proc, cg, limits, waiter)
    if stopped is not None:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything left in its group
    if cg is not None:
        cg.kill()  # anything left anywhere: the cgroup holds every process it started
    feeder.join(timeout=1)
    waiter._read_result()
    return waiter, stopped


def _result(plan: Plan, limits: Limits, cg: cgroup.Cgroup | None, status: SandboxStatus,
            detail: str, rc: int | None, stdout: str, stderr: str,
            duration: float) -> SandboxResult:
    """The result, with what the cgroup measured (memory peak, CPU, OOM kills, CPU stall)."""
    oom = cg.oom_kills() if cg is not None else 0
    mem_note = (f"; the sandbox's memory limit ({limits.memory_mb} MB) killed "
                f"{oom} process{'es' if oom > 1 else ''}") if oom else ""
    return SandboxResult(status, rc, stdout, stderr, duration, detail + mem_note,
                         plan.layers, plan.level,
                         cg.memory_peak() if cg is not None else None,
                         cg.cpu_usage_s() if cg is not None else None, oom > 0,
                         cg.cpu_stall_s() if cg is not None else None)


def _clean_up(proc: subprocess.Popen | None, fds: Sequence[int], cg: cgroup.Cgroup | None,
              root: Path, slot: _UidSlot | None) -> None:
    """Whatever a run leaves: its process group, its descriptors, its cgroup, its folder,
    its uid slot."""
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=10)
    for fd in fds:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
    if cg is not None:
        cg.kill()
        cg.remove()
    _rmtree(root)
    if slot is not None:
        slot.release()


def execute(plan: Plan, mode: Literal["program", "tests"], program: str,
            harness: dict | None, limits: Limits, seed: int | None = None) -> SandboxResult:
    """Run one program under ``plan`` (see :func:`df_ray.sandbox.run_untrusted`); ``seed``:
    see :func:`df_ray.sandbox.run_tests`."""
    start = time.monotonic()
    if plan.error:
        return SandboxResult("error", None, "", "", 0.0, plan.error, (), plan.level)
    assert plan.interpreter is not None
    slot = _UidSlot() if plan.root and "uid" in plan.layers else None
    cg: cgroup.Cgroup | None = None
    root = Path(tempfile.mkdtemp(prefix="df_ray_sandbox_"))
    r_fd = w_fd = launcher_fd = seccomp_fd = -1
    readers: list[_CappedReader] = []
    proc: subprocess.Popen | None = None
    try:
        if "cgroup" in plan.layers:
            try:
                cg = _create_cgroup(plan, limits)
            except (cgroup.CgroupUnavailable, OSError) as e:
                return SandboxResult("error", None, "", "", time.monotonic() - start,
                                     f"could not create the sandbox's cgroup: {e}",
                                     plan.layers, plan.level)
        workdir, site = _workdir_and_site(plan, root, slot)
        cfg = _launcher_config(plan, mode, limits, workdir, site, slot, cg, harness)
        cfg["seed"] = seed
        payload = _frame(json.dumps(cfg).encode()) + _frame(program.encode("utf-8"))
        if mode == "tests":
            payload += _frame(json.dumps(harness).encode())
        r_fd, w_fd = os.pipe()
        launcher_fd = os.open(LAUNCHER, os.O_RDONLY)
        pass_fds = [w_fd, launcher_fd]
        if plan.backend == "bwrap":
            if "seccomp" in plan.layers:
                seccomp_fd = _seccomp_fd(cg)
                pass_fds.append(seccomp_fd)
            argv = _bwrap_argv(plan, limits, launcher_fd, w_fd, seccomp_fd, seed)
            cwd = "/"
        else:
            argv = [*(plan.unshare or ()), plan.interpreter.executable,
                    *_python_flags(seed), str(LAUNCHER), str(w_fd)]
            cwd = workdir
        if cg is not None:
            argv = _in_cgroup(cg, argv)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=out_w, stderr=err_w, cwd=cwd,
                env=_launcher_env(seed),
                pass_fds=tuple(pass_fds), start_new_session=True, close_fds=True)
        except OSError as e:
            for fd in (out_r, err_r):
                os.close(fd)
            return SandboxResult("error", None, "", "", time.monotonic() - start,
                                 f"could not start the sandbox: {e}", plan.layers,
                                 plan.level)
        finally:
            for fd in (w_fd, out_w, err_w):
                os.close(fd)
            w_fd = -1
        if plan.root and has_sys_resource():
            # From outside too: bubblewrap's own process (the launcher's parent, which it
            # takes with it) is never the memory limit's victim.
            with contextlib.suppress(OSError), \
                    open(f"/proc/{proc.pid}/oom_score_adj", "w") as f:
                f.write("-1000")
        readers = [_CappedReader(out_r, limits.max_output_bytes),
                   _CappedReader(err_r, limits.max_output_bytes)]
        waiter, stopped = _run_to_end(proc, payload, r_fd, cg, limits)
        stderr = readers[1].text()
        status, detail = _verdict(waiter.buf.decode("utf-8", errors="replace"),
                                  waiter.started_at is not None, stopped, proc.returncode,
                                  stderr, mode)
        return _result(plan, limits, cg, status, detail, proc.returncode, readers[0].text(),
                       stderr, time.monotonic() - start)
    finally:
        _clean_up(proc, (r_fd, w_fd, launcher_fd, seccomp_fd), cg, root, slot)


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
