#!/usr/bin/env bash
# A real fastllm server (https://github.com/ztxz16/fastllm) for tests/integration/test_fastllm_serving.py: PyPI's ftllm 1.9.0
# (the PyPI name is ftllm; PyPI's "fastllm" is another project) in a venv of its own, .fastllm-venv, CPU only.
# The wheel carries a CPU library (ftllm/libfastllm_tools-cpu.so) beside its CUDA 12 one; without the CUDA runtime
# the loader falls back to the CPU library (it does so on a machine without a GPU driver even with the CUDA wheels).
# ftllm's declared dependencies (the nvidia CUDA 12 wheels, triton, modelscope, pandas, imageio-ffmpeg, the office
# formats...) make a 3.5 GB venv (86 packages); `ftllm server` on the CPU imports only fastapi, uvicorn, pydantic,
# openai (its request types), shortuuid, jinja2 (chat templates), pillow, transformers (the HF tokenizer) and
# requests (its CLI's download parser), so ftllm goes in with --no-deps beside those: 610 MB (51 packages), of which
# ftllm's own unused CUDA library is 225 MB. openai is also the agreement test's independent client.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
V=.fastllm-venv
FTLLM=1.9.0
DEPS=("fastapi==0.165.0" "uvicorn==0.54.0" "pydantic==2.14.4" "openai==3.57.0" "shortuuid==1.0.13" "jinja2==3.1.6"
      "pillow==13.0.0" "transformers==5.24.0" "requests==2.34.2")
ready() {
    [ -x "$V/bin/ftllm" ] && "$V/bin/python" -c "
import importlib.metadata as m, fastapi, uvicorn, pydantic, openai, shortuuid, jinja2, PIL, transformers, requests
assert m.version('ftllm') == '$FTLLM'" 2>/dev/null
}
if [ -x "$V/bin/python" ] && ready; then
    exit 0
fi
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
echo '*' > "$V/.gitignore"   # git leaves the whole environment alone
echo "installing ftllm $FTLLM (--no-deps) and the 9 packages its CPU server imports into $V (about 0.6 GB, a minute or two)"
quiet() { { grep -v -e "is ignored: it is neither a file nor a directory" || true; }; }
"$V/bin/python" -m pip install -q --disable-pip-version-check "${DEPS[@]}" 2>&1 | quiet
"$V/bin/python" -m pip install -q --disable-pip-version-check --no-deps "ftllm==$FTLLM" 2>&1 | quiet
ready
"$V/bin/ftllm" --version
echo "ftllm $FTLLM ready in $V ($(du -sm "$V" | cut -f1) MB; CPU library ftllm/libfastllm_tools-cpu.so)"
