"""The installed llama.cpp runs on any CPU of its architecture: no instruction set beyond the
x86-64 (or armv8-a) baseline was compiled in.

A build made with ``-march=native`` on one machine dies with SIGILL on a CPU that lacks one
of its instruction sets. ``scripts/build_llama_cpp.sh`` builds the portable baseline unless
``DF_RAY_LLAMA_NATIVE=1`` asks for a native build; only then, as its stamp file in the venv
records, is this test skipped.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

from df_ray.pipeline.faults import exit_text

#: Instruction sets llama.cpp reports that the baseline does not have.
BEYOND_BASELINE = {
    "x86_64": {"SSE3", "SSSE3", "AVX", "AVX_VNNI", "AVX2", "F16C", "FMA", "BMI2", "AVX512",
               "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8", "AMX_TILE", "AMX_BF16"},
    "aarch64": {"FP16_VA", "MATMUL_INT8", "SVE", "DOTPROD", "SME", "SVE2"},
}
BEYOND_BASELINE["amd64"] = BEYOND_BASELINE["x86_64"]
BEYOND_BASELINE["arm64"] = BEYOND_BASELINE["aarch64"]

STAMP = Path(sys.prefix) / "df_ray-llama-build.txt"


def build_flags() -> str | None:
    """The CMAKE_ARGS the stamp file records, or None without a stamp."""
    if not STAMP.is_file():
        return None
    for line in STAMP.read_text().splitlines():
        if line.startswith("CMAKE_ARGS:"):
            return line.partition(":")[2].strip()
    return None


def enabled_features(system_info: str) -> set[str]:
    """``{"AVX2", ...}`` from llama.cpp's system info (``CPU : SSE3 = 1 | AVX2 = 1 | ...``)."""
    return {name for name, on in re.findall(r"([A-Z0-9_]+) = (\d)", system_info) if on == "1"}


def test_enabled_features_parse():
    info = "CPU : SSE3 = 1 | AVX = 0 | AVX2 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |"
    assert enabled_features(info) == {"SSE3", "AVX2", "LLAMAFILE", "OPENMP", "REPACK"}


def test_llama_cpp_build_is_portable():
    flags = build_flags()
    if flags is not None and "GGML_NATIVE=OFF" not in flags:
        pytest.skip(f"a native build was chosen on purpose ({STAMP}: CMAKE_ARGS {flags})")
    # In a child process: a native build may already fault while loading.
    # The baseline build itself: not the x86-64-v3 variant df_ray may have selected here.
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
    p = subprocess.run(
        [sys.executable, "-c",
         "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
        capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, f"loading llama_cpp {exit_text(p.returncode)}:\n{p.stderr[-2000:]}"
    features = enabled_features(p.stdout)
    beyond = features & BEYOND_BASELINE.get(platform.machine().lower(), set())
    assert not beyond, (
        f"llama.cpp was built with {sorted(beyond)}, beyond the {platform.machine()} baseline "
        f"(system info: {p.stdout.strip()!r}; build flags: {flags or 'no stamp file'}). It dies "
        "with SIGILL on CPUs without them: rebuild with scripts/build_llama_cpp.sh, or set "
        "DF_RAY_LLAMA_NATIVE=1 there if this machine-only build is what you want.")
