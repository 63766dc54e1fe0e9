#!/bin/bash
# GPU truth on the H200 (issue 25), one device command (docs/gpu-truth-h200.md): doctor, doctor --for, resolve --gpu auto,
# the CUDA build's self-test from its carried solution.json and rotary wheel (.devrun/cu13/: the context's
# envkit/solution.json and the wheel `envkit build --export-wheels` wrote for tests/integration/test_cuda_image.py's
# stack), and doctor against collect_env. Outputs under $OUT.
set +e
exec > >(tee $OUT/log.txt) 2>&1
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD COLUMNS=130
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pyc   # bytecode for envkit and torch alike, as a pip install leaves it
PY=$(command -v python3); echo "python3: $PY $($PY -V)"; nvidia-smi -L; uname -m
echo "== warm-up (writes bytecode for both commands)"
$PY -m envkit doctor --json > /dev/null; $PY -m torch.utils.collect_env > /dev/null
echo "== doctor"; $PY -m envkit doctor; echo "rc=$?"
$PY -m envkit doctor --json > $OUT/doctor.json; echo "rc=$?"
$PY -m torch.utils.collect_env > $OUT/collect_env.txt; echo "collect_env rc=$?"
echo "== doctor --for"; $PY -m envkit doctor --for "--torch 2.11.0 --flash-attn 2" ; echo "rc=$?"
$PY -m envkit doctor --for "--torch 2.11.0 --flash-attn 2" --json > $OUT/doctor-for.json
echo "== resolve --gpu auto"; $PY -m envkit resolve --gpu auto; echo "rc=$?"
$PY -m envkit resolve --gpu auto --json > $OUT/resolve-auto.json
echo "== the CUDA build's self-test (its solution.json, its exported rotary wheel, the host's torch 2.11.0+cu130)"
$PY -m pip install -q --no-index --no-deps --target /tmp/site .devrun/cu13/rotary_emb-0.1-cp312-cp312-linux_x86_64.whl; echo "pip rc=$?"
PYTHONPATH=/tmp/site $PY envkit/inimage/selftest.py --solution .devrun/cu13/solution.json --quick --json > $OUT/selftest-cuda13.json; echo "selftest rc=$?"
PYTHONPATH=/tmp/site $PY envkit/inimage/selftest.py --solution .devrun/cu13/solution.json --quick; echo "selftest (text) rc=$?"
echo "== the same with no GPU visible (CUDA_VISIBLE_DEVICES=)"
CUDA_VISIBLE_DEVICES= PYTHONPATH=/tmp/site $PY envkit/inimage/selftest.py --solution .devrun/cu13/solution.json --quick --json > $OUT/selftest-cuda13-nogpu.json; echo "selftest no-gpu rc=$?"
echo "== doctor vs collect_env, 5 paired rounds"
$PY benchmarks/doctor_bench.py --rounds 5 --python $PY --envkit "$PY -m envkit" | tee $OUT/doctor-bench.txt
echo "== doctor's cost"
$PY benchmarks/doctor_cost.py --rounds 5 | tee $OUT/doctor-cost.txt
echo DONE
