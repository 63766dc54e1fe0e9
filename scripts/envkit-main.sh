#!/usr/bin/env bash
# The main job on the built-in default target, a small CPU image (Debian 12, Python 3.11,
# torch 2.13.0+cpu): install envkit, start a Docker Engine, resolve, show the generated plan,
# bundle everything on this connected machine, build the image with the network off, and run its
# self-test (tokens/s of a tiny model) inside the container.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
./scripts/start-docker.sh
./scripts/make-base-image.sh
E=.venv/bin/envkit
TARGET=(--platform cpu --torch 2.13.0)
$E matrix check
$E resolve "${TARGET[@]}"
$E generate "${TARGET[@]}" --offline --dry-run
$E bundle "${TARGET[@]}" -o envkit-bundle
$E build --offline --bundle envkit-bundle --tag envkit/cpu:default
exec $E selftest --image envkit/cpu:default "$@"
