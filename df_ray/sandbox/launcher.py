"""Sandbox launcher: the first process inside the sandbox (standard library only).

Run by :mod:`df_ray.sandbox.runner` as ``python -I -S -B launcher.py RESULT_FD``. Its input
comes on stdin as length-prefixed frames: a JSON header (limits, mode, uid), the untrusted
program, and (in ``tests`` mode) the trusted test harness. Under bubblewrap it is PID 1 of
the sandbox's PID namespace: the kernel ignores signals sent to it from inside, and when it
exits every process in the namespace is killed.

Process layout in ``tests`` mode::

    launcher (non-dumpable; holds RESULT_FD; reads the tests only after P is forked)
      ├─ P: the untrusted program (the module ``solution``, not ``__main__``), then a loop
      │     that calls the entry point for T
      └─ T: the tests, under a uid of their own when the evaluator is root, non-dumpable:
            calls a proxy of the entry point over two pipes, compares in its own memory

The verdict is decided by the launcher after T has exited: ``passed`` only when T exited
normally with status 0. T runs no untrusted code: arguments and return values cross the
pipes as data (:func:`encode` / :func:`decode`: built-in types, subclasses as their base
type's value, no pickle), so no object from the program, no ``__eq__`` of the program's,
and no frame of T's is reachable by it. P never holds RESULT_FD, never sees the tests (they
are read into the launcher after P was forked; P's fd 0 is /dev/null and ``sys.stdin``
raises on reads, as the reference harness's does), and can forge nothing but its own
answers. Killing or stopping T only makes the verdict ``failed``/``timeout``.

In ``program`` mode there is no T: the launcher reports how P ended (its exit status, with
``SystemExit`` codes accepted only when their type is exactly ``int``). A program chooses
its own exit status, so this mode reports, it does not grade.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import resource
import signal
import sys

MAX_FRAME = 32 * 1024 * 1024
MAX_DEPTH = 100
MAX_INT_HEX = 100_000
MAX_DECIMAL = 10_000
SETUP_ERROR = 70

# ----------------------------------------------------------------------------- framing


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n > 0:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            raise EOFError("pipe closed")
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def read_frame(fd: int, limit: int = MAX_FRAME) -> bytes:
    n = int.from_bytes(_read_exact(fd, 4), "big")
    if n > limit:
        raise ValueError(f"frame of {n} bytes exceeds {limit}")
    return _read_exact(fd, n)


def write_frame(fd: int, data: bytes) -> None:
    data = len(data).to_bytes(4, "big") + data
    while data:
        n = os.write(fd, data)
        data = data[n:]


# ----------------------------------------------------------------------------- data codec
# JSON with tagged containers; numbers never appear as JSON numbers (ints travel as hex,
# floats as repr), so decoding allocates nothing the limits do not bound.


def _as_itself(x, depth: int) -> bool:
    """Whether ``x`` is encoded as itself (None, a bool, a str); a value nested deeper than
    ``MAX_DEPTH`` is refused, both ways."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    return x is None or type(x) is bool or type(x) is str


def encode(x, depth: int = 0):
    """``x`` as tagged JSON. Built-in types, and instances of their subclasses (``Counter``,
    ``OrderedDict``, a namedtuple, an ``IntEnum``) as their base type: the value the
    reference harness's ``==`` would compare. Runs in the program's process only (what it
    sends is untrusted data either way)."""
    if _as_itself(x, depth):
        return x
    t = type(x)
    if t is int:
        return {"i": format(x, "x")}
    if t is float:
        return {"f": repr(x)}
    if t is list:
        return [encode(v, depth + 1) for v in x]
    if t is tuple:
        return {"t": [encode(v, depth + 1) for v in x]}
    if t is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]}
    if t is set:
        return {"s": [encode(v, depth + 1) for v in x]}
    if t is frozenset:
        return {"z": [encode(v, depth + 1) for v in x]}
    if t is bytes:
        return {"b": x.hex()}
    if t is complex:
        return {"c": [repr(x.real), repr(x.imag)]}
    fractions, decimal = sys.modules.get("fractions"), sys.modules.get("decimal")
    if fractions is not None and t is fractions.Fraction:
        return {"q": [format(x.numerator, "x"), format(x.denominator, "x")]}
    if decimal is not None and isinstance(x, decimal.Decimal):
        return {"m": decimal.Decimal.__str__(x)}
    base = _base_value(x)
    if base is not _NO_BASE:
        return encode(base, depth)
    number = _number_value(x)
    if number is not _NO_BASE:
        return encode(number, depth)
    raise TypeError(f"values of type {t.__name__} cannot cross the sandbox boundary")


