#!/usr/bin/env bash
# Re-extract the primary sources behind matrix.toml's derived tables, then rewrite those tables.
#   ./scripts/refresh-sources.sh /path/to/flash-attention-clone
# Needs PyPI, pip's default index (torch and vLLM wheels and sdists, read with HTTP range requests and cached in
# ~/.cache/envkit/sources) and a git clone of Dao-AILab/flash-attention with its tags. The
# hand-collected extracts (torch: variants.json needs clones of pytorch/builder and
# pytorch/test-infra, see data/sources/torch/README.md; release-notes.json, abi.json;
# vllm: variants.json, rocm-gpus.json) are kept as they are. Review the diff of matrix.toml after.
set -euo pipefail
cd "$(dirname "$0")/.."
FA_REPO=${1:?usage: $0 FLASH_ATTENTION_CLONE [TRITON_SERVER_CLONE TENSORRTLLM_BACKEND_CLONE]}
PY=.venv/bin/python
$PY -m envkit.matrixgen.flash_attn_source extract --repo "$FA_REPO" --out data/sources/flash-attn
$PY -m envkit.matrixgen.torch_source extract
$PY -m envkit.matrixgen.vllm_source extract
$PY -m envkit.matrixgen.vllm_deps --out data/sources/vllm/deps.json
$PY -m envkit.matrixgen.vllm_cpu --out data/sources/vllm/cpu.json
if [ $# -ge 3 ]; then  # git clones (with tags) of triton-inference-server/server and tensorrtllm_backend
  $PY -m envkit.matrixgen.triton_source --server "$2" --backend "$3" --out data/sources/triton
fi
.venv/bin/envkit matrix refresh
.venv/bin/envkit matrix check
git --no-pager diff --stat -- matrix.toml data/sources
