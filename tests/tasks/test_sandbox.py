"""Each attack must be contained: the evaluator survives, the verdict is not 'passed', and
nothing outside the sandbox's temporary folder changes."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from df_ray.tasks.sandbox import run_untrusted, unshare_prefix

ATTACKS = {
    "infinite_loop": "while True:\n    pass\n",
    "fork_bomb": "import os\nwhile True:\n    os.fork()\n",
    "huge_allocation": "x = bytearray(100 * 1024 ** 3)\n",
    "os_exit_zero": "import os\nos._exit(0)\n",
    "kill_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                   "raise SystemExit(3)\n",
    "kill_parent_posix": "import posix\nposix.kill(posix.getppid(), 9)\nraise SystemExit(3)\n",
    "output_flood": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
    "sys_exit_zero": "import sys\nsys.exit(0)\n",
    "subprocess": "import subprocess\nsubprocess.run(['true'])\n",
    "socket": "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n",
    "ctypes": "import ctypes\nctypes.CDLL(None).kill(0, 9)\n",
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_is_contained(name):
    t0 = time.monotonic()
    res = run_untrusted(ATTACKS[name], timeout_s=3, memory_mb=512)
    assert res.status in ("failed", "timeout"), (name, res)
    assert time.monotonic() - t0 < 15
    assert os.getpid() > 0  # still here
    assert len(res.stdout) <= 64 * 1024 + 100


def test_good_program_passes_and_sees_its_workdir():
    res = run_untrusted("open('a.txt', 'w').write('hi')\nprint(open('a.txt').read())\n")
    assert res.status == "passed", res
    assert res.stdout.strip() == "hi"


def test_failures_and_timeouts_are_reported():
    assert run_untrusted("assert 1 == 2\n").status == "failed"
    assert run_untrusted("import time\ntime.sleep(30)\n", timeout_s=1).status == "timeout"
    assert "SyntaxError" in run_untrusted("def f(:\n").stderr


def test_writes_outside_the_sandbox_fail(tmp_path):
    target = tmp_path / "outside.txt"
    target.write_text("original")
    victims = [Path("/tmp/df_ray_pwned"), tmp_path / "new.txt"]
    for v in victims[:1]:
        if v.exists():
            v.unlink()
    codes = [
        "open('/tmp/df_ray_pwned', 'w').write('x')\n",
        f"open({str(tmp_path / 'new.txt')!r}, 'w').write('x')\n",
        f"open({str(target)!r}, 'a').write('x')\n",
        f"import os\nos.remove({str(target)!r})\n",
        f"import os\nos.open({str(target)!r}, os.O_WRONLY | os.O_TRUNC)\n",
        f"import os\nos.symlink({str(target)!r}, 'link')\nopen('link', 'w').write('x')\n",
        f"import pathlib\npathlib.Path({str(tmp_path / 'd')!r}).mkdir()\n",
        f"import shutil\nshutil.copyfile('/etc/hostname', {str(tmp_path / 'c')!r})\n",
        f"import os\nos.rename({str(target)!r}, 'stolen')\n",
    ]
    for code in codes:
        res = run_untrusted(code, timeout_s=5)
        assert res.status == "failed", (code, res)
    assert target.read_text() == "original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside.txt"]
    assert not Path("/tmp/df_ray_pwned").exists()


def test_os_level_layers_hold_without_the_python_guards(tmp_path):
    # guard and audit hook off: only the launcher, rlimits and the timeout remain
    res = run_untrusted("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                        "raise SystemExit(3)\n", guard=False, audit=False, timeout_s=5)
    assert res.status == "failed"
    res = run_untrusted("x = bytearray(100 * 1024 ** 3)\n", guard=False, audit=False)
    assert res.status == "failed" and "MemoryError" in res.stderr
    res = run_untrusted("while True:\n    print('y' * 100000)\n", guard=False, audit=False,
                        file_size_mb=1, timeout_s=5)
    assert res.status == "failed"
    marker = tmp_path / "still_alive"
    code = ("import os, time\nfor i in range(10):\n    if os.fork() == 0:\n"
            "        time.sleep(3)\n"
            f"        open({str(marker)!r}, 'w').write('x')\n        os._exit(0)\n"
            "time.sleep(60)\n")
    res = run_untrusted(code, guard=False, audit=False, timeout_s=1)
    # "failed" where RLIMIT_NPROC (non-root) refuses the forks
    assert res.status in ("timeout", "failed")
    time.sleep(3.5)
    assert not marker.exists(), "a forked child outlived the sandbox"


def test_environment_holds_no_secrets(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws_secret_value")
    res = run_untrusted("import os\nprint(sorted(os.environ.items()))\n"
                        "print(open('/proc/self/environ').read())\n")
    assert "secret_value" not in res.stdout + res.stderr
    res = run_untrusted("import os\nprint(sorted(os.environ.items()))\n", guard=False,
                        audit=False)
    assert res.status == "passed"
    assert "secret_value" not in res.stdout


def test_reading_outside_python_and_workdir_is_refused():
    res = run_untrusted("print(open('/etc/passwd').read())\n")
    assert res.status == "failed"
    assert "root:" not in res.stdout


@pytest.mark.skipif(unshare_prefix() is None, reason="unshare not usable here")
def test_network_namespace_has_no_route():
    res = run_untrusted("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\n",
                        guard=False, audit=False, network="namespace", timeout_s=5)
    assert res.status == "failed"
    assert "netns" in res.isolation


def test_concurrent_calls_from_threads():
    results = []

    def work(i):
        results.append(run_untrusted(f"assert {i} == {i}\n").status)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["passed"] * 6