def _number_value(x):
    """Any other ``numbers.Number`` (a ``Fraction`` subclass, numpy's scalars, a registered
    type) as the standard value ``==`` compares: int, Fraction, float or complex; numpy's
    ``bool_`` as a bool. Else ``_NO_BASE``."""
    t = type(x)
    if getattr(t, "__module__", "") == "numpy" and t.__name__ in ("bool_", "bool"):
        return bool(x)
    numbers = sys.modules.get("numbers")
    if numbers is None or not isinstance(x, numbers.Number):
        return _NO_BASE
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Rational):
        import fractions

        return fractions.Fraction(int(x.numerator), int(x.denominator))
    if isinstance(x, numbers.Real):
        return float(x)
    if isinstance(x, numbers.Complex):
        return complex(x)
    return _NO_BASE


_NO_BASE = object()


def _base_value(x):
    """A subclass instance of a built-in type as that type's own value (the base type's
    methods read it, not the subclass's overrides), or ``_NO_BASE``."""
    if isinstance(x, int):
        return int.__int__(x)
    if isinstance(x, float):
        return float.__float__(x)
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, bytes):
        return bytes(memoryview(x))
    if isinstance(x, complex):
        return complex(complex.__getattribute__(x, "real"), complex.__getattribute__(x, "imag"))
    if isinstance(x, dict):
        return dict(dict.items(x))
    if isinstance(x, list):
        return list(list.__iter__(x))
    if isinstance(x, tuple):
        return tuple(tuple.__iter__(x))
    if isinstance(x, frozenset):
        return frozenset(frozenset.__iter__(x))
    if isinstance(x, set):
        return set(set.__iter__(x))
    return _NO_BASE


def decode(x, depth: int = 0):
    if _as_itself(x, depth):
        return x
    t = type(x)
    if t is list:
        return [decode(v, depth + 1) for v in x]
    if t is not dict or len(x) != 1:
        raise ValueError(f"malformed value of type {t.__name__}")
    (tag, v), = x.items()
    if tag == "i" and type(v) is str and len(v) <= MAX_INT_HEX:
        return int(v, 16)
    if tag == "f" and type(v) is str and len(v) < 64:
        return float(v)
    if tag == "b" and type(v) is str:
        return bytes.fromhex(v)
    if tag == "c" and type(v) is list and len(v) == 2 and all(type(p) is str for p in v):
        return complex(float(v[0]), float(v[1]))
    if (tag == "q" and type(v) is list and len(v) == 2
            and all(type(p) is str and len(p) <= MAX_INT_HEX for p in v)):
        import fractions

        return fractions.Fraction(int(v[0], 16), int(v[1], 16))
    if tag == "m" and type(v) is str and len(v) <= MAX_DECIMAL:
        import decimal

        return decimal.Decimal(v)
    if type(v) is not list:
        raise ValueError(f"malformed {tag!r} value")
    if tag == "t":
        return tuple(decode(e, depth + 1) for e in v)
    if tag == "s":
        return {decode(e, depth + 1) for e in v}
    if tag == "z":
        return frozenset(decode(e, depth + 1) for e in v)
    if tag == "d":
        out = {}
        for kv in v:
            if type(kv) is not list or len(kv) != 2:
                raise ValueError("malformed dict item")
            out[decode(kv[0], depth + 1)] = decode(kv[1], depth + 1)
        return out
    raise ValueError(f"unknown tag {tag!r}")


def dumps(x) -> bytes:
    return json.dumps(encode(x), separators=(",", ":")).encode()


def loads(b: bytes):
    return decode(json.loads(b.decode("utf-8"), parse_int=str, parse_float=str,
                             parse_constant=str))


# ----------------------------------------------------------------------------- child setup


