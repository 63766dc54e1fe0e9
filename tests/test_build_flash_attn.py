"""The kernel build script's pure parts, on setup.py texts written here in the shape of flash-attn 2.7.4.post1's
csrc/rotary and csrc/layer_norm ones (six hard-coded gencode appends, two of them under a CUDA version check; rotary's
-march=native). The compile itself runs on the GPU machine: docs/kernel-build-gpu.md."""
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


def _setup_py(module: str, cxx: list[str]) -> str:
    """A csrc setup.py as flash-attn 2.7.4.post1 lays its flags out (test text): the gencode pairs appended one line
    each, sm_90 only from CUDA 11.8, the cxx flags inline."""
    return f"""# test text: a kernel's setup.py
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

cuda_version = (12, 4)
cc_flag = []
cc_flag.append("-gencode")
cc_flag.append("arch=compute_70,code=sm_70")
cc_flag.append("-gencode")
cc_flag.append("arch=compute_80,code=sm_80")
if cuda_version >= (11, 8):
    cc_flag.append("-gencode")
    cc_flag.append("arch=compute_90,code=sm_90")

setup(
    name="{module}",
    ext_modules=[CUDAExtension("{module}", ["{module}.cpp", "{module}_cuda.cu"],
                               extra_compile_args={{"cxx": {cxx!r}, "nvcc": ["-O3", "--use_fast_math"] + cc_flag}})],
    cmdclass={{"build_ext": BuildExtension}},
)
"""


SETUP_PY = {"rotary": _setup_py("rotary_emb", ["-g", "-march=native", "-funroll-loops"]),
            "layer_norm": _setup_py("dropout_layer_norm", ["-O3"])}


@pytest.mark.parametrize("kernel", ["rotary", "layer_norm"])
def test_upstream_setup_py_loses_every_hard_coded_gencode(kernel):
    text = SETUP_PY[kernel]
    assert "arch=compute_70,code=sm_70" in text
    patched, changes = bfa.patch_setup_py(text, "x86-64-v2")
    assert "compute_" not in patched.replace("compute capability", "")
    assert "-gencode" not in patched
    compile(patched, f"{kernel}/setup.py", "exec")
    assert changes[0].startswith("removed 6 hard-coded gencode line(s)")


def test_rotary_march_native_is_replaced_unless_native_is_asked_for():
    text = SETUP_PY["rotary"]
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


# ---------------------------------------------------------------- the serving profile (issue 28)

KERNELS_2_8 = ["flash_api.cpp"] + [f"flash_{k}_hdim{d}_{t}{c}_sm80.cu" for k in ("fwd", "fwd_split", "bwd")
                                   for d in (32, 64, 96, 128, 192, 256) for t in ("fp16", "bf16") for c in ("", "_causal")]


def test_the_serving_profile_keeps_forward_and_split_kv_kernels_of_the_asked_head_dims():
    kept, stubbed = bfa.select_sources(KERNELS_2_8, "serving", (64, 128, 256), ("fp16", "bf16"))
    assert "flash_api.cpp" in kept
    parts = [bfa.kernel_parts(k) for k in kept if bfa.kernel_parts(k)]
    assert {p["kind"] for p in parts} == {"fwd", "fwd_split"} and {p["hdim"] for p in parts} == {64, 128, 256}
    assert len(parts) == 2 * 3 * 2 * 2  # fwd + split, 3 head dims, 2 dtypes, causal or not
    assert len(stubbed) == len(KERNELS_2_8) - 1 - len(parts)
    assert all(bfa.kernel_parts(s)["kind"] == "bwd" or bfa.kernel_parts(s)["hdim"] not in (64, 128, 256) for s in stubbed)
    assert bfa.select_sources(KERNELS_2_8, "full") == (KERNELS_2_8, [])


@pytest.mark.parametrize("text, want", [("full", ("full", (), ())), ("serving", ("serving", (64, 128, 256), ("fp16", "bf16"))),
                                        ("serving:128", ("serving", (128,), ("fp16", "bf16"))),
                                        ("serving:256,64:bf16", ("serving", (64, 256), ("bf16",)))])
def test_profiles_are_read(text, want):
    assert bfa.parse_profile(text) == want


