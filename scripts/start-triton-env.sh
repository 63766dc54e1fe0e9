#!/usr/bin/env bash
# A real Triton Inference Server for the Triton serving sweep's tests (tests/integration/test_triton_sweep.py):
# PyPI's nvidia-pytriton 0.7.0 bundles the tritonserver binary (server 2.51.0 = Triton 24.10; CPU-only here, it
# warns that the CUDA driver is insufficient), libtritonserver, the python backend and its stubs for py3.8-3.13.
# It goes into a venv of its own, .triton-venv, with tritonclient[http] (the independent client of the agreement
# test) and numpy<2 (numpy 2 crashes the python backend's deserialize_bytes_tensor).
# The python backend's stub embeds the SYSTEM libpython (Debian 12's 3.11), not this venv's Python: the stub whose
# libpython this host has is copied where the backend looks for it (as PyTriton does at run time), and a numpy 1.26
# built for that Python goes into .triton-venv/stub-site, which the test puts on the server's PYTHONPATH.
# .triton-venv/bin/tritonserver runs the server with the python backend's directory.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
V=.triton-venv
ready() {
    [ -x "$V/bin/tritonserver" ] && [ -d "$V/stub-site/numpy" ] && "$V/bin/python" -c "import pytriton, tritonclient.http, tritonclient.grpc, numpy" 2>/dev/null
}
if [ -x "$V/bin/python" ] && ready; then
    exit 0
fi
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
echo '*' > "$V/.gitignore"   # git leaves the whole environment alone
echo "installing nvidia-pytriton 0.7.0 (tritonserver 2.51.0) and tritonclient into $V (about 0.5 GB, a minute or two)"
"$V/bin/python" -m pip install -q --disable-pip-version-check "nvidia-pytriton==0.7.0" "numpy<2" "tritonclient[http,grpc]" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
PKG=$("$V/bin/python" -c "import pytriton, pathlib; print(pathlib.Path(pytriton.__file__).parent / 'tritonserver')")
# the stub whose libpython this host has (the 3.13 stub's bundled libpython has no standard library beside it):
# that Python's version is the one the models' code runs on
STUB_VERSION=""
for stub in "$PKG"/python_backend_stubs/3.*/triton_python_backend_stub; do
    if ldd "$stub" | grep -E "libpython3\.[0-9]+\.so[.0-9]* => /" | grep -qv nvidia_pytriton.libs; then
        STUB_VERSION=$(basename "$(dirname "$stub")")
    fi
done
if [ -z "$STUB_VERSION" ]; then
    echo "no libpython3.8-3.13 shared library on this host for Triton's python backend (apt-get install libpython3-dev)" >&2
    exit 1
fi
cp "$PKG/python_backend_stubs/$STUB_VERSION/triton_python_backend_stub" "$PKG/backends/python/triton_python_backend_stub"
"$V/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: --python-version "$STUB_VERSION" \
    --platform manylinux2014_x86_64 --target "$V/stub-site" --upgrade "numpy==1.26.4" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
cat > "$V/bin/tritonserver" <<WRAP
#!/usr/bin/env bash
# Triton 2.51.0 from nvidia-pytriton, with its python backend (stub for the host's Python $STUB_VERSION)
exec "$PKG/bin/tritonserver" --backend-directory="$PKG/backends" "\$@"
WRAP
chmod +x "$V/bin/tritonserver"
ready
echo "tritonserver 2.51.0 ready in $V (python backend on the host's Python $STUB_VERSION)"