def _limits(cfg: dict) -> None:
    def setl(which: int, value: int) -> None:
        try:
            _soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass

    mem = int(cfg["memory_mb"]) * 1024 * 1024
    setl(resource.RLIMIT_AS, mem)
    setl(resource.RLIMIT_DATA, mem)
    setl(resource.RLIMIT_CPU, int(cfg["cpu_s"]))
    setl(resource.RLIMIT_FSIZE, int(cfg["file_size_mb"]) * 1024 * 1024)
    setl(resource.RLIMIT_NOFILE, int(cfg["nofile"]))
    setl(resource.RLIMIT_NPROC, int(cfg["nproc"]))
    setl(resource.RLIMIT_CORE, 0)
    setl(resource.RLIMIT_MEMLOCK, 0)
    setl(resource.RLIMIT_MSGQUEUE, 0)


class _NoInput:
    """``sys.stdin`` as the reference harness sets it (``WriteOnlyStringIO``): reading raises
    ``OSError`` (``input()`` too); file descriptor 0 is ``/dev/null``."""

    closed = False
    encoding = "utf-8"
    errors = "strict"

    def _refuse(self, *a, **k):
        raise OSError("stdin is not readable in the sandbox")

    read = readline = readlines = _refuse

    def readable(self) -> bool:
        return False

    def fileno(self) -> int:
        return 0

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def __iter__(self):
        return self

    def __next__(self):
        self._refuse()


def _become_child(cfg: dict, keep: tuple[int, ...], uid_key: str = "uid") -> None:
    """In a forked child, before any program code: default signals, stdin from /dev/null,
    every descriptor but 0-2 and ``keep`` closed, limits, the unprivileged uid
    (``cfg[uid_key]``, falling back to ``cfg["uid"]``)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    devnull = os.open("/dev/null", os.O_RDONLY)
    if devnull != 0:
        os.dup2(devnull, 0)
        os.close(devnull)
    sys.stdin = _NoInput()
    keep_sorted = sorted({0, 1, 2, *keep})
    lo = 3
    for fd in [*keep_sorted[3:], 1 << 16]:
        if fd > lo:
            os.closerange(lo, min(fd, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
        lo = fd + 1
    os.environ.clear()
    os.environ.update(cfg.get("env", {}))
    _limits(cfg)
    uid = cfg.get(uid_key)
    if uid is None:
        uid = cfg.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setgid(int(uid))
        os.setuid(int(uid))
        if os.getuid() != int(uid) or os.geteuid() != int(uid):
            raise OSError("uid drop did not take effect")


def _set_nondumpable() -> bool:
    """PR_SET_DUMPABLE 0: no process of the same uid may ptrace this one or open its
    ``/proc/<pid>/mem`` or ``fd/``."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        return False


def _become_subreaper() -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False



# ----------------------------------------------------------------------------- best_effort
# Python-level guards, installed only where the kernel layers are missing (best_effort
# without bubblewrap). Bypassable; the kernel layers are the guarantee.

_BLOCKED_EVENTS = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.kill", "os.killpg", "subprocess.Popen", "pty.spawn", "socket.__new__",
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function", "sqlite3.connect",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "os.chroot", "os.setuid",
    "os.setgid", "sys.remote_exec", "sys.settrace", "sys.setprofile",
})
_BLOCKED_MODULES = frozenset({
    "ctypes", "_ctypes", "subprocess", "_posixsubprocess", "multiprocessing", "sqlite3",
    "_sqlite3", "_multiprocessing", "socket", "_socket", "pty", "resource", "signal",
    "faulthandler", "ssl", "_ssl", "asyncio", "concurrent",
})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_PATH_EVENTS = {
    "os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)),
    "os.rename": ((0, 1), (2, 3)), "os.link": ((0, 1), (2, 3)), "os.symlink": ((1,), (2,)),
    "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)), "os.truncate": ((0,), ()),
    "os.utime": ((0,), (3,)), "os.mkfifo": ((0,), (2,)), "os.mknod": ((0,), (3,)),
    "os.setxattr": ((0,), ()), "os.removexattr": ((0,), ()),
    "shutil.copyfile": ((1,), ()), "shutil.copytree": ((1,), ()), "shutil.move": ((0, 1), ()),
    "shutil.rmtree": ((0,), ()),
}


