"""Containment per sandbox, each effect checked from outside it: memory charged to the
sandbox's cgroup (its peak read by the host), CPU time of every process, socket families,
uid slots, the tests' own uid, and the smaller points (read-only launcher, no program files
in the tests' traceback, no pseudo-terminals)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import pytest

from df_ray.sandbox import plan, run_tests, run_untrusted

pytestmark = pytest.mark.skipif(plan("strict").error is not None,
                                reason="strict sandbox unavailable: " + str(plan("strict").error))

OK_TESTS = "def check(candidate):\n    assert candidate(2) == 4\n"
CORRECT = "def f(x):\n    return x * 2\n"
MB = 1024 * 1024


def _grade(program: str, **kw):
    return run_tests(program, tests=OK_TESTS, entry_point="f", **kw)


# ----------------------------------------------------------------------------- memory
# Each program is a correct answer that also tries to hold far more memory than the
# sandbox's limit in a way RLIMIT_AS (per process) does not see. The peak the host reads
# from the sandbox's cgroup stays within the limit, and the verdict says the limit struck.

LIMIT_MB = 256

HOGS = {
    "forked_children": f"""
import os, time
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        b = bytearray({200 * MB})
        for i in range(0, len(b), 4096):
            b[i] = 1
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
""",
    # each memfd below RLIMIT_FSIZE (16 MB), together three times the limit
    "memfd_write": f"""
import os
chunk = b"x" * {MB}
fds = []
for _ in range(50):
    fds.append(os.memfd_create("hog"))
    for _ in range(15):
        os.write(fds[-1], chunk)
""",
    "sysv_shm_detached": f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
size = {3 * LIMIT_MB * MB}
for _ in range(3):
    sid = libc.shmget(0, ctypes.c_size_t(size // 3), 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
    addr = libc.shmat(sid, None, 0)
    ctypes.memset(addr, 1, size // 3)
    libc.shmdt(ctypes.c_void_p(addr))
""",
    # /tmp, /dev/shm and the work dir are 64 MB each: 192 MB of files, limit 96 MB
    "tmpfs_files": f"""
chunk = b"y" * {MB}
for d in ("/tmp", "/dev/shm", "."):
    for i in range(63):
        try:
            with open(f"{{d}}/f{{i}}", "wb") as fh:
                fh.write(chunk)
        except OSError:
            break
""",
}


# Forked children that each take memory: the cgroup kills them one allocation at a time, about
# 30 s on 2 cores, so that case runs in the slow tier.
@pytest.mark.parametrize("hog", [pytest.param(h, marks=pytest.mark.slow)
                                 if h == "forked_children" else h for h in sorted(HOGS)])
def test_memory_is_bounded_per_sandbox(hog):
    limit = 96 if hog == "tmpfs_files" else LIMIT_MB
    res = _grade(HOGS[hog] + CORRECT, memory_mb=limit, timeout_s=60)
    assert res.memory_peak_bytes is not None, res
    assert res.memory_peak_bytes <= limit * MB, res
    assert res.memory_limit_hit, res
    assert f"memory limit ({limit} MB)" in res.detail, res


def test_tmpfs_inodes_are_charged_to_the_sandbox():
    # empty files cost kernel memory (inodes, dentries) but no tmpfs bytes
    code = ("import os\nfor i in range(400_000):\n"
            "    try:\n        open(f'/tmp/e{i}', 'w').close()\n"
            "    except OSError:\n        break\n") + CORRECT
    res = _grade(code, memory_mb=96, timeout_s=120)
    assert res.memory_peak_bytes is not None and res.memory_peak_bytes <= 96 * MB, res
    assert res.memory_limit_hit, res


def test_the_memory_limit_is_the_verdict_not_a_silent_failure():
    code = f"b = bytearray({3 * LIMIT_MB * MB})\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n"
    code += CORRECT
    res = _grade(code, memory_mb=LIMIT_MB, timeout_s=60)
    assert res.status == "failed", res
    # RLIMIT_AS (4x the limit) lets the allocation through; the cgroup stops its pages
    assert res.memory_limit_hit and "memory limit" in res.detail, res


# ----------------------------------------------------------------------------- CPU


def test_cpu_time_counts_every_process():
    code = ("import os\nfor _ in range(3):\n    if os.fork() == 0:\n        while True:\n"
            "            pass\nwhile True:\n    pass\n")
    res = run_untrusted(code, timeout_s=120, cpu_s=2)
    assert res.status == "timeout", res
    assert "CPU time limit" in res.detail, res
    assert res.cpu_time_s is not None and res.cpu_time_s >= 2, res


def _heavy(cpu_s: float) -> str:
    return (f"import time\ndef f(x):\n    end = time.process_time() + {cpu_s!r}\n"
            "    while time.process_time() < end:\n        pass\n    return x * 2\n")


