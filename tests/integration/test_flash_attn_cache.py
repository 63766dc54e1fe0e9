"""The flash-attn build's rebuild cache (issue 28), for real: build_flash_attn.py with --cache compiles a torch
extension with torch's ninja build, then a second build with the same key after torch's headers were touched (as a
reinstall in a rebuilt image leaves them) restores the objects and compiles nothing. The extension is a small
CPU one (this machine has no nvcc); on the H200 the same mechanism carries flash-attn's CUDA objects
(docs/flash-attn-build-h200.md). Uses the CPU torch of .vllm-venv (./scripts/start-vllm-env.sh)."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

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


NINJA = """rule cc
  command = gcc -MMD -MF $out.d -c $in -o $out
  depfile = $out.d
  deps = gcc
build build/api.o: cc csrc/api.c
"""


@pytest.mark.parametrize("skew_ns", [1, 999, -999])
def test_a_restored_object_a_tar_rounding_newer_than_its_deps_record_is_not_compiled_again(tmp_path, monkeypatch, skew_ns):
    """The cache tar keeps an object's time as a float, which comes back up to a microsecond off; an object newer by a
    nanosecond than the mtime in ninja's deps log made ninja drop its deps and compile everything again (CI, 1 run in
    2). restore_cache puts each object at its recorded time and its inputs before it. Real ninja and gcc."""
    from envkit.inimage import build_flash_attn as fa

    monkeypatch.setenv("PATH", f"{VENV / 'bin'}:{os.environ['PATH']}")
    ninja = shutil.which("ninja")
    assert ninja, "no ninja in .vllm-venv: run ./scripts/start-vllm-env.sh"
    ext = tmp_path / "ext"
    (ext / "csrc").mkdir(parents=True)
    (ext / "build").mkdir()
    (ext / "csrc" / "api.c").write_text('#include "api.h"\nint answer(void) { return ANSWER; }\n')
    (ext / "csrc" / "api.h").write_text("#define ANSWER 42\n")
    (ext / "build" / "build.ninja").write_text(NINJA.replace("csrc/", str(ext / "csrc") + "/"))
    assert subprocess.run([ninja, "-C", str(ext / "build")], capture_output=True, text=True).returncode == 0
    cache = tmp_path / "cache"
    cache.mkdir()
    fa.save_cache(str(cache), "k", str(ext))
    obj = "build/api.o"
    with tarfile.open(cache / "k.tar") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    with tarfile.open(cache / "k.tar", "w") as tar:
        for m, data in members:
            if m.name == obj:
                m.mtime = (m.mtime * 1e9 + skew_ns) / 1e9 if skew_ns > 0 else m.mtime - 1e-6
            tar.addfile(m, io.BytesIO(data) if data is not None else None)
    shutil.rmtree(ext / "build")
    (ext / "csrc" / "api.h").touch()  # as a reinstall leaves torch's headers: newer than the object
    assert fa.restore_cache(str(cache), "k", str(ext)) > 0
    again = subprocess.run([ninja, "-C", str(ext / "build"), "-d", "explain"], capture_output=True, text=True)
    assert again.returncode == 0 and "ninja: no work to do" in again.stdout, again.stdout + again.stderr