def _install_hooks(workdir: str, read_roots) -> None:
    realpath = os.path.realpath
    fsdecode = os.fsdecode
    read_ok = (*[realpath(r) for r in read_roots], workdir)
    exact = frozenset({"/dev/null", "/dev/urandom", "/dev/random", "/dev/zero"})

    def inside(p, roots):
        try:
            rp = realpath(p)
        except Exception:
            return False
        return any(rp == r or rp.startswith(r.rstrip("/") + "/") for r in roots)

    def deny(event, detail=""):
        raise PermissionError(f"sandbox: {event} is not allowed {detail}".rstrip())

    def hook(event, args):
        if event in _BLOCKED_EVENTS:
            deny(event)
        if event == "import":
            mod = args[0] if args else ""
            if isinstance(mod, str) and mod.split(".")[0] in _BLOCKED_MODULES:
                deny(event, mod)
            return
        if event == "open":
            path, mode, flags = ([*list(args), None, None, None])[:3]
            if path is None or isinstance(path, int):
                return
            p = fsdecode(path)
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            if writing:
                if not inside(p, (workdir,)):
                    deny("writing", p)
            elif not (realpath(p) in exact or inside(p, read_ok)):
                deny("reading", p)
            return
        if event in ("os.listdir", "os.scandir"):
            path = args[0] if args else "."
            if isinstance(path, int):
                return
            if not inside(fsdecode(path) if path is not None else ".", read_ok):
                deny(event)
            return
        spec = _PATH_EVENTS.get(event)
        if spec is not None:
            paths, dirfds = spec
            for i in dirfds:  # CPython reports "no dir_fd" as None or -1
                if i < len(args) and args[i] is not None and args[i] != -1:
                    deny(event, "(relative to a directory descriptor)")
            for i in paths:
                if i >= len(args):
                    continue
                p = args[i]
                if p is None or isinstance(p, int):
                    if event in ("os.truncate", "os.chmod", "os.utime", "os.chown"):
                        continue  # an open descriptor: opening it was checked
                    deny(event, "(by file descriptor)")
                if not inside(fsdecode(p), (workdir,)):
                    deny(event, fsdecode(p))

    sys.addaudithook(hook)


# ----------------------------------------------------------------------------- P


def _exit_code(e: SystemExit) -> int:
    code = e.code
    if code is None:
        return 0
    if type(code) is int:  # exactly int: a subclass could pretend to equal anything
        return code if 0 <= code <= 255 else 1
    with contextlib.suppress(BaseException):
        sys.stderr.write(f"{code!s:.200}\n")
    return 1


def _flush() -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass


def _compile(source: str, cfg: dict):
    """The program compiled, its lines where ``inspect`` finds them, the offered packages on
    its path and (without bubblewrap) the hooks installed; a syntax error ends P here."""
    try:
        code = compile(source, "solution.py", "exec", dont_inherit=True)
        # inspect.getsource of its own functions reads these lines (as the reference's
        # exec of a string would need; no file is read for them)
        import linecache

        linecache.cache["solution.py"] = (len(source), None, source.splitlines(True),
                                          "solution.py")
        site = cfg.get("site")
        if site:
            sys.path.append(site)  # the packages the sandbox offers (numpy), read-only
        if cfg.get("hooks"):
            _install_hooks(cfg["workdir"], cfg.get("read_roots", ()))
    except SyntaxError:
        import traceback

        traceback.print_exc(limit=0)
        _flush()
        os._exit(1)
    return code


def _serve_tests(fn, req_r: int, resp_w: int) -> None:
    """Serve the tests: one call of the entry point per request frame, until T closes its
    end (then P exits)."""
    _exit = os._exit
    write = write_frame
    read = read_frame
    try:
        write(resp_w, b'{"ready":' + (b"true" if callable(fn) else b"false") + b"}")
    except OSError:
        _exit(1)
    while True:
        try:
            req = read(req_r)
        except (EOFError, OSError, ValueError):
            _flush()
            _exit(0)
        try:
            args, kwargs = loads(req)
            out = b'{"ok":' + dumps(fn(*args, **kwargs)) + b"}"
        except BaseException as e:  # the candidate's exception, reported as data
            try:
                msg = f"{type(e).__name__}: {e}"[:2000]
            except BaseException:
                msg = "exception"
            out = json.dumps({"error": msg}).encode()
        try:
            write(resp_w, out)
        except OSError:
            _exit(1)


