#!/usr/bin/env bash
# Build (once) and install llama-cpp-python into a venv with a portable instruction set.
#
#   scripts/build_llama_cpp.sh VENV_PYTHON
#
# pip builds llama-cpp-python from source, and llama.cpp's default is GGML_NATIVE=ON
# (-march=native): a wheel built on one CPU dies with SIGILL on another (for instance one
# built where the CPU reports AMX, run where AMX is not usable). llama.cpp's runtime
# CPU-variant dispatch (GGML_CPU_ALL_VARIANTS) is not used: it chooses a variant from CPUID
# alone, so it picks the AMX variant on exactly such a machine, and llama-cpp-python does not
# load dynamic backends. The default here is the plain x86-64 / armv8-a baseline, which runs
# on every CPU of the architecture:
#   -DGGML_NATIVE=OFF -DGGML_SSE42=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_BMI2=OFF
#   -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_AVX512=OFF ... -DGGML_AMX_*=OFF
# DF_RAY_LLAMA_NATIVE=1 builds for this machine's CPU instead (faster; never copy that
# build to another machine). DF_RAY_LLAMA_CMAKE_ARGS replaces the flags altogether.
#
# The wheel is kept in ~/.cache/df_ray/wheels/<version>-<hash of the flags>/: pip's own
# wheel cache is keyed by package and version only, so a native wheel once built there would
# be reinstalled whatever CMAKE_ARGS says. It is therefore built with --no-cache-dir.
set -euo pipefail
PYBIN=${1:?usage: build_llama_cpp.sh VENV_PYTHON}
SPEC=${DF_RAY_LLAMA_SPEC:-llama-cpp-python==0.3.36}
if [ -n "${DF_RAY_LLAMA_CMAKE_ARGS:-}" ]; then
  FLAGS=$DF_RAY_LLAMA_CMAKE_ARGS
elif [ "${DF_RAY_LLAMA_NATIVE:-0}" = 1 ]; then
  FLAGS="-DGGML_NATIVE=ON"
else
  FLAGS="-DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_BACKEND_DL=OFF"
  case "$(uname -m)" in
    x86_64|amd64)
      for f in SSE42 AVX AVX_VNNI AVX2 BMI2 FMA F16C AVX512 AVX512_VBMI AVX512_VNNI \
               AVX512_BF16 AMX_TILE AMX_INT8 AMX_BF16; do
        FLAGS="$FLAGS -DGGML_$f=OFF"
      done ;;
    aarch64|arm64)
      FLAGS="$FLAGS -DGGML_CPU_ARM_ARCH=armv8-a" ;;
  esac
fi
# On x86-64 a second build, for x86-64-v3 (AVX, AVX2, FMA, F16C, BMI2: every x86-64 CPU
# since 2013-2015, but not all, and not every VM's virtual CPU), is unpacked beside the
# baseline as llama_cpp/lib-x86-64-v3/. df_ray.engines.llama_build loads it only when the
# kernel reports every one of those instruction sets for this CPU (/proc/cpuinfo), so it never
# faults; everywhere else the baseline runs. No AVX-512 or AMX variant is built: those are
# the ones a CPU may report without the OS letting a process use them. The scalar baseline is
# several times slower than the v3 build.
V3_FLAGS=""
if [ -z "${DF_RAY_LLAMA_CMAKE_ARGS:-}" ] && [ "${DF_RAY_LLAMA_NATIVE:-0}" != 1 ]; then
  case "$(uname -m)" in
    x86_64|amd64)
      V3_FLAGS="-DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_BACKEND_DL=OFF"
      for f in SSE42 AVX AVX2 BMI2 FMA F16C; do V3_FLAGS="$V3_FLAGS -DGGML_$f=ON"; done
      for f in AVX_VNNI AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8 AMX_BF16; do
        V3_FLAGS="$V3_FLAGS -DGGML_$f=OFF"
      done ;;
  esac
fi
CACHE=${DF_RAY_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/df_ray/wheels}

# build_wheel FLAGS: prints the folder holding the wheel built with FLAGS (built once).
build_wheel() {
  local hash dir
  hash=$(printf '%s|%s' "$SPEC" "$1" | sha256sum | cut -c1-12)
  dir=$CACHE/$hash
  if ! ls "$dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "Building $SPEC (once, several minutes on 2 cores) with CMAKE_ARGS=$1" >&2
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    CMAKE_ARGS="$1" FORCE_CMAKE=1 "$PYBIN" -m pip wheel --quiet --no-cache-dir --no-deps \
      --no-binary llama-cpp-python -w "$dir.tmp" "$SPEC" >&2
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
  fi
  echo "$dir"
}

HASH=$(printf '%s|%s|%s' "$SPEC" "$FLAGS" "$V3_FLAGS" | sha256sum | cut -c1-12)
STAMP=$("$PYBIN" -c 'import sys; print(sys.prefix)')/df_ray-llama-build.txt
if [ -f "$STAMP" ] && [ "$(head -n1 "$STAMP")" = "$HASH" ] && "$PYBIN" -c "import llama_cpp" 2>/dev/null; then
  exit 0
fi
BASE=$(build_wheel "$FLAGS")
"$PYBIN" -m pip install --quiet --force-reinstall --no-deps "$BASE"/llama_cpp_python-*.whl
"$PYBIN" -m pip install --quiet "$SPEC"   # its pure-Python dependencies
if [ -n "$V3_FLAGS" ]; then
  V3=$(build_wheel "$V3_FLAGS")
  PKG=$("$PYBIN" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("llama_cpp").origin))')
  rm -rf "$PKG/lib-x86-64-v3" "$PKG/lib-x86-64-v3.tmp" && mkdir -p "$PKG/lib-x86-64-v3.tmp"
  "$PYBIN" - "$V3" "$PKG/lib-x86-64-v3.tmp" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "llama_cpp_python-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("llama_cpp/lib/") and not name.endswith("/"):
            target = os.path.join(sys.argv[2], os.path.basename(name))
            with z.open(name) as src, open(target, "wb") as dst:
                dst.write(src.read())
PY
  mv "$PKG/lib-x86-64-v3.tmp" "$PKG/lib-x86-64-v3"
fi
printf '%s\nspec: %s\nCMAKE_ARGS: %s\nx86-64-v3 CMAKE_ARGS: %s\n' "$HASH" "$SPEC" "$FLAGS" "${V3_FLAGS:-none}" > "$STAMP"
