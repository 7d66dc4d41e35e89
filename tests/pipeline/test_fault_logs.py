"""A process killed by a fatal signal leaves a fault log that names the signal and where it
happened (`df_ray.pipeline.faults`); real child processes, killed for real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from df_ray.pipeline import faults

CHILD = textwrap.dedent("""
    import signal, sys, threading, time
    from df_ray.pipeline import faults
    faults.install("stage-RoundStage")
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()  # another thread
    def decode_batch():
        signal.raise_signal(getattr(signal, sys.argv[1]))
    decode_batch()
""")


@pytest.mark.parametrize("sig", ["SIGILL", "SIGSEGV", "SIGABRT"])
def test_a_fatal_signal_is_read_back_from_the_fault_log(tmp_path, sig):
    env = {**os.environ, faults.FAULT_DIR_ENV: str(tmp_path),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.run([sys.executable, "-c", CHILD, sig], env=env, capture_output=True,
                       timeout=60)
    signum = getattr(signal, sig)
    assert p.returncode == -signum
    assert faults.exit_text(p.returncode) == f"killed by {faults.signal_text(signum)}"
    (fault,) = faults.read_faults(tmp_path / "nojob")
    assert fault.label == "stage-RoundStage" and fault.pid > 0
    assert fault.signal == signum
    assert fault.frames[0].endswith("in decode_batch")  # the crashing thread, innermost first
    assert fault.describe().startswith(f"killed by {sig} (")


def test_a_clean_exit_leaves_no_fault(tmp_path):
    env = {**os.environ, faults.FAULT_DIR_ENV: str(tmp_path),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    code = "from df_ray.pipeline import faults; faults.install('engine-b1-0')"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    assert list((tmp_path / "nojob").glob("engine-b1-0-*.log"))
    assert faults.read_faults(tmp_path / "nojob") == []
