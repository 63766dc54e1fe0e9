"""The flash-attn build's rebuild cache (issue 28), for real: build_flash_attn.py with --cache compiles a torch
extension with torch's ninja build, then a second build with the same key after torch's headers were touched (as a
reinstall in a rebuilt image leaves them) restores the objects and compiles nothing. The extension is a small
CPU one (this machine has no nvcc); on the H200 the same mechanism carries flash-attn's CUDA objects
(docs/flash-attn-build-h200.md). Uses the CPU torch of .vllm-venv (./scripts/start-vllm-env.sh)."""
from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".vllm-venv"
SCRIPT = ROOT / "envkit" / "inimage" / "build_flash_attn.py"
SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension
setup(name="flash_attn", version="9.9.9", ext_modules=[CppExtension("flash_attn_2_cuda", ["csrc/api.cpp"])],
      cmdclass={"build_ext": BuildExtension})
"""
API = """#include <torch/extension.h>
int answer() { return 42; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("answer", &answer); }
"""


def _sdist(tmp: Path) -> Path:
    top = tmp / "src" / "flash_attn-9.9.9"
    (top / "csrc").mkdir(parents=True)
    (top / "setup.py").write_text(SETUP)
    (top / "csrc" / "api.cpp").write_text(API)
    out = tmp / "flash_attn-9.9.9.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(top, arcname="flash_attn-9.9.9")
    return out


def _build(sdist: Path, out: Path, cache: Path, work: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{VENV / 'bin'}:{os.environ['PATH']}"}
    return subprocess.run([str(VENV / "bin" / "python"), str(SCRIPT), "--sdist", str(sdist), "--targets", "flash_attn",
                           "--arch-list", "9.0", "--out", str(out), "--cache", str(cache), "--work", str(work),
                           "--report", str(out / "report.json")],
                          capture_output=True, text=True, timeout=900, env=env)


def test_a_rebuild_with_the_same_key_compiles_nothing(tmp_path):
    assert (VENV / "bin" / "python").exists(), "no .vllm-venv: run ./scripts/test.sh (it runs ./scripts/start-vllm-env.sh)"
    sdist, cache, work = _sdist(tmp_path), tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    first = _build(sdist, tmp_path / "out1", cache, work)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert "empty: a full compile" in first.stdout and "compiled 1/1 units" in first.stdout
    assert len(list(cache.glob("flash_attn-*.tar"))) == 1
    headers = VENV / "lib"
    extension_h = next(headers.rglob("torch/include/torch/extension.h"))
    extension_h.touch()  # a reinstalled torch: its headers newer than every object
    second = _build(sdist, tmp_path / "out2", cache, work)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "restored" in second.stdout and "ninja: no work to do" in second.stdout and "compiled 1/1" not in second.stdout
    wheel = next((tmp_path / "out2").glob("flash_attn-9.9.9-*.whl"))
    assert wheel.stat().st_size > 0
