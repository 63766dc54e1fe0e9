#!/usr/bin/env bash
# fastllm compiled from its source tag on a GPU host with the CMake line of the build stage that
# `envkit generate --gpu H200 --engine fastllm==0.1.7.1 --engine-build source` writes (the arch, MAKE_WHL_X86, only the
# fastllm_tools target), then run on the GPU. What the run showed is in docs/fastllm-source.md.
#
#   benchmarks/fastllm_source_gpu.sh CARRIED OUT
#
# CARRIED holds fastllm-VERSION.tar.gz (the source tag), tiny/ (tests/vllm/make_tiny_model.py) and, for a host
# without them, libnuma .debs and a cmake wheel. Three runs, each logged under OUT:
#   1. configure with no CUDA_ARCH and no visible GPU (CUDA_VISIBLE_DEVICES=""): fastllm's default arch is "native",
#      what a GPU-less Docker builder meets;
#   2. configure and build with -DCUDA_ARCH=ARCH (the GPU's, from nvidia-smi), timed;
#   3. the built package imported and run on the GPU: the CUDA device found, a greedy answer of the trained tiny model,
#      the SASS the library carries (cuobjdump).
set -uo pipefail
CARRIED=$(realpath "$1"); OUT=$(realpath "$2"); mkdir -p "$OUT"
WORK=/tmp/fastllm-src; rm -rf "$WORK"; mkdir -p "$WORK"
exec > >(tee "$OUT/run.log") 2>&1
say() { printf '\n== %s\n' "$*"; }

say host
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
echo "nvcc: $NVCC"; "$NVCC" --version | tail -2
gcc --version | head -1; nproc; python3 --version
command -v cmake > /dev/null || { python3 -m pip install -q --no-index "$CARRIED"/cmake-*.whl --target "$WORK/cmake" \
  && export PATH="$WORK/cmake/bin:$PATH" PYTHONPATH="$WORK/cmake${PYTHONPATH:+:$PYTHONPATH}"; }
cmake --version | head -1
if [ ! -e /usr/include/numa.h ]; then  # libnuma-dev, as the build stage's apt line installs it
  for d in "$CARRIED"/libnuma*.deb; do dpkg -x "$d" "$WORK/numa"; done
  export CPATH="$WORK/numa/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$WORK/numa/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$WORK/numa/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "libnuma-dev: from the carried .debs"
fi
# nccl.h and libnccl: the CUDA toolkit's, else the nvidia-nccl wheel torch installed (headers and libnccl.so.2)
NCCL=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null)
if [ -n "$NCCL" ] && [ ! -e /usr/include/nccl.h ] && [ ! -e "$(dirname "$NVCC")/../include/nccl.h" ]; then
  mkdir -p "$WORK/nccl-lib"; ln -sf "$NCCL"/lib/libnccl.so.2 "$WORK/nccl-lib/libnccl.so"
  export CPATH="$NCCL/include${CPATH:+:$CPATH}" LIBRARY_PATH="$WORK/nccl-lib:$LIBRARY_PATH" LD_LIBRARY_PATH="$NCCL/lib:$LD_LIBRARY_PATH"
  echo "nccl: $NCCL"
fi
SRC="$WORK/src"; mkdir -p "$SRC"; tar -xzf "$CARRIED"/fastllm-*.tar.gz --strip-components=1 -C "$SRC"

say "1. configure with fastllm's default CUDA_ARCH and no visible GPU"
CUDA_VISIBLE_DEVICES="" cmake -S "$SRC" -B "$WORK/build-native" -DUSE_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_BUILD_TYPE=Release \
  > "$OUT/native-configure.log" 2>&1
echo "exit $?"; grep -n -i -m8 "CUDA_ARCH\|error\|native\|architectures" "$OUT/native-configure.log"
# what nvcc makes of that "native" with no GPU to ask, on one of fastllm's own CUDA files' shape: a kernel
cat > "$WORK/k.cu" <<'CU'
#include <cstdio>
__global__ void k(float *x) { x[threadIdx.x] += 1.0f; }
int main() {
  float *x; cudaMalloc(&x, 32 * sizeof(float)); k<<<1, 32>>>(x);
  cudaError_t e = cudaDeviceSynchronize(); if (e == cudaSuccess) e = cudaGetLastError();
  printf("kernel launch on the GPU: %s\n", cudaGetErrorString(e)); return e != cudaSuccess;
}
CU
CUDA_VISIBLE_DEVICES="" "$NVCC" -arch=native "$WORK/k.cu" -o "$WORK/k"; echo "nvcc -arch=native, no visible GPU: exit $?"
cuobjdump --list-elf "$WORK/k" 2>&1 | head -3
"$WORK/k"; echo "that binary run with the GPU visible: exit $?"

say "2. configure and build with -DCUDA_ARCH=$ARCH, as the generated Dockerfile does"
start=$(date +%s)
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DUSE_CUDA=ON -DCUDA_ARCH="$ARCH" -DCMAKE_CUDA_COMPILER="$NVCC" \
  -DMAKE_WHL_X86=ON > "$OUT/configure.log" 2>&1 || { echo "configure failed"; tail -40 "$OUT/configure.log"; exit 1; }
grep -i "CUDA_ARCH\|Effective CUDA\|CUTLASS\|USE_NUMAS\|CXX_FLAGS" "$OUT/configure.log"
timeout 480 cmake --build "$WORK/build" --target fastllm_tools -j "$(nproc)" > "$OUT/build.log" 2>&1
rc=$?; echo "build exit $rc after $(( $(date +%s) - start )) s"; grep -c "warning" "$OUT/build.log" | sed 's/^/warnings: /'
[ $rc -eq 0 ] || { grep -n -m20 "error" "$OUT/build.log"; tail -30 "$OUT/build.log"; exit 1; }
ls -la "$WORK/build/tools/ftllm/"*.so

say "3. the package on the GPU"
python3 -m pip install -q --no-deps --no-build-isolation --target "$WORK/site" "$WORK/build/tools" 2>&1 | tail -3
LIB=$(ls "$WORK"/site/ftllm/libfastllm_tools*.so | head -1)
cuobjdump --list-elf "$LIB" 2>/dev/null | sed 's/.*\.\(sm_[0-9a-z]*\)\..*/\1/' | sort | uniq -c
ldd "$LIB" | grep -i "cuda\|cublas\|nccl\|numa\|not found"
PYTHONPATH="$WORK/site" python3 - "$CARRIED/tiny" <<'EOF'
import sys, time
from ftllm import llm
print("ftllm from", llm.__file__)
print("cuda device:", llm.has_device("cuda"))
llm.set_device_map("cuda")
m = llm.model(sys.argv[1], dtype="float16")
prompt = "the of and to in is was for on that"
start = time.perf_counter()
text = m.response(prompt, max_length=64, do_sample=False)
dt = time.perf_counter() - start
print(f"answer ({dt * 1000:.0f} ms): {text!r}")
words = text.split()
print("words from the trained vocabulary:", sum(w in "the of and to in is was for on that with as by at from his an were are which this be or has had".split() for w in words), "of", len(words))
EOF
