"""The x86-64-v3 llama.cpp build is chosen only where the kernel reports every instruction set
it uses, and it uses none beyond them (no AVX-512, no AMX)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from df_ray.engines import llama_build as lb
from df_ray.pipeline.faults import exit_text

CPUINFO_V3 = "processor\t: 0\nflags\t\t: fpu sse2 ssse3 sse4_2 avx f16c fma bmi2 avx2 popcnt\n"
CPUINFO_OLD = "processor\t: 0\nflags\t\t: fpu sse2 ssse3 sse4_2 avx popcnt\n"


def test_cpu_flags_reads_the_flags_line():
    assert {"avx2", "fma", "sse2"} <= lb.cpu_flags(CPUINFO_V3)
    assert lb.cpu_flags("Features\t: fp asimd\n") == frozenset()


@pytest.mark.parametrize(("cpuinfo", "installed", "expected"), [
    (CPUINFO_V3, True, "x86-64-v3"),
    (CPUINFO_OLD, True, "baseline"),      # no AVX2/FMA/F16C/BMI2: the baseline
    (CPUINFO_V3, False, "baseline"),      # no second build installed
    ("flags\t: avx avx2 fma f16c\n", True, "baseline"),  # BMI2 missing
])
def test_choose_variant(cpuinfo, installed, expected, monkeypatch):
    monkeypatch.delenv("DF_RAY_LLAMA_VARIANT", raising=False)
    assert lb.choose_variant(lb.cpu_flags(cpuinfo), installed) == expected


def test_baseline_can_be_forced(monkeypatch):
    monkeypatch.setenv("DF_RAY_LLAMA_VARIANT", "baseline")
    assert lb.choose_variant(lb.cpu_flags(CPUINFO_V3), True) == "baseline"


def test_a_user_library_path_is_left_alone(monkeypatch):
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", "/opt/my-native-llama")
    assert lb.select_llama_library() == "LLAMA_CPP_LIB_PATH"
    assert os.environ["LLAMA_CPP_LIB_PATH"] == "/opt/my-native-llama"


def test_v3_build_uses_no_instruction_set_beyond_v3():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    d = lb.variant_dir()
    if d is None:
        pytest.skip("no x86-64-v3 build installed (not x86-64, or a native/custom build)")
    if not lb.cpu_flags() >= lb.V3_FLAGS:
        pytest.skip("this CPU cannot run the x86-64-v3 build (the baseline is used here)")
    env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(d)}
    p = subprocess.run([sys.executable, "-c",
                        "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, f"loading {d} {exit_text(p.returncode)}:\n{p.stderr[-2000:]}"
    on = {n for n, v in re.findall(r"([A-Z0-9_]+) = (\d)", p.stdout) if v == "1"}
    assert "AVX2" in on, p.stdout  # it is the SIMD build
    assert not on & {"AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI",
                     "AMX_INT8", "AMX_TILE", "AMX_BF16"}, p.stdout
