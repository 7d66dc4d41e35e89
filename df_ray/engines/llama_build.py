"""Which llama.cpp build a process loads.

``scripts/build_llama_cpp.sh`` installs llama-cpp-python built for the plain x86-64 (or
armv8-a) baseline, which runs on every CPU of its architecture, and on x86-64 unpacks a second
build beside it, ``llama_cpp/lib-x86-64-v3/``, compiled for AVX, AVX2, FMA, F16C and BMI2.
:func:`select_llama_library` points llama-cpp-python at that second build (through its own
``LLAMA_CPP_LIB_PATH``) only when the kernel reports every one of those instruction sets for
this CPU in ``/proc/cpuinfo``: the kernel lists an extension only when the CPU has it and the
OS has enabled its register state, so the choice never faults. No variant uses AVX-512 or AMX,
the extensions a CPU may report without the OS letting a process use them. Unlike llama.cpp's
own variant dispatch (``GGML_CPU_ALL_VARIANTS``), which scores variants by CPUID alone, this
never picks an instruction set the process cannot execute.

It must run before the first ``import llama_cpp`` of the process; df_ray's embedded engine
calls it on import. ``DF_RAY_LLAMA_VARIANT=baseline`` keeps the baseline; a
``LLAMA_CPP_LIB_PATH`` already set (a native build of the user's own) is left alone.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

V3_DIR = "lib-x86-64-v3"
#: /proc/cpuinfo flags the x86-64-v3 build executes.
V3_FLAGS = frozenset({"avx", "avx2", "fma", "f16c", "bmi2"})


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The instruction-set flags the kernel reports for this CPU (x86's ``flags`` line)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def variant_dir() -> Path | None:
    """The installed x86-64-v3 build's folder, if there is one."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return None
    d = Path(spec.origin).parent / V3_DIR
    return d if (d / "libllama.so").is_file() else None


def choose_variant(flags: frozenset[str], have_v3: bool) -> str:
    """``"x86-64-v3"`` when that build is installed and every flag it needs is reported."""
    if os.environ.get("DF_RAY_LLAMA_VARIANT", "").lower() == "baseline":
        return "baseline"
    return "x86-64-v3" if have_v3 and flags >= V3_FLAGS else "baseline"


def select_llama_library() -> str:
    """Point llama-cpp-python at the fastest build this CPU can run; returns which one."""
    if os.environ.get("LLAMA_CPP_LIB_PATH"):
        return "LLAMA_CPP_LIB_PATH"
    d = variant_dir()
    variant = choose_variant(cpu_flags(), d is not None)
    if variant == "x86-64-v3" and d is not None:
        os.environ["LLAMA_CPP_LIB_PATH"] = str(d)
    return variant
