"""Attack programs, one class of escape each, run at the strict level. Every effect is
checked from outside the sandbox: a file that must not exist, a listener that must receive
nothing, a secret that must not appear in the output."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from df_ray.sandbox import plan, run_tests, run_untrusted

pytestmark = pytest.mark.skipif(plan("strict").error is not None,
                                reason="strict sandbox unavailable (install bubblewrap)")

SECRET = "df-ray-test-secret-7f3a9c"
OK_TESTS = "def check(candidate):\n    assert candidate(2) == 4\n"


def _grade(program: str, **kw):
    return run_tests(program, tests=OK_TESTS, entry_point="f", timeout_s=kw.pop("timeout_s", 10),
                     **kw)


def _bad(res) -> None:
    assert res.status in ("failed", "timeout", "error"), res


# ----------------------------------------------------------------------------- file system


def test_writes_outside_the_work_dir_do_not_land(tmp_path):
    targets = [tmp_path / f"m{i}" for i in range(6)]
    code = f"""
import os, sqlite3, ctypes
t = {[str(t) for t in targets]!r}
def tryit(fn):
    try:
        fn()
    except BaseException as e:
        print('refused', type(e).__name__)
d = os.path.dirname(t[0])
tryit(lambda: os.open(os.path.basename(t[0]), os.O_CREAT | os.O_WRONLY,
                      dir_fd=os.open(d, os.O_RDONLY)))
tryit(lambda: os.open(os.path.basename(t[1]), os.O_CREAT | os.O_WRONLY,
                      dir_fd=os.open('/', os.O_RDONLY)))
tryit(lambda: sqlite3.connect(t[2]).execute('create table x(y)'))
libc = ctypes.CDLL(None)
tryit(lambda: libc.fclose(libc.fopen(t[3].encode(), b'w')))
import __main__
tryit(lambda: vars(__main__).clear())
tryit(lambda: open(t[4], 'w').write('x'))
tryit(lambda: open('/tmp/' + os.path.basename(t[5]), 'w').write('x'))
def f(x):
    return x * 2
"""
    res = _grade(code)
    for t in targets:
        assert not t.exists(), (t, res)
    assert not (tmp_path.parent / targets[5].name).exists()
    assert res.status != "error", res


def test_world_writable_host_dirs_are_not_reachable():
    name = f"df_ray_attack_{os.getpid()}_{time.monotonic_ns()}"
    code = (f"for d in ('/tmp', '/dev/shm', '/var/tmp', '/run'):\n"
            f"    try:\n        open(d + '/{name}', 'w').write('x')\n"
            f"    except OSError:\n        pass\n")
    run_untrusted(code)
    for d in ("/tmp", "/dev/shm", "/var/tmp", "/run"):
        assert not os.path.exists(f"{d}/{name}")


def test_host_secrets_are_not_readable():
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={"DF_RAY_TEST_TOKEN": SECRET, "PATH": "/usr/bin:/bin"})
    try:
        code = f"""
import os, glob
out = []
for p in ['/etc/shadow', '/etc/passwd', '/proc/{holder.pid}/environ', '/proc/{os.getpid()}/environ',
          '/proc/1/environ', *glob.glob('/proc/*/environ')]:
    try:
        out.append(open(p, 'rb').read().decode('latin-1'))
    except OSError as e:
        out.append(repr(e))
print(out)
print(dict(os.environ))
"""
        res = run_untrusted(code)
        assert SECRET not in res.stdout + res.stderr
        assert "root:" not in res.stdout
    finally:
        holder.kill()
        holder.wait()


def test_pth_file_cannot_be_planted():
    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    name = f"df_ray_attack_{os.getpid()}.pth"
    code = ("import site, sysconfig\n"
            f"for d in {sorted(dirs)!r} + [sysconfig.get_paths()['purelib']]:\n"
            f"    try:\n        open(d + '/{name}', 'w').write('import os\\n')\n"
            "    except OSError as e:\n        print(e)\n")
    run_untrusted(code)
    for d in dirs:
        assert not os.path.exists(os.path.join(d, name))


# ----------------------------------------------------------------------------- network


class _Listener:
    def __init__(self, family=socket.AF_INET, address=("127.0.0.1", 0)):
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.address = self.sock.getsockname()
        self.received: list[bytes] = []
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            c.settimeout(1)
            try:
                self.received.append(c.recv(100) or b"<connected>")
            except OSError:
                self.received.append(b"<connected>")
            c.close()

    def close(self):
        self.stop = True
        self.t.join(2)
        self.sock.close()


def test_loopback_and_setns_do_not_reach_the_host():
    lst = _Listener()
    port = lst.address[1]
    code = f"""