HEAVY = _heavy(1.0)


SPINNER = ("import os\nfor _ in range(7):\n    if os.fork() == 0:\n        break\n"
           "while True:\n    pass\n")


def test_a_spinner_takes_at_most_its_cpu_quota():
    # 8 spinning processes: without the cgroup's cpu.max they would take every core
    res = run_untrusted(SPINNER, timeout_s=3, cpu_s=100)
    assert res.status == "timeout", res
    assert res.cpu_time_s is not None and res.cpu_time_s <= res.duration_s * 1.0 + 0.1, res


@pytest.mark.slow
def test_a_cpu_heavy_correct_answer_passes_beside_a_spinner():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as ex:
        spin = ex.submit(run_untrusted, SPINNER.replace("range(7)", "range(29)"), timeout_s=15)
        res = _grade(HEAVY, timeout_s=10)
        spin.result()
    assert res.status == "passed", res


# ----------------------------------------------------------------------------- sockets

SOCKETS = """
import errno, socket, sys
def tryit(name, fam, typ):
    try:
        s = socket.socket(fam, typ)
        if fam == socket.AF_VSOCK:
            s.bind((socket.VMADDR_CID_ANY, PORT))
        print(name, "open")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
tryit("vsock", socket.AF_VSOCK, socket.SOCK_STREAM)
tryit("netlink", socket.AF_NETLINK, socket.SOCK_RAW)
tryit("packet", socket.AF_PACKET, socket.SOCK_RAW)
tryit("unix", socket.AF_UNIX, socket.SOCK_STREAM)
tryit("inet", socket.AF_INET, socket.SOCK_STREAM)
tryit("inet6", socket.AF_INET6, socket.SOCK_STREAM)
try:
    socket.socketpair(socket.AF_UNIX)
    print("socketpair open")
except OSError as e:
    print("socketpair", e)
"""


def test_only_unix_and_inet_sockets_can_be_made():
    port = 40000 + os.getpid() % 20000
    res = run_untrusted(SOCKETS.replace("PORT", str(port)))
    seen = dict(line.split(" ", 1) for line in res.stdout.split("\n") if line)
    assert seen["vsock"] == "EAFNOSUPPORT", res
    assert seen["netlink"] == "EAFNOSUPPORT", res
    assert seen["packet"] == "EAFNOSUPPORT", res
    assert seen["unix"] == seen["inet"] == seen["inet6"] == seen["socketpair"] == "open", res
    # from outside: the sandbox holds no vsock port, so the host can bind the same one
    try:
        host = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    except OSError:
        return  # no vsock on this host
    with host:
        host.bind((socket.VMADDR_CID_ANY, port))


def test_loopback_is_up_and_nothing_else():
    # (socket.if_nameindex() asks netlink, which is refused: the netns's own /proc says)
    code = ("import socket\nprint(sorted(ln.split(':')[0].strip()\n"
            "             for ln in open('/proc/net/dev').readlines()[2:]))\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            "c = socket.create_connection(s.getsockname()); print('loopback ok')\n"
            "try:\n    socket.create_connection(('192.0.2.1', 80), timeout=2)\n"
            "except OSError as e:\n    print('outside', type(e).__name__)\n")
    res = run_untrusted(code)
    assert res.status == "passed", res
    lines = res.stdout.split("\n")
    assert lines[0] == "['lo']" and lines[1] == "loopback ok", res
    assert lines[2].startswith("outside"), res


# ----------------------------------------------------------------------------- uids


def test_the_tests_run_under_their_own_uid_and_cannot_be_reached():
    if os.geteuid() != 0:
        pytest.skip("the tests' own uid needs a root evaluator (user namespaces map one uid)")
    # The program, once called by the tests, looks for their process, tries to kill it and
    # to open its memory.
    code = """
import os, signal, sys
def f(x):
    me = os.getpid()
    for name in os.listdir('/proc'):
        if not name.isdigit() or int(name) in (1, me):
            continue
        pid = int(name)
        uid = [ln.split()[1] for ln in open(f'/proc/{pid}/status') if ln.startswith('Uid:')][0]
        owner = os.stat(f'/proc/{pid}/mem').st_uid
        try:
            open(f'/proc/{pid}/mem', 'rb')
            mem = 'open'
        except OSError as e:
            mem = type(e).__name__
        try:
            os.kill(pid, signal.SIGKILL)
            killed = 'killed'
        except OSError as e:
            killed = type(e).__name__
        sys.stderr.write(f'peer {pid} uid={uid} me={os.getuid()} owner={owner} mem={mem} '
                         f'kill={killed}\\n')
    return x * 2
"""
    res = _grade(code)
    peers = [ln for ln in res.stderr.split("\n") if ln.startswith("peer ")]
    assert peers, res
    for ln in peers:
        f = dict(kv.split("=") for kv in ln.split()[2:])
        assert f["uid"] != f["me"], ln  # a uid of its own
        assert f["owner"] == "0", ln  # undumpable: /proc/<pid> belongs to root
        assert f["mem"] == "PermissionError" and f["kill"] == "PermissionError", ln
    assert res.status == "passed", res  # the tests survived


