"""Sandbox attacks that tests/tasks/test_sandbox.py does not already cover: secrets of the
*evaluator's* process (its /proc environ, a credentials file it points to), writes just
outside the work folder that would forge the verdict's inputs, a connection to a server that
really listens on the host's loopback, slow memory growth and thread bombs, and a
double-forked ``setsid`` daemon trying to outlive the timeout.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from df_ray.tasks.sandbox import run_untrusted, uid_drop_usable, unshare_prefix

SECRET_VALUES = ("hf_SECRET_token_1", "aws_SECRET_key_2", "gcp_SECRET_key_3")

# Scans every process's environment and the credentials file named in the evaluator's env.
STEAL = r"""
import os
found = []
try:
    found.append(repr(dict(os.environ)))
except Exception as e:
    found.append("env: " + type(e).__name__)
for path in [CREDS, "/proc/self/environ", "/proc/1/environ"] + [
        "/proc/%s/environ" % p for p in (os.listdir("/proc") if os.path.isdir("/proc") else [])
        if p.isdigit()]:
    try:
        with open(path, "rb") as f:
            found.append(f.read().decode("latin-1"))
    except Exception as e:
        found.append(path + ": " + type(e).__name__)
print("\n".join(found))
"""


def _evaluate_in_a_process_with_secrets(tmp_path, code: str, **kw) -> dict:
    """Run ``run_untrusted`` in a fresh evaluator process whose environment (at exec time,
    so also in /proc/<pid>/environ) holds the secrets."""
    creds = tmp_path / "gcp.json"
    creds.write_text(json.dumps({"private_key": SECRET_VALUES[2]}))
    env = {**os.environ, "HF_TOKEN": SECRET_VALUES[0],
           "AWS_SECRET_ACCESS_KEY": SECRET_VALUES[1],
           "GOOGLE_APPLICATION_CREDENTIALS": str(creds)}
    driver = ("import json, sys\nfrom df_ray.tasks.sandbox import run_untrusted\n"
              "code, kw = json.loads(sys.stdin.read())\n"
              "r = run_untrusted(code, **kw)\n"
              "print(json.dumps({'status': r.status, 'out': r.stdout + r.stderr}))\n")
    code = code.replace("CREDS", repr(str(creds)))
    r = subprocess.run([sys.executable, "-c", driver], input=json.dumps([code, kw]),
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_program_cannot_read_the_evaluators_secrets(tmp_path):
    res = _evaluate_in_a_process_with_secrets(tmp_path, STEAL, timeout_s=20)
    assert res["status"] == "failed", res  # the audit hook refuses the reads
    for s in SECRET_VALUES:
        assert s not in res["out"]


@pytest.mark.xfail(not uid_drop_usable(), strict=True, reason=(
    "OS level only (guard and audit hook off) and without the uid drop (the evaluator is not "
    "root, or this interpreter lives where an unprivileged uid cannot read it): the program "
    "runs as the evaluator's uid and sees the host's /proc (the PID namespace has no /proc of "
    "its own), so it can read /proc/<evaluator pid>/environ and files the evaluator can "
    "read. With the uid drop it passes (test_os_level_layers_with_the_uid_drop_...)"))
def test_os_level_layers_alone_hide_the_evaluators_secrets(tmp_path):
    res = _evaluate_in_a_process_with_secrets(tmp_path, STEAL, timeout_s=20, guard=False,
                                              audit=False)
    for s in SECRET_VALUES:
        assert s not in res["out"]


def test_program_cannot_write_next_to_its_work_dir():
    # The work dir's parent holds the program and the stdout/stderr files the verdict and the
    # evaluator read back; writing there would forge them.
    for target in ("../stdout", "../program.py", "../../df_ray_escape", "/proc/self/cwd/../x"):
        code = f"open({target!r}, 'w').write('FORGED')\n"
        res = run_untrusted(code, timeout_s=10)
        assert res.status == "failed", (target, res)
        assert "FORGED" not in res.stdout
    assert not os.path.exists("/tmp/df_ray_escape")


class _Listener:
    """A real TCP server on the host's 127.0.0.1; records whatever connects."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(1)
                try:
                    self.received.append(b"<connected>" + conn.recv(1024))
                except OSError:
                    self.received.append(b"<connected>")

    def close(self) -> None:
        self._stop.set()
        self._t.join(5)
        self.sock.close()


CONNECT = ("import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
           "s.sendall(b'exfiltrated')\n")
RAW_CONNECT = ("import _socket\ns = _socket.socket()\ns.settimeout(3)\n"
               "s.connect(('127.0.0.1', {port}))\ns.send(b'exfiltrated')\n")