def run_program(source: str, cfg: dict, req_r: int | None, resp_w: int | None) -> None:
    _exit = os._exit
    status = 1
    code = _compile(source, cfg)
    del source
    if cfg.get("seed") is not None:  # a run whose outputs must repeat (behaviour keys)
        import random

        random.seed(int(cfg["seed"]))
    # As the reference harness runs it: not as ``__main__`` (its ``exec(program, {})`` sees
    # ``__name__ == "builtins"``), so an ``if __name__ == "__main__":`` block does not run.
    # Here the program is a module named ``solution`` in ``sys.modules``, so its functions
    # pickle by reference (``multiprocessing``).
    import types

    mod = types.ModuleType("solution")
    mod.__file__ = "solution.py"
    sys.modules["solution"] = mod
    glb = mod.__dict__
    glb["__builtins__"] = builtins
    entry = cfg.get("entry_point")
    del cfg
    try:
        exec(code, glb)
        status = 0
    except SystemExit as e:
        status = _exit_code(e)
        if req_r is not None and status == 0:
            # Graded as the reference harness grades it: there, SystemExit (even exit(0))
            # ends the check program, which counts as a failure.
            with contextlib.suppress(BaseException):
                sys.stderr.write("the program raised SystemExit while loading\n")
            status = 1
    except BaseException:
        try:
            import traceback

            traceback.print_exc(limit=20)
        except BaseException:
            pass
    _flush()
    if req_r is None or resp_w is None or status != 0:
        _exit(status)
    _serve_tests(glb.get(entry), req_r, resp_w)


# ----------------------------------------------------------------------------- T


class CandidateError(Exception):
    """The program raised, returned something that cannot be compared, or went away."""


def run_tests(harness: dict, req_w: int, resp_r: int) -> None:
    def call(*args, **kwargs):
        try:
            write_frame(req_w, dumps([list(args), kwargs]))
            raw = read_frame(resp_r)
        except (EOFError, OSError) as e:
            raise CandidateError(f"the program went away: {e}") from None
        msg = json.loads(raw.decode("utf-8"), parse_int=str, parse_float=str,
                         parse_constant=str)
        if type(msg) is not dict or len(msg) != 1:
            raise CandidateError("malformed reply")
        if "error" in msg:
            raise CandidateError(str(msg["error"])[:2000])
        if "ok" not in msg:
            raise CandidateError("malformed reply")
        return decode(msg["ok"])

    try:
        hello = json.loads(read_frame(resp_r, 1024).decode())
    except (EOFError, OSError, ValueError):
        sys.stderr.write("tests: the program ended before the tests could call it\n")
        _flush()
        os._exit(1)
    if hello != {"ready": True}:
        sys.stderr.write(f"tests: the program does not define {harness['entry_point']}\n")
        _flush()
        os._exit(1)
    entry = harness["entry_point"]
    call.__name__ = call.__qualname__ = entry
    glb = {"__name__": "__main__", "__builtins__": builtins}

    def source(name: str, text: str):
        # "<name>": the traceback reads these lines from linecache, never from a file the
        # program may have written in the shared work directory.
        import linecache

        fname = f"<{name}>"
        linecache.cache[fname] = (len(text), None, text.splitlines(True), fname)
        return compile(text, fname, "exec", dont_inherit=True)

    try:
        exec(source("prompt", harness.get("prelude", "")), glb)
        glb[entry] = call
        exec(source("tests", harness["tests"]), glb)
        exec(source("call", harness.get("call", f"check({entry})")), glb)
    except BaseException:
        try:
            import traceback

            sys.stderr.write("tests: failed\n")
            traceback.print_exc(limit=8)
        except BaseException:
            pass
        _flush()
        os._exit(1)
    _flush()
    os._exit(0)


# ----------------------------------------------------------------------------- launcher


