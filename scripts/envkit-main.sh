#!/usr/bin/env bash
# The main job on the built-in default target: install envkit into .venv, validate the matrix,
# resolve the default target (an H200 serving stack: vLLM with flash-attn and both csrc kernels)
# and generate its build context (Dockerfile, kernel build script, lock, plan) into ./envkit-build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
.venv/bin/envkit matrix check
TARGET=(--gpu H200 --driver 580.65.06 --vllm 0.11.0 --flash-attn 2.7.4.post1 --kernels layer_norm,rotary)
.venv/bin/envkit resolve "${TARGET[@]}"
exec .venv/bin/envkit generate "${TARGET[@]}" -o envkit-build "$@"