def _slot_held(slot) -> bool:
    import fcntl

    from df_ray.sandbox import policy

    d = "/run/df_ray-sandbox" if os.access("/run", os.W_OK) else None
    assert d is not None
    fd = os.open(f"{d}/slot-{(slot.uid - policy.UID_BASE) // 2}", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_uid_slot_is_not_released_while_a_process_of_it_lives():
    if os.geteuid() != 0 or not os.access("/run", os.W_OK):
        pytest.skip("uid slots are a root evaluator's")
    from df_ray.sandbox.runner import _UidSlot

    slot = _UidSlot()
    proc = subprocess.Popen(["/bin/sleep", "60"],
                            user=slot.uid, group=slot.uid)
    try:
        assert slot.release(wait_s=0.5) is False
        assert _slot_held(slot)  # still out of the pool
        other = _UidSlot()
        assert other.uid != slot.uid
        other.release()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert slot.release(wait_s=10) is True
    assert not _slot_held(slot)


def test_uid_slots_rotate():
    if os.geteuid() != 0:
        pytest.skip("uid slots are a root evaluator's")
    from df_ray.sandbox.runner import _UidSlot

    uids = []
    for _ in range(3):
        s = _UidSlot()
        uids.append(s.uid)
        s.release()
    assert len(set(uids)) == 3


def test_a_timed_out_sandbox_leaves_no_process_of_its_uid():
    if os.geteuid() != 0:
        pytest.skip("uid slots are a root evaluator's")
    code = ("import os, threading, time\nprint(os.getuid(), flush=True)\n"
            "for _ in range(20):\n    if os.fork() == 0:\n"
            "        for _ in range(2):\n"
            "            threading.Thread(target=time.sleep, args=(60,)).start()\n"
            "        time.sleep(60)\n"
            "time.sleep(60)\n")
    res = run_untrusted(code, timeout_s=2)
    assert res.status == "timeout", res
    from df_ray.sandbox.runner import _uid_busy

    uid = int(res.stdout.split()[0])
    assert not _uid_busy((uid, uid + 1))  # its slot was released only after they were gone


# ----------------------------------------------------------------------------- small points


def test_the_launcher_is_read_only():
    code = ("try:\n    open('/.sandbox/launcher.py', 'a').write('x')\n    raise SystemExit(3)\n"
            "except OSError as e:\n    print(type(e).__name__)\n")
    res = run_untrusted(code)
    assert res.status == "passed", res


def test_the_tests_traceback_does_not_carry_the_programs_files():
    secret = "df-ray-planted-7c1e"
    code = (f"for n in ('tests.py', 'prompt.py', 'call.py', '<tests>'):\n"
            f"    open(n, 'w').write('# {secret}\\n' * 50)\n"
            "def f(x):\n    return x * 3\n")
    res = _grade(code)
    assert res.status == "failed", res
    assert "AssertionError" in res.stderr, res  # the tests' own traceback is there
    assert "assert candidate(2) == 4" in res.stderr, res  # with their source lines
    assert secret not in res.stderr + res.stdout, res


def test_no_pseudo_terminals():
    code = ("import os\ntry:\n    os.openpty()\n    raise SystemExit(3)\n"
            "except OSError as e:\n    print(type(e).__name__)\n")
    res = run_untrusted(code)
    assert res.status == "passed", res


# ----------------------------------------------------------------------------- refusal


@pytest.fixture
def fresh_plans():
    from df_ray.sandbox import policy

    policy.reset_cache()
    yield
    policy.reset_cache()


def test_strict_refuses_without_a_cgroup_of_its_own(monkeypatch, fresh_plans):
    monkeypatch.setenv("DF_RAY_SANDBOX_NO_CGROUP", "1")
    p = plan("strict")
    assert p.error is not None and "cgroup" in p.error and "Delegate=yes" in p.error
    res = run_tests(CORRECT, tests=OK_TESTS, entry_point="f", isolation="strict")
    assert res.status == "error" and "cgroup" in res.detail
    weak = run_tests(CORRECT, tests=OK_TESTS, entry_point="f", isolation="best_effort")
    assert weak.status == "passed" and "cgroup" not in weak.isolation, weak


def test_strict_names_the_controllers_a_cgroup_lacks(monkeypatch, fresh_plans):
    from df_ray.sandbox import cgroup

    v2 = [m for m, fstype, _o in cgroup._mounts() if fstype == "cgroup2"]
    bare = [m for m in v2 if not cgroup._v2_controllers(cgroup.Path(m)) & set(cgroup.REQUIRED)]
    if not bare:
        pytest.skip("no cgroup2 hierarchy without the memory, pids and cpu controllers here")
    monkeypatch.setenv("DF_RAY_SANDBOX_CGROUP", bare[0])
    p = plan("strict")
    assert p.error is not None and "no memory pids cpu controller" in p.error, p.error


@pytest.mark.slow  # the forked-children hog and a 5-s timeout: about 35 s
def test_cgroup_v1_without_a_cgroup2_hierarchy(fresh_plans):
    """A pure cgroup v1 host (no cgroup2 mounted beside): CPU time from cpuacct, the kill by
    signals until the cgroup is empty, no stall figure (the wall clock counts waiting)."""
    from df_ray.sandbox import cgroup

    m = cgroup.manager()
    if m.version != "v1" or "cpuacct" not in m.parents:
        pytest.skip("needs cgroup v1 with the cpuacct hierarchy")
    saved = cgroup._manager
    cgroup._manager = cgroup.Manager("v1", {k: v for k, v in m.parents.items() if k != "core"})
    try:
        hog = _grade(HOGS["forked_children"] + CORRECT, memory_mb=LIMIT_MB, timeout_s=60)
        assert hog.memory_limit_hit and hog.memory_peak_bytes <= LIMIT_MB * MB, hog
        assert hog.cpu_wait_s is None, hog
        code = ("import os, time\nprint(os.getuid(), flush=True)\n"
                "for _ in range(10):\n    if os.fork() == 0:\n        break\n"
                "end = time.process_time() + 1\nwhile time.process_time() < end:\n    pass\n"
                "time.sleep(60)\n")
        res = run_untrusted(code, timeout_s=5, cpu_s=100)
        assert res.status == "timeout" and res.cpu_time_s is not None and res.cpu_time_s > 0
        if os.geteuid() == 0:
            from df_ray.sandbox.runner import _uid_busy

            uid = int(res.stdout.split()[0])
            assert not _uid_busy((uid, uid + 1))
    finally:
        cgroup._manager = saved


def test_a_neighbour_evaluator_exiting_leaves_this_one_its_cgroups():
    """Every evaluator in one cgroup shares the sandboxes' parent cgroup, and each removes it
    at exit once it is empty. A long-lived evaluator must still create sandboxes after a
    short-lived neighbour (a ``df-ray`` subprocess) exited: its answers would otherwise all be
    'error' (the regression: a sweep graded 12 of 50 correct answers as errors). Parents of
    the test's own, so that no other sandbox keeps them from being removed."""
    from df_ray.sandbox import cgroup

    if plan("strict").error:
        pytest.skip(plan("strict").error)
    real = cgroup.manager()
    own = {role: d / f"neighbour-test-{os.getpid()}" for role, d in real.parents.items()}
    mine, neighbour = cgroup.Manager(real.version, own), cgroup.Manager(real.version, own)
    cgroup._manager = mine
    try:
        assert _grade(CORRECT).status == "passed"  # makes the parents
        assert all(d.is_dir() for d in own.values())
        neighbour.close()  # what the neighbour's exit does: the empty parents go
        assert not any(d.is_dir() for d in own.values())
        res = _grade(CORRECT)
        assert res.status == "passed", res
        assert all(d.is_dir() for d in own.values())
    finally:
        cgroup._manager = real
        mine.close()


def test_an_oom_kill_takes_the_whole_sandbox_where_the_launcher_is_unprotected(tmp_path):
    """cgroup v2: without CAP_SYS_RESOURCE the launcher cannot be shielded from the OOM
    killer, so the sandbox's cgroup has memory.oom.group 1: a kill at the limit takes every
    process at once (a failed answer), never one the program chose. Checked on the cgroup
    the manager configures (a v2 layout in a folder here; the real one where the host has
    v2), and on a real hog where it does."""
    from df_ray.sandbox import cgroup

    d = tmp_path / "sandbox"
    d.mkdir()
    for f in ("memory.swap.max", "memory.oom.group"):
        (d / f).write_text("0")
    m = cgroup.Manager("v2", {"memory": tmp_path, "pids": tmp_path, "cpu": tmp_path})
    for wanted in (True, False):
        (d / "memory.oom.group").write_text("0")
        m._configure(cgroup.Cgroup("v2", {"memory": d, "pids": d, "cpu": d},
                                   cgroup.CgroupLimits(64 * MB, 64, oom_group=wanted)))
        assert (d / "memory.oom.group").read_text() == ("1" if wanted else "0")
    if plan("strict").error or cgroup.manager().version != "v2":
        return
    hog = _grade(HOGS["forked_children"] + CORRECT, memory_mb=LIMIT_MB, timeout_s=60)
    assert hog.status != "error" and hog.memory_limit_hit, hog  # an answer's verdict
