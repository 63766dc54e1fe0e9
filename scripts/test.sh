#!/usr/bin/env bash
# The test command: installs everything the tests need (envkit with its test and plot extras into .venv, a real
# Docker Engine, locally made Debian 12 and Ubuntu 24.04 base images), type-checks the package, then runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,plot]'
# the three large Python environments install (pip, network-bound) while the engines, base images and checks run
ENVS_LOG=$(mktemp)
( ./scripts/start-vllm-env.sh && ./scripts/start-triton-env.sh && ./scripts/start-fastllm-env.sh ) > "$ENVS_LOG" 2>&1 &
ENVS=$!
./scripts/start-docker.sh
./scripts/make-base-image.sh
./scripts/make-base-image.sh docker.io/library/ubuntu:24.04   # the CUDA 13.0 image's OS (tests/integration/test_cuda_image.py)
./scripts/start-podman.sh
command -v docker-registry > /dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-registry > /dev/null  # push tests
.venv/bin/envkit matrix check
.venv/bin/envkit matrix refresh --check
.venv/bin/python -m mypy --strict envkit/model envkit/core   # the values and the pure core: strictly typed
.venv/bin/ruff check envkit                                  # imports, unused names, lines <= 140, complexity <= 20
.venv/bin/python -m mypy envkit                             # the rest (inimage/ runs on images' Pythons: not checked)
wait "$ENVS" || { cat "$ENVS_LOG" >&2; echo "test.sh: installing the vLLM, Triton or fastllm environment failed (above)" >&2; exit 1; }
cat "$ENVS_LOG"; rm -f "$ENVS_LOG"
# two lanes on two cores (tests/conftest.py): one worker runs the integration tests, the other the unit modules; one process
# (unit tests first) where there is one core. The 25 slowest steps at the end, and every test's time in
# test-results/junit.xml for a CI system's test report.
LANES=()
[ "$(nproc)" -ge 2 ] && LANES=(-n 2 --dist loadscope --no-loadscope-reorder)
exec .venv/bin/python -m pytest -q --durations=25 --junitxml=test-results/junit.xml "${LANES[@]}" "$@"