def _kill_descendants(me: int) -> None:
    """Outside a PID namespace: SIGKILL and reap every process left under the launcher."""
    import time

    end = time.monotonic() + 5.0
    while time.monotonic() < end:
        kids = []
        try:
            names = os.listdir("/proc")
        except OSError:
            return
        for name in names:
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2:].split()
            if len(fields) > 1 and int(fields[1]) == me:
                kids.append(int(name))
        if not kids:
            return
        for kid in kids:
            with contextlib.suppress(OSError):
                os.kill(kid, signal.SIGKILL)
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.01)
                break


def _describe(status: int | None) -> dict:
    if status is None:
        return {"exited": None}
    if os.WIFEXITED(status):
        return {"exited": os.WEXITSTATUS(status)}
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"exited": None}


def _set_oom_score(value: int, required: bool) -> None:
    """This process's ``oom_score_adj``. Written while the process holds CAP_SYS_RESOURCE
    (a root evaluator's launcher, and its children before their uid drop), it also becomes
    the floor the process and its descendants can never go below: the program cannot lower
    its OOM priority (``oom_score_adj_min``). ``required``: a failure is a setup error."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError:
        if required:
            raise


def _wait_byte(fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, 1)
        except InterruptedError:
            continue


def _setup() -> tuple[dict, str, bool]:
    """The header and the program from stdin, the launcher made non-dumpable, in its working
    directory and (a root evaluator) out of the memory limit's reach; with whether the
    children's OOM scores are to be set. A failure ends the launcher as a setup error."""
    try:
        cfg = json.loads(read_frame(0, 1 << 20))
        program = read_frame(0).decode("utf-8")
        if cfg.get("nondumpable", True) and not _set_nondumpable():
            raise OSError("prctl(PR_SET_DUMPABLE) failed")
        os.chdir(cfg["workdir"])
        # Root evaluator: the launcher is never the memory limit's victim; the verdict's
        # process (T) and the program (P) come first (set below, in each child).
        protect = bool(cfg.get("oom_protect"))
        if protect:
            _set_oom_score(-1000, True)
    except BaseException as e:
        sys.stderr.write(f"sandbox setup error: {e!r}\n")
        os._exit(SETUP_ERROR)
    return cfg, program, protect


def _program_child(program: str, cfg: dict, protect: bool, close: tuple[int, ...],
                   keep: tuple[int, ...], ready_w: int, go_r: int) -> None:
    """P, in the forked child: set up, say ready, wait for the go, run the program (never
    returns)."""
    try:
        for fd in close:
            os.close(fd)
        # At the sandbox's memory limit the kernel kills the program (and what it
        # forks) first, not the launcher or the tests; and (root) it cannot lower that.
        _set_oom_score(1000, protect)
        _become_child(cfg, (*keep, ready_w, go_r))
        # Non-dumpable whatever fs.suid_dumpable says (the seccomp filter refuses
        # PR_SET_DUMPABLE 1): its /proc files stay root's, so the program can neither
        # lower its oom_score_adj nor be dumped to a core_pattern pipe.
        if not _set_nondumpable():
            raise OSError("prctl(PR_SET_DUMPABLE) failed in the program's process")
        os.write(ready_w, b"P")
        os.close(ready_w)
        if _wait_byte(go_r) != b"g":
            os._exit(SETUP_ERROR)  # the launcher went away: run nothing
        os.close(go_r)
    except BaseException as e:
        sys.stderr.write(f"sandbox setup error: {e!r}\n")
        _flush()
        os._exit(SETUP_ERROR)
    req_r, resp_w = keep if keep else (None, None)
    run_program(program, cfg, req_r, resp_w)
    os._exit(SETUP_ERROR)  # not reached


def _start_tests(cfg: dict, protect: bool, close: tuple[int, ...], req_w: int, resp_r: int,
                 ready_w: int) -> tuple[int | None, str]:
    """Read the tests (only now: P never held them) and fork T; T's pid (None when it could
    not start) and the setup error, if any. In T: set up, say ready, run the tests."""
    try:
        harness = json.loads(read_frame(0))
    except BaseException as e:
        sys.stderr.write(f"sandbox setup error: {e!r}\n")
        os._exit(SETUP_ERROR)
    os.close(0)
    try:
        t_pid = os.fork()
    except OSError as e:
        return None, f"could not start the tests' process: {e!r}"
    if t_pid == 0:
        try:
            for fd in close:
                os.close(fd)
            _set_oom_score(0, protect)
            _become_child(cfg, (req_w, resp_r, ready_w), "tests_uid")
            # After the uid change (which resets it from fs.suid_dumpable): no process
            # of the program's may ptrace the tests or open their /proc/<pid>/mem.
            if not _set_nondumpable():
                raise OSError("prctl(PR_SET_DUMPABLE) failed in the tests' process")
            os.write(ready_w, b"T")
            os.close(ready_w)
        except BaseException as e:
            sys.stderr.write(f"sandbox setup error: {e!r}\n")
            _flush()
            os._exit(SETUP_ERROR)
        run_tests(harness, req_w, resp_r)
        os._exit(SETUP_ERROR)  # not reached
    return t_pid, ""


