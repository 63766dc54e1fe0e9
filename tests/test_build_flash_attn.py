"""The kernel build script's pure parts, on the real csrc setup.py files of flash-attn 2.7.4.post1
(tests/data; BSD-3-Clause, Tri Dao). The compile itself runs on the GPU machine: docs/kernel-build-gpu.md."""
from __future__ import annotations

import importlib.util
import sys
import io
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("build_flash_attn", ROOT / "envkit" / "inimage" / "build_flash_attn.py")
bfa = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bfa)
DATA = ROOT / "tests" / "data" / "flash_attn-2.7.4.post1"


@pytest.mark.parametrize("kernel", ["rotary", "layer_norm"])
def test_upstream_setup_py_loses_every_hard_coded_gencode(kernel):
    text = (DATA / f"{kernel}_setup.py").read_text()
    assert "arch=compute_70,code=sm_70" in text
    patched, changes = bfa.patch_setup_py(text, "x86-64-v2")
    assert "compute_" not in patched.replace("compute capability", "")
    assert "-gencode" not in patched
    compile(patched, f"{kernel}/setup.py", "exec")
    assert changes[0].startswith("removed 6 hard-coded gencode line(s)")


def test_rotary_march_native_is_replaced_unless_native_is_asked_for():
    text = (DATA / "rotary_setup.py").read_text()
    portable, changes = bfa.patch_setup_py(text, "x86-64-v2")
    assert "-march=native" not in portable and "-march=x86-64-v2" in portable
    assert "-march=native -> -march=x86-64-v2" in changes
    native, _ = bfa.patch_setup_py(text, "native")
    assert "-march=native" in native


def test_a_gencode_written_another_way_stops_the_build():
    with pytest.raises(bfa.BuildError, match="compute_70"):
        bfa.patch_setup_py('cc_flag += ["-gencode", "arch=compute_70,code=sm_70"]\n', "x86-64-v2")


@pytest.mark.parametrize("kernel,module", [("rotary", "rotary_emb"), ("layer_norm", "dropout_layer_norm")])
def test_supplied_setup_py_is_valid_python_without_gencodes(kernel, module):
    text = bfa.supplied_setup_py(kernel, "x86-64-v2")
    compile(text, "setup.py", "exec")
    assert f'name="{module}"' in text and "gencode" not in text and "-march=native" not in text


@pytest.mark.parametrize("mem,cores,archs,want", [
    (125, 16, 1, (16, 1)),   # the H200 machine: memory allows 25 jobs, cores cap at 16
    (125, 16, 2, (8, 2)),    # two archs: nvcc threads split each file, half the jobs
    (24, 2, 1, (2, 1)),      # this CI machine
    (16, 64, 1, (3, 1)),     # many cores, little memory: 5 GB per job decides
    (3, 8, 1, (1, 1)),       # never zero
])
def test_jobs_follow_memory_and_cores(mem, cores, archs, want):
    assert bfa.plan_jobs(mem, cores, archs) == want


def test_explicit_jobs_and_threads_win():
    assert bfa.plan_jobs(125, 16, 2, jobs=3, nvcc_threads=1) == (3, 1)


def test_arch_lists_for_torch_and_flash_attn():
    assert bfa.arch_env(["8.0", "9.0"]) == "8.0;9.0"
    assert bfa.fa_archs_env(["8.0", "9.0+PTX"]) == "80;90"
    with pytest.raises(bfa.BuildError):
        bfa.arch_env(["sm_90"])


def _sdist(tmp_path: Path, members: dict[str, str]) -> Path:
    path = tmp_path / "flash_attn-2.8.3.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_missing_sdist_is_bad_input(tmp_path, capsys):
    rc = bfa.main(["--sdist", str(tmp_path / "nope.tar.gz"), "--targets", "rotary", "--arch-list", "9.0", "--out", str(tmp_path / "w")])
    assert rc == 2
    assert "sdist not found" in capsys.readouterr().err


