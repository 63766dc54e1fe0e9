#!/usr/bin/env bash
# The test command: installs everything the tests need (envkit with its test and plot extras into .venv, a real
# Docker Engine, a locally made Debian 12 base image), type-checks the package, then runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,plot]'
./scripts/start-docker.sh
./scripts/make-base-image.sh
./scripts/start-podman.sh
./scripts/start-vllm-env.sh
.venv/bin/envkit matrix check
.venv/bin/envkit matrix refresh --check
.venv/bin/python -m mypy --strict envkit/model envkit/core   # the values and the pure core: strictly typed
.venv/bin/ruff check --select I envkit                       # imports sorted, first party last
.venv/bin/python -m mypy envkit                             # the rest (inimage/ runs on images' Pythons: not checked)
exec .venv/bin/python -m pytest -q "$@"
