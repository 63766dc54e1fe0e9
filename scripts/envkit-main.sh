#!/usr/bin/env bash
# The main job on the built-in default target: install envkit into .venv, validate the matrix and
# resolve the default target (an H200 serving stack: vLLM with flash-attn and both csrc kernels).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
.venv/bin/envkit matrix check
exec .venv/bin/envkit resolve --gpu H200 --driver 580.65.06 --vllm 0.11.0 --flash-attn 2.7.4.post1 --kernels layer_norm,rotary "$@"