def _await_ready(ready_r: int, tests_mode: bool, setup_error: str) -> str:
    """Wait for every child's ready byte; the setup error (empty: every child is ready)."""
    ready = b""
    while not setup_error:
        try:
            b = os.read(ready_r, 2)
        except InterruptedError:
            continue
        if not b:
            break
        ready += b
    os.close(ready_r)
    want = {b"P", b"T"} if tests_mode else {b"P"}
    if not setup_error and {bytes([c]) for c in ready} != want:
        setup_error = "a sandbox process failed during its setup"
    return setup_error


def _reap(decider: int | None, p_pid: int, t_pid: int | None) -> dict[int, int]:
    """Reap until the deciding child has exited (as PID 1, orphans come here too); the
    statuses of P and T."""
    statuses: dict[int, int] = {}
    while decider not in statuses:
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid in (p_pid, t_pid):
            statuses[pid] = st
    return statuses


def main() -> None:
    result_fd = int(sys.argv[1])
    cfg, program, protect = _setup()
    pid1 = os.getpid() == 1
    if not pid1:
        _become_subreaper()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    tests_mode = cfg["mode"] == "tests"
    req_r = req_w = resp_r = resp_w = -1
    if tests_mode:
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
    # Every child reports on ``ready_w`` once it is set up; P then waits on ``go_r`` and runs
    # no program code before the launcher has seen every child ready. So a failure of the
    # sandbox's own setup is known to the launcher, before any untrusted code ran, and is
    # reported on RESULT_FD (which no child holds); nothing the program does can make one.
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    _flush()
    p_pid = os.fork()
    if p_pid == 0:
        _program_child(program, cfg, protect,
                       (result_fd, ready_r, go_w, *((req_w, resp_r) if tests_mode else ())),
                       (req_r, resp_w) if tests_mode else (), ready_w, go_r)
    del program
    os.close(go_r)
    t_pid = None
    setup_error = ""
    if tests_mode:
        os.close(req_r)
        os.close(resp_w)
        t_pid, setup_error = _start_tests(cfg, protect, (result_fd, ready_r, go_w), req_w,
                                          resp_r, ready_w)
        os.close(req_w)
        os.close(resp_r)
    else:
        os.close(0)
    os.close(ready_w)
    setup_error = _await_ready(ready_r, tests_mode, setup_error)
    if setup_error:
        # No untrusted code has run: this is the sandbox's fault, not the answer's.
        with contextlib.suppress(OSError):
            os.write(result_fd, (json.dumps({"setup_error": setup_error}) + "\n").encode())
        os.close(go_w)
        if not pid1:
            _kill_descendants(os.getpid())
        os._exit(SETUP_ERROR)
    # The sandbox is set up: the runner's wall clock starts now, and from here on a missing
    # verdict is the answer's failure, never an error.
    with contextlib.suppress(OSError):
        os.write(result_fd, b'{"started": true}\n')
    with contextlib.suppress(OSError):
        os.write(go_w, b"g")
        os.close(go_w)
    decider = t_pid if tests_mode else p_pid
    statuses = _reap(decider, p_pid, t_pid)
    report = {"mode": cfg["mode"], "decider": _describe(statuses.get(decider)),
              "program": _describe(statuses.get(p_pid))}
    try:
        os.write(result_fd, (json.dumps(report) + "\n").encode())
        os.close(result_fd)
    except OSError:
        pass
    if not pid1:
        _kill_descendants(os.getpid())
    os._exit(0)

if __name__ == "__main__":
    main()
