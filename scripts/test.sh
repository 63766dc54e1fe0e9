#!/usr/bin/env bash
# The test command: installs everything the tests need into .venv, then runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
.venv/bin/envkit matrix check
exec .venv/bin/python -m pytest -q "$@"
