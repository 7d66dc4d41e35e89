"""One cgroup per sandbox: memory (every process, memfd, shared memory, tmpfs and kernel
memory charged together), no swap, a process count and a CPU share, plus the counters the
runner reads from outside (memory peak, OOM kills, CPU time, CPU stall).

Two layouts behind one small interface (:func:`manager`, :class:`Cgroup`):

- **cgroup v2** (most clusters): a delegated directory whose ``cgroup.subtree_control``
  enables ``memory pids cpu``. Each sandbox is a child with ``memory.max``,
  ``memory.swap.max = 0``, ``pids.max``, ``cpu.weight`` and ``cpu.max``. The parent is
  ``$DF_RAY_SANDBOX_CGROUP`` when set, else the evaluator's own cgroup: there the evaluator
  first moves itself into a leaf child (``df_ray-evaluator``), since a cgroup v2 that holds
  processes cannot enable controllers for its children.
- **cgroup v1** (``memory``, ``pids`` and ``cpu`` hierarchies mounted separately): a child of
  the evaluator's own cgroup in each, with ``memory.limit_in_bytes`` and
  ``memory.memsw.limit_in_bytes`` (equal: no swap), ``pids.max``, ``cpu.shares`` and
  ``cpu.cfs_quota_us``. Where a cgroup2 hierarchy is mounted beside them (systemd's
  ``unified``, usually without controllers) the sandbox gets a cgroup there too, for what
  cgroup v2's core gives without controllers: ``cgroup.kill``, ``cpu.stat`` and
  ``cpu.pressure``.

A process joins by writing its own pid to each of :attr:`Cgroup.procs_files` before it runs
anything else (the runner starts the sandbox through ``/bin/sh -c 'echo $$ > ...; exec
bwrap ...'``), so everything the sandbox forks is charged to it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ENV_PARENT = "DF_RAY_SANDBOX_CGROUP"
ENV_DISABLE = "DF_RAY_SANDBOX_NO_CGROUP"
PREFIX = "df_ray-sandbox"
#: The controllers ``strict`` requires.
REQUIRED = ("memory", "pids", "cpu")

DELEGATION_HINT = (
    "give the evaluator a delegated cgroup: cgroup v2 with the memory, pids and cpu "
    "controllers enabled for its children (systemd: Delegate=yes on the unit, or "
    "`systemd-run --user --scope -p Delegate=yes ...`; a container: a private cgroup "
    "namespace with /sys/fs/cgroup mounted read-write, e.g. docker/podman "
    "--cgroupns=private and a writable cgroup mount, or Kubernetes with cgroup v2 and a "
    "writable /sys/fs/cgroup), or set DF_RAY_SANDBOX_CGROUP to such a directory; on a "
    "cgroup v1 host, write access to the memory, pids and cpu hierarchies")


class CgroupUnavailable(RuntimeError):
    """Per-sandbox cgroups cannot be had here; the message says what is missing."""


@dataclass(frozen=True)
class CgroupLimits:
    memory_bytes: int
    pids: int
    cpu_weight: int = 100  # v2 scale (1..10000, default 100); v1 cpu.shares = weight * 1024/100
    cpu_max: float | None = 1.0  # cores; None: no quota
    #: v2: ``memory.oom.group`` 1, so an OOM kill at the limit takes every process of the
    #: sandbox at once (the launcher with the program) rather than a process the program
    #: chose by its OOM priority; for a launcher that cannot be protected from the OOM killer
    oom_group: bool = False


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: Path) -> str:
    with open(path) as f:
        return f.read()


def _keyed(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _full_stall_us(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("full "):
            for part in line.split():
                if part.startswith("total="):
                    return int(part[6:])
    return None


@dataclass
class Cgroup:
    """One sandbox's cgroup (in one v2 directory, or one directory per v1 hierarchy)."""

    version: str  # "v2" | "v1"
    dirs: dict[str, Path]  # role -> directory: memory, pids, cpu, cpuacct, core (a v2 dir)
    limits: CgroupLimits
    _removed: bool = field(default=False, repr=False)

    @property
    def procs_files(self) -> list[str]:
        seen: list[str] = []
        for d in self.dirs.values():
            p = str(d / "cgroup.procs")
            if p not in seen:
                seen.append(p)
        return seen

    # -- counters, read from outside the sandbox

    def memory_peak(self) -> int | None:
        """Most memory charged to the sandbox at once, in bytes."""
        d = self.dirs["memory"]
        name = "memory.peak" if self.version == "v2" else "memory.max_usage_in_bytes"
        with contextlib.suppress(OSError, ValueError):
            return int(_read(d / name).strip())
        return None

    def oom_kills(self) -> int:
        """Processes the kernel killed because the sandbox hit its memory limit."""
        d = self.dirs["memory"]
        name = "memory.events" if self.version == "v2" else "memory.oom_control"
        with contextlib.suppress(OSError, ValueError):
            return _keyed(_read(d / name)).get("oom_kill", 0)
        return 0

    def cpu_usage_s(self) -> float:
        """CPU time (user + system) of every process the sandbox ever ran."""
        core = self.dirs.get("core")
        if core is not None:
            with contextlib.suppress(OSError, ValueError):
                return _keyed(_read(core / "cpu.stat")).get("usage_usec", 0) / 1e6
        acct = self.dirs.get("cpuacct")
        if acct is not None:
            with contextlib.suppress(OSError, ValueError):
                return int(_read(acct / "cpuacct.usage").strip()) / 1e9
        return 0.0

    def cpu_stall_s(self) -> float | None:
        """Time during which every runnable process of the sandbox waited for a CPU (PSI
        ``full``): time spent queueing, which the wall-clock limit does not count. None
        where the kernel does not report it for this cgroup."""
        core = self.dirs.get("core")
        if core is None:
            return None
        with contextlib.suppress(OSError, ValueError):
            us = _full_stall_us(_read(core / "cpu.pressure"))
            return None if us is None else us / 1e6
        return None

    def pids(self) -> list[int]:
        out: set[int] = set()
        for p in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                out.update(int(x) for x in _read(Path(p)).split())
        return sorted(out)

    # -- lifetime

    def kill(self, timeout_s: float = 10.0) -> bool:
        """SIGKILL every process in the sandbox and wait until none is left. True when the
        cgroup is empty."""
        core = self.dirs.get("core")
        end = time.monotonic() + timeout_s
        while True:
            pids = self.pids()
            if not pids:
                return True
            if core is not None and (core / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    _write(core / "cgroup.kill", "1")
            else:
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            if time.monotonic() > end:
                return False
            time.sleep(0.01)

    def reclaim(self) -> None:
        """Free what the sandbox's processes left charged to it (page cache, dentries and
        inodes, negative dentries of its failed lookups): removed with it, it would be
        reparented to the evaluator's own cgroup and count against the evaluator."""
        mem = self.dirs.get("memory")
        if mem is None:
            return
        with contextlib.suppress(OSError):
            if self.version == "v1":
                _write(mem / "memory.force_empty", "0")
            else:
                _write(mem / "memory.reclaim", str(self.limits.memory_bytes))

    def remove(self) -> None:
        if self._removed:
            return
        self.reclaim()
        for d in dict.fromkeys(self.dirs.values()):
            for _ in range(100):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the last process is being reaped
                    time.sleep(0.01)
        self._removed = True


# ----------------------------------------------------------------------------- managers


def _mounts() -> list[tuple[str, str, list[str]]]:
    """(mount point, fstype, options) of cgroup mounts."""
    out = []
    with contextlib.suppress(OSError):
        for line in _read(Path("/proc/self/mounts")).splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                out.append((parts[1].replace("\\040", " "), parts[2], parts[3].split(",")))
    return out


def _own_paths() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path."""
    out = {}
    with contextlib.suppress(OSError):
        for line in _read(Path("/proc/self/cgroup")).splitlines():
            _hid, ctrls, path = line.split(":", 2)
            if ctrls == "":
                out[""] = path
            for c in ctrls.split(","):
                if c:
                    out[c] = path
    return out


_CREATE_ATTEMPTS = 5


class Manager:
    """Creates the sandboxes' cgroups under one parent per hierarchy."""

    def __init__(self, version: str, parents: dict[str, Path]):
        self.version = version
        self.parents = parents  # role -> parent directory
        self._n = 0
        self._lock = threading.Lock()
        atexit.register(self.close)

    def close(self) -> None:
        """Remove the parents this process made, when no sandbox of any process uses them
        (an evaluator's own cgroup must stay removable by whoever created it)."""
        for d in dict.fromkeys(self.parents.values()):
            with contextlib.suppress(OSError):
                os.rmdir(d)

    def describe(self) -> str:
        return f"cgroup {self.version} ({', '.join(sorted({str(p) for p in self.parents.values()}))})"

    def create(self, limits: CgroupLimits) -> Cgroup:
        with self._lock:
            self._n += 1
            name = f"{os.getpid()}-{threading.get_ident() % 100000}-{self._n}"
        for attempt in range(_CREATE_ATTEMPTS):
            self._ensure_parents()
            dirs: dict[str, Path] = {}
            try:
                for role, parent in self.parents.items():
                    d = parent / name
                    if d not in dirs.values():
                        d.mkdir(mode=0o755)
                    dirs[role] = d
                cg = Cgroup(self.version, dirs, limits)
                self._configure(cg)
                return cg
            except BaseException as e:
                for d in dict.fromkeys(dirs.values()):
                    with contextlib.suppress(OSError):
                        os.rmdir(d)
                # Another process's exit removed an (empty) parent between the check and the
                # mkdir: make it again.
                if isinstance(e, FileNotFoundError) and attempt + 1 < _CREATE_ATTEMPTS:
                    continue
                raise
        raise AssertionError("unreachable")

    def _ensure_parents(self) -> None:
        """Make again a parent that another evaluator process removed at its exit
        (:meth:`close` removes a parent once it is empty, and every evaluator of one cgroup
        shares it): without this, a long-lived evaluator could create no sandbox after a
        short-lived neighbour, e.g. a ``df-ray`` subprocess, had exited."""
        for d in dict.fromkeys(self.parents.values()):
            if d.is_dir():
                continue
            d.mkdir(exist_ok=True)
            if self.version == "v2":
                enable = [c for c in REQUIRED if c not in _v2_subtree(d)]
                if enable:
                    _write(d / "cgroup.subtree_control", " ".join(f"+{c}" for c in enable))

    def _configure(self, cg: Cgroup) -> None:
        lim = cg.limits
        mem = cg.dirs["memory"]
        pids = cg.dirs["pids"]
        cpu = cg.dirs["cpu"]
        if self.version == "v2":
            _write(mem / "memory.max", str(lim.memory_bytes))
            if (mem / "memory.swap.max").exists():
                _write(mem / "memory.swap.max", "0")
            else:
                _require_no_swap("memory.swap.max")
            with contextlib.suppress(OSError):  # no zswap on many kernels
                _write(mem / "memory.zswap.max", "0")
            if lim.oom_group and (mem / "memory.oom.group").exists():
                _write(mem / "memory.oom.group", "1")
            _write(pids / "pids.max", str(lim.pids))
            _write(cpu / "cpu.weight", str(lim.cpu_weight))
            if lim.cpu_max is not None:
                _write(cpu / "cpu.max", f"{int(lim.cpu_max * 100000)} 100000")
        else:
            _write(mem / "memory.limit_in_bytes", str(lim.memory_bytes))
            if (mem / "memory.memsw.limit_in_bytes").exists():
                _write(mem / "memory.memsw.limit_in_bytes", str(lim.memory_bytes))
            else:
                _require_no_swap("memory.memsw.limit_in_bytes")
            with contextlib.suppress(OSError):
                _write(mem / "memory.swappiness", "0")
            # cgroup v1 does not charge TCP socket buffers to memory.limit_in_bytes: they get
            # a limit of their own (without it they are bounded only by the host's tcp_mem,
            # shared by every socket of the node). Datagram sockets, which v1 never charges,
            # are refused by the seccomp filter.
            tcp = mem / "memory.kmem.tcp.limit_in_bytes"
            if not tcp.exists():
                raise CgroupUnavailable(
                    f"the kernel's cgroup v1 memory controller has no {tcp.name} (socket "
                    "buffers would escape the sandbox's memory limit): use cgroup v2")
            _write(tcp, str(tcp_limit_bytes(lim.memory_bytes)))
            _write(pids / "pids.max", str(lim.pids))
            _write(cpu / "cpu.shares", str(max(2, lim.cpu_weight * 1024 // 100)))
            if lim.cpu_max is not None:
                _write(cpu / "cpu.cfs_period_us", "100000")
                _write(cpu / "cpu.cfs_quota_us", str(int(lim.cpu_max * 100000)))


def tcp_limit_bytes(memory_bytes: int) -> int:
    """cgroup v1: the TCP socket buffers a sandbox may hold, beside ``memory_bytes``."""
    return max(memory_bytes // 8, 4 * 1024 * 1024)


def _require_no_swap(missing: str) -> None:
    """Without swap accounting a cgroup cannot be kept out of swap: fine only when the
    machine has none."""
    total = None
    with contextlib.suppress(OSError, ValueError):
        for line in _read(Path("/proc/meminfo")).splitlines():
            if line.startswith("SwapTotal:"):
                total = int(line.split()[1])
    if total != 0:
        raise CgroupUnavailable(f"the kernel has no {missing} (swap accounting is off: boot "
                                "with swapaccount=1) and the machine has swap, so the "
                                "sandbox's memory could be swapped out instead of limited")


def _v2_controllers(d: Path) -> set[str]:
    with contextlib.suppress(OSError):
        return set(_read(d / "cgroup.controllers").split())
    return set()


def _v2_subtree(d: Path) -> set[str]:
    with contextlib.suppress(OSError):
        return set(_read(d / "cgroup.subtree_control").split())
    return set()


def _setup_v2(mount: Path, explicit: str | None) -> Manager:
    if explicit:
        parent = Path(explicit)
        if not parent.is_absolute():
            parent = mount / explicit.lstrip("/")
    else:
        own = _own_paths().get("")
        if own is None:
            raise CgroupUnavailable("this process is in no cgroup v2")
        parent = mount / own.lstrip("/")
    if not parent.is_dir():
        raise CgroupUnavailable(f"cgroup {parent} does not exist")
    missing = [c for c in REQUIRED if c not in _v2_controllers(parent)]
    if missing:
        raise CgroupUnavailable(f"cgroup {parent} has no {' '.join(missing)} controller "
                                "(not delegated to it)")
    if not os.access(parent, os.W_OK):
        raise CgroupUnavailable(f"cgroup {parent} is not writable by this user")
    base = parent / PREFIX
    enable = [c for c in REQUIRED if c not in _v2_subtree(parent)]
    try:
        holds_me = str(os.getpid()) in _read(parent / "cgroup.procs").split()
    except OSError:
        holds_me = False
    if enable and not explicit and holds_me:
        # A v2 cgroup holding processes cannot give its children controllers (the root of
        # a container's cgroup namespace included): move this process into a leaf first.
        leaf = parent / "df_ray-evaluator"
        leaf.mkdir(exist_ok=True)
        try:
            _write(leaf / "cgroup.procs", str(os.getpid()))
        except OSError as e:
            raise CgroupUnavailable(f"cannot move the evaluator into {leaf}: {e}") from None
    if enable:
        try:
            _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in enable))
        except OSError as e:
            others = ""
            with contextlib.suppress(OSError):
                n = len(_read(parent / "cgroup.procs").split())
                others = (f" ({n} other processes are in it: start them in a leaf cgroup, "
                          "e.g. a container entrypoint that first runs `mkdir "
                          "/sys/fs/cgroup/init && echo $$ > /sys/fs/cgroup/init/cgroup.procs`, "
                          f"or set {ENV_PARENT})") if n else ""
            raise CgroupUnavailable(f"cannot enable {' '.join(enable)} for the children of "
                                    f"{parent}{others}: {e}") from None
    base.mkdir(exist_ok=True)
    enable = [c for c in REQUIRED if c not in _v2_subtree(base)]
    if enable:
        try:
            _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in enable))
        except OSError as e:
            raise CgroupUnavailable(f"cannot enable {' '.join(enable)} in {base}: {e}") from None
    return Manager("v2", {"memory": base, "pids": base, "cpu": base, "core": base})


def _setup_v1(mounts: list[tuple[str, str, list[str]]]) -> Manager:
    own = _own_paths()
    by_ctrl: dict[str, Path] = {}
    unified: Path | None = None
    for point, fstype, opts in mounts:
        if fstype == "cgroup2":
            unified = Path(point)
            continue
        for c in ("memory", "pids", "cpu", "cpuacct"):
            if c in opts:
                by_ctrl.setdefault(c, Path(point))
    missing = [c for c in REQUIRED if c not in by_ctrl]
    if missing:
        raise CgroupUnavailable(f"no cgroup v1 {' '.join(missing)} hierarchy is mounted")
    parents: dict[str, Path] = {}
    for role in ("memory", "pids", "cpu", "cpuacct"):
        if role not in by_ctrl:
            continue
        d = by_ctrl[role] / own.get(role, "/").lstrip("/") / PREFIX
        try:
            d.mkdir(exist_ok=True)
        except OSError as e:
            if role in REQUIRED:
                raise CgroupUnavailable(f"cannot create {d}: {e}") from None
            continue
        parents[role] = d
    if unified is not None and "" in own:
        d = unified / own[""].lstrip("/") / PREFIX
        with contextlib.suppress(OSError):
            d.mkdir(exist_ok=True)
            parents["core"] = d
    if "core" not in parents and "cpuacct" not in parents:
        raise CgroupUnavailable("no cgroup reports CPU time (neither a cgroup2 mount nor "
                                "the v1 cpuacct hierarchy is usable)")
    return Manager("v1", parents)


_manager: Manager | CgroupUnavailable | None = None
_mlock = threading.Lock()


def manager() -> Manager:
    """This process's cgroup manager (set up once). Raises :class:`CgroupUnavailable`."""
    global _manager
    with _mlock:
        if _manager is None:
            try:
                _manager = _make()
            except CgroupUnavailable as e:
                _manager = e
        if isinstance(_manager, CgroupUnavailable):
            raise _manager
        return _manager


def reset() -> None:
    global _manager
    with _mlock:
        _manager = None


def _make() -> Manager:
    if os.environ.get(ENV_DISABLE, "") not in ("", "0"):
        raise CgroupUnavailable(f"per-sandbox cgroups disabled by {ENV_DISABLE}")
    mounts = _mounts()
    if not mounts:
        raise CgroupUnavailable("no cgroup file system is mounted")
    explicit = os.environ.get(ENV_PARENT, "").strip() or None
    v2 = [Path(m[0]) for m in mounts if m[1] == "cgroup2"]
    if explicit:  # the operator's cgroup v2 directory, or nothing
        if not v2:
            raise CgroupUnavailable(f"{ENV_PARENT}={explicit}: no cgroup2 file system is mounted")
        mount = next((m for m in v2 if explicit.startswith(str(m).rstrip("/") + "/")), v2[0])
        return _setup_v2(mount, explicit)
    errors = []
    for mount in v2:
        if not _v2_controllers(mount):
            continue  # a hybrid host's cgroup2 without controllers (they are v1's): below
        try:
            return _setup_v2(mount, None)
        except CgroupUnavailable as e:
            errors.append(f"cgroup v2: {e}")
    if any(m[1] == "cgroup" for m in mounts):
        try:
            return _setup_v1(mounts)
        except CgroupUnavailable as e:
            errors.append(f"cgroup v1: {e}")
    raise CgroupUnavailable("; ".join(errors) or "no usable cgroup hierarchy")