LAYERS = {
    "default": {},
    "hook only": {"network": "hook"},
    "namespace only": {"network": "namespace", "guard": False, "audit": False},
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_program_cannot_reach_a_listening_socket(layer):
    kw = LAYERS[layer]
    if kw.get("network") == "namespace" and unshare_prefix() is None:
        pytest.skip("unshare not usable here")
    srv = _Listener()
    try:
        for code in (CONNECT, RAW_CONNECT):
            res = run_untrusted(code.format(port=srv.port), timeout_s=10, **kw)
            assert res.status == "failed", (layer, res)
        time.sleep(0.5)
        assert srv.received == [], srv.received
    finally:
        srv.close()


def test_slow_memory_growth_and_thread_bombs_are_stopped():
    grow = "chunks = []\nwhile True:\n    chunks.append(bytearray(8 * 1024 * 1024))\n"
    t0 = time.monotonic()
    res = run_untrusted(grow, memory_mb=256, timeout_s=20, guard=False, audit=False)
    assert res.status == "failed" and "MemoryError" in res.stderr, res
    threads = ("import threading, time\nwhile True:\n"
               "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    res = run_untrusted(threads, memory_mb=256, timeout_s=5)
    assert res.status in ("failed", "timeout"), res
    assert time.monotonic() - t0 < 60


DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(3)
        open(MARKER, "w").write("outlived")
        os._exit(0)
    os._exit(0)
time.sleep(60)
"""


def test_setsid_daemon_does_not_outlive_the_timeout_in_a_pid_namespace(tmp_path):
    if unshare_prefix() is None:
        pytest.skip("unshare not usable here")
    marker = tmp_path / "marker"
    res = run_untrusted(DAEMON.replace("MARKER", repr(str(marker))), timeout_s=1,
                        guard=False, audit=False, network="namespace")
    assert res.status in ("timeout", "failed")
    time.sleep(4)
    assert not marker.exists(), "a setsid daemon outlived the sandbox"


def test_setsid_daemon_is_refused_by_the_default_sandbox(tmp_path):
    marker = tmp_path / "marker"
    res = run_untrusted(DAEMON.replace("MARKER", repr(str(marker))), timeout_s=1,
                        network="hook")
    assert res.status in ("timeout", "failed")
    time.sleep(4)
    assert not marker.exists()


def test_setsid_daemon_without_pid_namespace(tmp_path):
    marker = tmp_path / "marker"
    res = run_untrusted(DAEMON.replace("MARKER", repr(str(marker))), timeout_s=1,
                        guard=False, audit=False, network="hook")
    assert res.status in ("timeout", "failed")
    time.sleep(4)
    exists = marker.exists()
    assert not exists, "a setsid daemon outlived the sandbox"


def test_setsid_daemon_does_not_outlive_a_program_that_ends_on_its_own(tmp_path):
    """Without a PID namespace the launcher, subreaper of the program's orphans, kills the
    daemon when the program returns (no timeout involved)."""
    marker = tmp_path / "marker"
    code = DAEMON.replace("MARKER", repr(str(marker))).replace("time.sleep(60)",
                                                               "time.sleep(0.5)")
    res = run_untrusted(code, timeout_s=20, guard=False, audit=False, network="hook")
    assert res.status == "passed", res
    time.sleep(4)
    assert not marker.exists(), "a setsid daemon outlived the sandbox"


# An interpreter the unprivileged uid can read (this one may live under /root).
SYSTEM_PY = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3")
                  if os.path.exists(p) and uid_drop_usable(p)), None)
needs_uid_drop = pytest.mark.skipif(SYSTEM_PY is None, reason=(
    "not root, or no interpreter that an unprivileged uid can read"))


@needs_uid_drop
def test_program_runs_as_an_unprivileged_uid_when_the_evaluator_is_root(tmp_path):
    res = run_untrusted("import os, tempfile\n"
                        "print(os.getuid(), os.getgid(), os.getgroups())\n"
                        "open('mine.txt', 'w').write('x')\n"
                        "fd, p = tempfile.mkstemp(); os.write(fd, b'y'); os.close(fd)\n"
                        "print(open(p).read(), open('mine.txt').read())\n",
                        timeout_s=20, guard=False, audit=False, python=SYSTEM_PY)
    assert res.status == "passed", res
    uid, gid, groups, *rest = res.stdout.split()
    assert (uid, gid, groups) == ("65534", "65534", "[]") and rest == ["y", "x"]
    assert "uid" in res.isolation


@needs_uid_drop
def test_os_level_layers_with_the_uid_drop_hide_the_evaluators_secrets(tmp_path):
    res = _evaluate_in_a_process_with_secrets(tmp_path, STEAL, timeout_s=20, guard=False,
                                              audit=False, python=SYSTEM_PY)
    assert res["status"] == "passed", res
    for s in SECRET_VALUES:
        assert s not in res["out"]
