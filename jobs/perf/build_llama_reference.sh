#!/usr/bin/env bash
# Build llama.cpp's own `llama-batched-bench` from the llama.cpp sources that the installed
# llama-cpp-python vendors, with the same CMake flags as that installed build: the reference
# that jobs/perf/embedded_engine.py --batched measures the embedded engine against.
#
#   jobs/perf/build_llama_reference.sh [VENV_PYTHON]      # prints the binary's path
#
# The flags and version come from the stamp scripts/build_llama_cpp.sh leaves in the venv
# (df_ray-llama-build.txt: "spec: ..." and "CMAKE_ARGS: ..."); without a stamp, the
# installed llama-cpp-python version and the portable default flags are used. The sources are
# the package's sdist (pip download), unpacked and built under
# ~/.cache/df_ray/llama-reference/<hash of version and flags>/ (override the root with
# DF_RAY_LLAMA_REFERENCE_DIR; DF_RAY_LLAMA_SDIST_DIR points at an already unpacked sdist).
# Nothing is written into the repository. Only the one target is built (-j2 by default; set
# JOBS).
set -euo pipefail
PYBIN=${1:-.venv/bin/python}
PREFIX=$("$PYBIN" -c 'import sys; print(sys.prefix)')
STAMP=$PREFIX/df_ray-llama-build.txt
if [ -f "$STAMP" ]; then
  SPEC=$(sed -n 's/^spec: //p' "$STAMP")
  FLAGS=$(sed -n 's/^CMAKE_ARGS: //p' "$STAMP")
  # The build df_ray's engine loads on this CPU (df_ray.engines.llama_build): the x86-64-v3
  # one where the CPU reports its instruction sets, else the baseline.
  # A caller that already chose (LLAMA_CPP_LIB_PATH set, as the engine's process does) is
  # read from that path; otherwise the engine's own choice for this CPU is asked.
  V3=$(sed -n 's/^x86-64-v3 CMAKE_ARGS: //p' "$STAMP")
  case "${LLAMA_CPP_LIB_PATH:-}" in
    */lib-x86-64-v3) SEL=x86-64-v3 ;;
    "") SEL=$("$PYBIN" -c \
          'from df_ray.engines.llama_build import select_llama_library as s; print(s())') ;;
    *) SEL=other
       echo "note: LLAMA_CPP_LIB_PATH=$LLAMA_CPP_LIB_PATH is a build of your own; the" \
            "reference gets the baseline flags" >&2 ;;
  esac
  if [ -n "$V3" ] && [ "$V3" != none ] && [ "$SEL" = x86-64-v3 ]; then
    FLAGS=$V3
  fi
else
  SPEC=${DF_RAY_LLAMA_SPEC:-llama-cpp-python==$("$PYBIN" -c \
    'import importlib.metadata as m; print(m.version("llama-cpp-python"))')}
  FLAGS="-DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_BACKEND_DL=OFF"
  if [ "$(uname -m)" = x86_64 ]; then
    for f in SSE42 AVX AVX_VNNI AVX2 BMI2 FMA F16C AVX512 AVX512_VBMI AVX512_VNNI \
             AVX512_BF16 AMX_TILE AMX_INT8 AMX_BF16; do FLAGS="$FLAGS -DGGML_$f=OFF"; done
  fi
fi
VERSION=${SPEC#*==}
HASH=$(printf '%s|%s' "$SPEC" "$FLAGS" | sha256sum | cut -c1-12)
ROOT=${DF_RAY_LLAMA_REFERENCE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/df_ray/llama-reference}/$HASH
BIN=$ROOT/build/bin/llama-batched-bench
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$ROOT"
SRC=${DF_RAY_LLAMA_SDIST_DIR:-}
if [ -z "$SRC" ]; then
  SRC=$ROOT/llama_cpp_python-$VERSION
  if [ ! -d "$SRC/vendor/llama.cpp" ]; then
    "$PYBIN" -m pip download --quiet --no-deps --no-binary :all: -d "$ROOT" "$SPEC" >&2
    tar -xzf "$ROOT"/llama_cpp_python-"$VERSION".tar.gz -C "$ROOT"
  fi
fi
echo "building llama-batched-bench ($SPEC, CMAKE_ARGS=$FLAGS) in $ROOT/build" >&2
# As llama-cpp-python's own CMakeLists: shared libraries, common library on, no curl; Release.
# shellcheck disable=SC2086
cmake -S "$SRC/vendor/llama.cpp" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF $FLAGS >&2
cmake --build "$ROOT/build" --target llama-batched-bench -j "${JOBS:-2}" >&2
echo "$BIN"