@pytest.mark.parametrize("text", ["fast", "full:64", "serving:x", "serving:64:fp8", "serving:0"])
def test_a_bad_profile_is_bad_input(text):
    with pytest.raises(bfa.BuildError) as e:
        bfa.parse_profile(text)
    assert e.value.code == 2


KERNEL_TEXT = """#include "namespace_config.h"
#include "flash_bwd_launch_template.h"

namespace FLASH_NAMESPACE {

template<>
void run_mha_bwd_<cutlass::half_t, 96, true>(Flash_bwd_params &params, cudaStream_t stream) {
    run_mha_bwd_hdim96<cutlass::half_t, true>(params, stream);
}

} // namespace FLASH_NAMESPACE
"""


def test_a_left_out_kernel_becomes_a_stub_that_raises_naming_what_is_missing():
    stub = bfa.stub_kernel(KERNEL_TEXT, "serving profile: the backward pass (training) is not in this build")
    assert '#include "flash_bwd_launch_template.h"' not in stub and '#include "flash.h"' in stub and "<stdexcept>" in stub
    assert "run_mha_bwd_hdim96" not in stub  # no kernel is instantiated
    assert "void run_mha_bwd_<cutlass::half_t, 96, true>(Flash_bwd_params &params, cudaStream_t stream) {" in stub
    assert 'throw std::runtime_error("serving profile: the backward pass (training) is not in this build (run_mha_bwd_<cutlass::half_t, 96, true>)");' in stub
    assert stub.rstrip().endswith("} // namespace FLASH_NAMESPACE")  # the namespace is closed as before
    with pytest.raises(bfa.BuildError, match="no template specialization"):
        bfa.stub_kernel("// nothing here\n", "x")


def test_apply_profile_stubs_in_place_and_counts(tmp_path):
    src = tmp_path / "csrc" / "flash_attn" / "src"
    src.mkdir(parents=True)
    for name in KERNELS_2_8:
        fn = "run_mha_bwd_" if "_bwd_" in name else "run_mha_fwd_splitkv_dispatch" if "split" in name else "run_mha_fwd_"
        (src / name).write_text(KERNEL_TEXT.replace("run_mha_bwd_<", fn + "<"))
    report = bfa.apply_profile(str(tmp_path), "2.8.3", "serving", (128,), ("bf16",))
    assert report == {"profile": "serving", "head_dims": [128], "dtypes": ["bf16"], "kernels": len(KERNELS_2_8) - 1,
                      "compiled": 4, "stubbed": len(KERNELS_2_8) - 1 - 4}
    assert "throw" not in (src / "flash_fwd_hdim128_bf16_causal_sm80.cu").read_text()
    assert "head dim 96 in fp16 (causal) is not in this build" in (src / "flash_fwd_hdim96_fp16_causal_sm80.cu").read_text()
    assert "rebuild with --flash-attn-profile full" in (src / "flash_bwd_hdim128_bf16_sm80.cu").read_text()


def test_progress_estimates_what_is_left():
    assert bfa.eta(0, 73, 10.0) == "" and bfa.eta(73, 73, 900.0) == ""
    assert bfa.eta(10, 73, 300.0) == ", ~32 min left" and bfa.eta(70, 73, 70.0) == ", ~3 s left"