import os, socket, ctypes
def connect():
    s = socket.create_connection(('127.0.0.1', {port}), timeout=1)
    s.sendall(b'escaped')
for fn in [connect]:
    try: fn()
    except OSError as e: print('refused', e)
libc = ctypes.CDLL(None, use_errno=True)
for pid in ['1', str(os.getppid()), 'self', '{os.getpid()}'] + os.listdir('/proc'):
    try:
        fd = os.open('/proc/%s/ns/net' % pid, os.O_RDONLY)
    except OSError:
        continue
    if libc.setns(fd, 0x40000000) == 0:
        try: connect()
        except OSError as e: print('refused after setns', e)
"""
    try:
        run_untrusted(code, timeout_s=10)
        time.sleep(0.3)
        assert lst.received == []
    finally:
        lst.close()


def test_unix_sockets_outside_the_work_dir_are_unreachable(tmp_path):
    path = str(tmp_path / "s.sock")
    lst = _Listener(socket.AF_UNIX, path)
    abstract = f"\0df_ray_attack_{os.getpid()}"
    lst2 = _Listener(socket.AF_UNIX, abstract)
    code = f"""
import socket
for a in [{path!r}, {abstract!r}]:
    try:
        s = socket.socket(socket.AF_UNIX); s.settimeout(1); s.connect(a); s.sendall(b'escaped')
    except OSError as e:
        print('refused', e)