def test_rotary_from_a_2_8_3_sdist_is_refused_with_the_alternatives(tmp_path, capsys):
    sdist = _sdist(tmp_path, {"flash_attn-2.8.3/setup.py": "", "flash_attn-2.8.3/csrc/layer_norm/ln_api.cpp": ""})
    rc = bfa.main(["--sdist", str(sdist), "--targets", "rotary", "--arch-list", "9.0", "--out", str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "no csrc/rotary" in err and "2.7.4.post1" in err and "triton" in err


# A failed compile as pip -v logs it (flash-attn 2.7.4.post1's rotary with nvcc 13): the compiler's line is
# in the middle; what follows is ninja's verdict, the Python traceback and pip's cleanup.
FAILED_LOG = """Processing /tmp/envkit-fa-1/flash_attn-2.7.4.post1/csrc/rotary
  Running command python setup.py bdist_wheel
  running bdist_wheel
  running build_ext
  building 'rotary_emb' extension
  Emitting ninja build file /tmp/envkit-fa-1/flash_attn-2.7.4.post1/csrc/rotary/build/temp.linux-x86_64-cpython-312/build.ninja...
  [1/2] c++ -MMD -MF build/rotary.o.d -O3 -march=x86-64-v2 -c rotary.cpp -o build/rotary.o
  [2/2] /usr/local/cuda/bin/nvcc -c rotary_cuda.cu -o build/rotary_cuda.o -gencode arch=compute_90,code=sm_90
  FAILED: build/temp.linux-x86_64-cpython-312/rotary_cuda.o
  /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c rotary_cuda.cu
  rotary_cuda.cu(41): error: identifier "__hfma2_relu" is undefined
  1 error detected in the compilation of "rotary_cuda.cu".
  ninja: build stopped: subcommand failed.
  Traceback (most recent call last):
""" + "".join(f'    File "/usr/lib/python3/torch/utils/cpp_extension.py", line {n}, in _run_ninja_build\n' for n in range(30)) + """\
  RuntimeError: Error compiling objects for extension
  error: subprocess-exited-with-error

  x python setup.py bdist_wheel did not run successfully.
  | exit code: 1
  note: This error originates from a subprocess, and is likely not a problem with pip.
  ERROR: Failed building wheel for rotary_emb
  Running setup.py clean for rotary_emb
  Failed to build rotary_emb
  ERROR: Failed to build one or more wheels
"""


def test_a_failed_compile_shows_the_compilers_first_error_then_the_tail():
    """Issue 14: the script showed only the log's last 25 lines, pip's cleanup and a traceback, never nvcc's error."""
    lines = FAILED_LOG.splitlines()
    text = bfa.failure_excerpt(lines, "rotary.log")
    first, last = text.split("last lines of rotary.log:\n")
    assert first.startswith("the first error, line 11 of rotary.log:\n")
    assert 'rotary_cuda.cu(41): error: identifier "__hfma2_relu" is undefined' in first
    assert "FAILED: build/temp" in first and "ninja: build stopped" in first       # its context, three lines each way
    assert last.splitlines() == lines[-15:]


@pytest.mark.parametrize("line", ["csrc/rotary/rotary.cpp:12:10: fatal error: torch/extension.h: No such file or directory",
                                  "rotary_cuda.cu(41): error : identifier is undefined",
                                  "nvcc fatal   : Unsupported gpu architecture 'compute_70'",
                                  "ninja: build stopped: subcommand failed."])
def test_the_compilers_error_patterns(line):
    lines = ["  running build_ext", "  RuntimeError: Error compiling objects for extension", line] + [f"pip cleanup {i}" for i in range(40)]
    assert f"the first error, line 3 of x.log:" in bfa.failure_excerpt(lines, "x.log")


def test_a_log_without_a_compiler_error_shows_its_tail_and_an_empty_log_says_so():
    lines = [f"line {i}" for i in range(40)]
    assert bfa.failure_excerpt(lines, "x.log") == "last lines of x.log:\n" + "\n".join(lines[-15:])
    short = ["a.cu(1): error: boom", "one", "two"]
    assert bfa.failure_excerpt(short, "x.log") == "the first error, line 1 of x.log:\na.cu(1): error: boom\none\ntwo"   # no tail twice
    assert bfa.failure_excerpt([], "x.log") == "x.log is empty"


def test_a_failing_compile_command_raises_with_the_excerpt(tmp_path, capsys):
    """_run on a real process that prints the fake log and exits 1, as pip does when nvcc fails."""
    fake = tmp_path / "fake_pip.py"
    fake.write_text(f"import sys\nsys.stdout.write({FAILED_LOG!r})\nsys.exit(1)\n")
    log = tmp_path / "rotary.log"
    with pytest.raises(bfa.BuildError) as err:
        bfa._run([sys.executable, str(fake)], str(tmp_path), {}, str(log), "rotary")
    assert err.value.code == 4 and log.read_text() == FAILED_LOG
    assert str(err.value).startswith(f"rotary failed (exit 1); the first error, line 11 of {log}:")
    assert '__hfma2_relu" is undefined' in str(err.value) and "compiled 2/2" in capsys.readouterr().out