@pytest.mark.parametrize("args, needle", [
    (["--sdist", "/nonexistent/flash_attn-2.8.3.tar.gz"], "sdist not found"),
    (["--work", "/nonexistent/work"], "--work /nonexistent/work: no such directory"),
    (["--out", "/proc/no/such"], "--out /proc/no/such: cannot be made"),
    (["--profile", "fast"], "is not a profile"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path, capsys):
    """Issue 28: `--work` that did not exist ended in a FileNotFoundError traceback."""
    sdist = tmp_path / "flash_attn-2.8.3.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        info = tarfile.TarInfo("flash_attn-2.8.3/setup.py")
        info.size = 0
        tar.addfile(info, io.BytesIO(b""))
    base = {"--sdist": str(sdist), "--arch-list": "9.0", "--out": str(tmp_path / "out"), "--targets": "flash_attn"}
    given = dict(zip(args[::2], args[1::2]))
    argv = [x for k, v in {**base, **given}.items() for x in (k, v)]
    assert bfa.main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_tarball_that_is_not_flash_attn_is_refused(tmp_path, capsys):
    sdist = tmp_path / "other-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        info = tarfile.TarInfo("other-1.0/README")
        info.size = 0
        tar.addfile(info, io.BytesIO(b""))
    assert bfa.main(["--sdist", str(sdist), "--arch-list", "9.0", "--out", str(tmp_path / "o")]) == 2
    assert "is not a flash-attn sdist" in capsys.readouterr().err


SPLIT_TEXT = """#include "flash_fwd_launch_template.h"

template void run_mha_fwd_splitkv_dispatch<cutlass::bfloat16_t, 192, false>(Flash_fwd_params &params, cudaStream_t stream);
"""


def test_a_split_kv_files_explicit_instantiation_becomes_a_raising_specialization():
    stub = bfa.stub_kernel(SPLIT_TEXT, "not built")
    assert "template void" not in stub
    assert ("template<>\nvoid run_mha_fwd_splitkv_dispatch<cutlass::bfloat16_t, 192, false>(Flash_fwd_params &params, cudaStream_t stream) {"
            in stub)
    assert 'throw std::runtime_error("not built (run_mha_fwd_splitkv_dispatch<cutlass::bfloat16_t, 192, false>)");' in stub


EXTRACTS = sorted((ROOT / "data" / "sources" / "flash-attn").glob("2.*.json"))


def _recorded(path: Path) -> list[dict]:
    import json

    return json.loads(path.read_text())["sdist"]["cuda_extension"]["sources"]


@pytest.mark.parametrize("path", EXTRACTS, ids=[p.stem for p in EXTRACTS])
def test_the_serving_selection_holds_for_every_release_the_matrix_knows(path):
    """Issue 28: the kernel files change between releases (hdim 224 and 160 dropped, causal split into its own files in
    2.6, split-KV files from 2.1.2): for each release's recorded list (data/sources/flash-attn, read from its sdist's
    setup.py and each file's text), the serving profile keeps flash_api.cpp and the forward (and split-KV) kernels of
    head dims 64, 128, 256 in both dtypes, and every file it leaves out has a form the stub generator rewrites."""
    sources = _recorded(path)
    names = [s["path"].rsplit("/", 1)[-1] for s in sources]
    kept, stubbed = bfa.select_sources(names, "serving")
    assert "flash_api.cpp" in kept
    by_name = {s["path"].rsplit("/", 1)[-1]: s for s in sources}
    for name in kept:
        s = by_name[name]
        assert "kind" not in s or (s["kind"] in ("fwd", "fwd_split") and s["hdim"] in (64, 128, 256)), name
    kept_kinds = {(by_name[n]["kind"], by_name[n]["hdim"], by_name[n]["dtype"]) for n in kept if "kind" in by_name[n]}
    assert {("fwd", d, t) for d in (64, 128, 256) for t in ("fp16", "bf16")} <= kept_kinds
    for name in stubbed:
        s = by_name[name]
        assert bfa.kernel_parts(name) == {k: s[k] for k in ("kind", "hdim", "dtype", "arch")} | {"causal": bool(s["causal"])}, name
        assert s["specialization"]["form"] in ("specialization", "instantiation"), (name, s["specialization"]["form"])
    assert len(kept) + len(stubbed) == len(names)


def test_a_stubbed_file_keeps_its_time_so_a_cached_build_finds_it_up_to_date(tmp_path):
    """On the H200 a rebuild from the cache compiled 32 of 73 units again: the stubs were rewritten with fresh times,
    newer than their cached objects (docs/flash-attn-build-h200.md). Rewritten sources keep the sdist's times."""
    import os

    src = tmp_path / "csrc" / "flash_attn" / "src"
    src.mkdir(parents=True)
    for name in KERNELS_2_8[1:]:
        (src / name).write_text(KERNEL_TEXT)
        os.utime(src / name, (1_600_000_000, 1_600_000_000))
    bfa.apply_profile(str(tmp_path), "2.8.3", "serving", (128,), ("bf16",))
    stub = src / "flash_bwd_hdim64_fp16_sm80.cu"
    assert "throw" in stub.read_text() and stub.stat().st_mtime == 1_600_000_000