"""
    try:
        run_untrusted(code)
        time.sleep(0.3)
        assert lst.received == [] and lst2.received == []
    finally:
        lst.close()
        lst2.close()


# ----------------------------------------------------------------------------- processes


def test_no_capabilities_and_an_unprivileged_uid():
    res = run_untrusted("import os\nst = open('/proc/self/status').read()\n"
                        "print([l for l in st.splitlines() if l.startswith(('Cap', 'Uid', 'NoNewPrivs'))])\n"
                        "print(os.getuid())\n")
    assert res.status == "passed", res
    assert "CapEff:\\t0000000000000000" in res.stdout
    assert "NoNewPrivs:\\t1" in res.stdout
    assert res.stdout.strip().splitlines()[-1] != "0"


@pytest.mark.slow  # a fork bomb and its neighbours: over a minute under load
def test_fork_bomb_is_bounded_per_sandbox_and_neighbours_still_run():
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    threads = ("import threading\nts = [threading.Thread(target=lambda: None) for _ in range(30)]\n"
               "[t.start() for t in ts]\n[t.join() for t in ts]\n"
               "def f(x):\n    return x * 2\n")
    with ThreadPoolExecutor(4) as ex:
        bombs = [ex.submit(run_untrusted, bomb, timeout_s=4) for _ in range(2)]
        time.sleep(0.5)
        good = [ex.submit(_grade, threads, timeout_s=20) for _ in range(3)]
        assert [g.result().status for g in good] == ["passed"] * 3, [g.result() for g in good]
        for b in bombs:
            _bad(b.result())


# ----------------------------------------------------------------------------- verdict


FORGERIES = {
    "int_subclass_systemexit": (
        "class Yes(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
        "def f(x):\n    raise SystemExit(Yes(0))\n"),
    "module_level_exit_zero": "import os\ndef f(x):\n    return 0\nos._exit(0)\n",
    "sys_exit_in_call": "import sys\ndef f(x):\n    sys.exit(0)\n",
    "frames_and_fds": (
        "import sys, os\n"
        "fr = sys._getframe()\n"
        "while fr is not None:\n"
        "    for v in list(fr.f_locals.values()):\n"
        "        if isinstance(v, int) and 2 < v < 1024:\n"
        "            try: os.write(v, b'{\"mode\":\"tests\",\"decider\":{\"exited\":0}}\\n')\n"
        "            except OSError: pass\n"
        "    fr = fr.f_back\n"
        "for fd in range(3, 256):\n"
        "    try: os.write(fd, b'{\"decider\":{\"exited\":0}}\\n')\n"
        "    except OSError: pass\n"
        "def f(x):\n    return 0\n"),
    "settrace_rebinds_check": (
        "import sys\n"
        "def tracer(frame, event, arg):\n"
        "    frame.f_globals['check'] = lambda c: None\n"
        "    if 'candidate' in frame.f_locals: frame.f_locals['candidate'] = lambda *a: 4\n"
        "    return tracer\n"
        "sys.settrace(tracer)\n"
        "import threading\nthreading.settrace(tracer)\n"
        "def f(x):\n    return 0\n"),
    "eq_always_true": (
        "class A:\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"
        "def f(x):\n    return A()\n"),
    "int_subclass_return": (
        "class A(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
        "def f(x):\n    return A(0)\n"),
    "kill_everything": (
        "import os, signal\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit() and int(p) != os.getpid():\n"
        "        try: os.kill(int(p), signal.SIGKILL)\n"
        "        except OSError: pass\n"
        "def f(x):\n    return 0\n"),
    "ptrace_tests_memory": (
        "import os\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit() and int(p) != os.getpid():\n"
        "        try: open('/proc/%s/mem' % p, 'r+b')\n"
        "        except OSError as e: print(p, e)\n"
        "def f(x):\n    return 0\n"),
    "read_the_tests": (
        "import os\n"
        "src = ''\n"
        "for p in os.listdir('/proc'):\n"
        "    try: src += open('/proc/%s/cmdline' % p).read()\n"
        "    except OSError: pass\n"
        "try: src += open('/proc/1/mem','rb').read(10)\n"
        "except Exception: pass\n"
        "def f(x):\n    return 4 if 'candidate(2) == 4' in src else 0\n"),
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_forged_passes_fail(name):
    res = _grade(FORGERIES[name])
    _bad(res)


def test_exit_codes_are_checked_by_exact_type():
    code = ("class Zero(int):\n    def __eq__(self, o):\n        return True\n"
            "    __hash__ = int.__hash__\nraise SystemExit(Zero(0))\n")
    assert run_untrusted(code).status == "failed"
    assert run_untrusted("raise SystemExit(256)\n").status == "failed"
    assert run_untrusted("raise SystemExit(0)\n").status == "passed"


def test_an_honest_program_passes_and_a_wrong_one_fails():
    assert _grade("def f(x):\n    return x * 2\n").status == "passed"
    res = _grade("def f(x):\n    return x + 3\n")
    assert res.status == "failed" and "AssertionError" in res.stderr
    assert _grade("def g(x):\n    return 4\n").status == "failed"
    assert _grade("def f(x):\n    raise ValueError('no')\n").status == "failed"


def test_namespaces_ptrace_and_keyrings_are_refused():
    """Whatever the evaluator's uid: no nested namespace (the way back to capabilities), no
    ptrace, no keyrings; ordinary fork, threads and subprocesses still work."""
    code = """
import ctypes, os, threading, subprocess
libc = ctypes.CDLL(None, use_errno=True)
print('unshare', libc.unshare(0x10000000 | 0x00020000))
print('ptrace', libc.ptrace(16, 1, 0, 0))
print('setns', libc.setns(os.open('/proc/self/ns/net', os.O_RDONLY), 0))
t = threading.Thread(target=lambda: None); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print('sub', subprocess.run(['/usr/bin/true']).returncode)
"""
    res = run_untrusted(code)
    assert res.status == "passed", res
    assert "unshare -1" in res.stdout and "ptrace -1" in res.stdout, res.stdout
    assert "sub 0" in res.stdout
    if "seccomp" in res.isolation:
        assert "setns -1" in res.stdout
