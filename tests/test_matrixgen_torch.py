"""Unit tests of envkit.matrixgen.torch_source and derive_torch on literal inputs (no network, no git)."""
from __future__ import annotations

import struct

import pytest

from envkit.matrixgen import derive_torch as dt
from envkit.matrixgen import pypi
from envkit.matrixgen import torch_source as ts


# ---------------------------------------------------------------- arch flags in a binary

def test_arch_flags_found_nul_terminated():
    blob = b"\x00junk\x00sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90\x00more\x00"
    assert ts.parse_arch_flags(blob) == ["sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"]


def test_arch_flags_glued_to_a_preceding_unterminated_literal():
    # 2.8.0's libtorch_python.so: the string follows bytes of another literal with no NUL between
    blob = b"std::string ipc_hsm_70 sm_75 sm_80 sm_86 sm_90 sm_100 sm_120\x00"
    assert ts.parse_arch_flags(blob) == ["sm_70 sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"]


def test_arch_flags_with_ptx_and_suffixes():
    blob = b"\x00sm_90a sm_100f sm_120 compute_120\x00"
    assert ts.parse_arch_flags(blob) == ["sm_90a sm_100f sm_120 compute_120"]


def test_arch_flags_ignores_single_tokens_unterminated_and_duplicates():
    blob = (b"\x00only sm_80 here\x00"        # one token inside a message
            b"\x00sm_75 sm_80 trailing text\x00"  # not terminated right after the tokens
            b"\x00sm_75 sm_80\x00\x00sm_75 sm_80\x00")
    assert ts.parse_arch_flags(blob) == ["sm_75 sm_80"]


def test_split_and_arch_list_form():
    assert ts.split_arch_flags("sm_75 sm_80 compute_80") == {"sm": ["sm_75", "sm_80"], "ptx": ["compute_80"]}
    assert ts.arch_list_form("sm_50 sm_60 sm_90") == "5.0;6.0;9.0"
    assert ts.arch_list_form("sm_80 sm_90 compute_90") == "8.0;9.0+PTX"
    assert ts.arch_list_form("sm_90a sm_100 sm_120") == "9.0a;10.0;12.0"
    assert ts.arch_list_form("sm_80 compute_120") == "8.0;12.0+PTX"
    with pytest.raises(ts.Unrecognised):
        ts.split_arch_flags("sm_80 gfx90a")


def test_arch_list_tokens_keeps_order():
    assert ts.arch_list_tokens("5.0;6.0;7.0;7.5;8.0;8.6;3.7;9.0")["sm"] == \
        ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_37", "sm_90"]
    assert ts.arch_list_tokens("7.5;12.0+PTX") == {"sm": ["sm_75", "sm_120"], "ptx": ["compute_120"]}
    with pytest.raises(ts.Unrecognised):
        ts.arch_list_tokens("8.0;Ampere")


# ---------------------------------------------------------------- version.py

OLD_VERSION_PY = """__version__ = '1.13.0+cu117'
debug = False
cuda = '11.7'
git_version = '7c98e70d44abc7a1aead68b6ea6c8adc8c554db5'
hip = None
"""

NEW_VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '2.15.0+cu132'
debug = False
cuda: Optional[str] = '13.2'
git_version = 'd0f2af8b66b20da4baa50644c0cd3f887a2eae2e'
hip: Optional[str] = None
rocm: Optional[str] = None
xpu: Optional[str] = None
"""


def test_version_py_both_shapes():
    old = ts.parse_version_py(OLD_VERSION_PY)
    assert (old["__version__"], old["cuda"], old["hip"], old["debug"]) == ("1.13.0+cu117", "11.7", None, False)
    new = ts.parse_version_py(NEW_VERSION_PY)
    assert new["cuda"] == "13.2" and new["rocm"] is None and new["git_version"].startswith("d0f2af8b")
    assert "cuda: Optional[str] = '13.2'" in new["evidence"]
    assert not any(line.startswith("__all__") for line in new["evidence"])


def test_version_py_missing_field_is_refused():
    with pytest.raises(ts.Unrecognised):
        ts.parse_version_py("__version__ = '2.0.0'\n")


# ---------------------------------------------------------------- C++ ABI

def _tiny_elf(names: list[str]) -> bytes:
    """A 64-bit little-endian ELF with a .dynsym over a .dynstr holding `names` (sections only)."""
    dynstr = b"\x00" + b"".join(n.encode() + b"\x00" for n in names)
    offs, o = [], 1
    for n in names:
        offs.append(o)
        o += len(n) + 1
    dynsym = b"\x00" * 24 + b"".join(struct.pack("<IBBHQQ", off, 0x12, 0, 1, 0, 0) for off in offs)
    shstr = b"\x00.dynstr\x00.dynsym\x00"
    body_off = 64
    dynstr_off = body_off
    dynsym_off = dynstr_off + len(dynstr)
    shstr_off = dynsym_off + len(dynsym)
    sh_off = shstr_off + len(shstr)
    sh_off += (-sh_off) % 8

    def sh(name, typ, off, size, link, entsize):
        return struct.pack("<IIQQQQIIQQ", name, typ, 0, 0, off, size, link, 0, 1, entsize)

    sections = (sh(0, 0, 0, 0, 0, 0) + sh(1, 3, dynstr_off, len(dynstr), 0, 0) +
                sh(9, 11, dynsym_off, len(dynsym), 1, 24) + sh(0, 3, shstr_off, len(shstr), 0, 0))
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, sh_off)
    struct.pack_into("<HHH", header, 0x3A, 64, 4, 3)
    blob = bytes(header) + dynstr + dynsym + shstr
    return blob + b"\x00" * (sh_off - len(blob)) + sections


def test_elf_dynamic_names_reads_dynsym():
    names = ["_ZN5torch3fooERKSs", "PyInit__C"]
    assert ts.elf_dynamic_names(_tiny_elf(names)) == names
    with pytest.raises(ts.Unrecognised):
        ts.elf_dynamic_names(b"MZ not an elf")


NEW = "_ZN5torch3fooERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
OLD = "_ZN5torch3fooERKSs"
CFG0 = 'if(CMAKE_SYSTEM_NAME STREQUAL "Linux")\n  set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=0")\nendif()\n'
CFG1 = CFG0.replace("=0", "=1")


def test_cxx11abi_both_methods_agree():
    r = ts.cxx11abi_from(CFG0, [OLD, "PyInit__C"])
    assert (r["value"], r["method"], r["torch_config_value"], r["dynsym_value"]) == (0, "torch_config+dynsym", 0, 0)
    r = ts.cxx11abi_from(CFG1, [NEW])
    assert (r["value"], r["dynsym_cxx11_names"]) == (1, 1)


def test_cxx11abi_one_method_or_none():
    assert ts.cxx11abi_from("# no flags line", [NEW])["value"] == 1
    assert ts.cxx11abi_from(None, [NEW])["method"] == "dynsym"
    r = ts.cxx11abi_from(CFG0, [NEW])
    assert r["value"] is None and r["reason"] == "measurements disagree"
    r = ts.cxx11abi_from(None, ["PyInit__C"])
    assert r["value"] is None and r["reason"] == "neither measurement found"


# ---------------------------------------------------------------- python tags

def test_python_spec():
    assert ts.python_spec(["cp37m", "cp38", "cp39", "cp310", "cp311"]) == \
        {"versions": ["3.7", "3.8", "3.9", "3.10", "3.11"], "free_threaded": [], "specifier": ">=3.7,<3.12"}
    r = ts.python_spec(["cp311", "cp312", "cp313", "cp314", "cp314t", "cp315", "cp315t"])
    assert r["specifier"] == ">=3.11,<3.16" and r["free_threaded"] == ["3.14t", "3.15t"]
    assert ts.python_spec(["cp39", "cp311"])["specifier"] == "==3.9.* || ==3.11.*"
    assert ts.python_spec(["abi3", "none"])["specifier"] is None


def test_cuda_requirements_keeps_nvidia_and_cuda_lines_verbatim():
    reqs = ["filelock", 'nvidia-cudnn-cu13==9.26.0.51; platform_system == "Linux"',
            'cuda-toolkit[cublas,cudart]==13.2.2; platform_system == "Linux"', "triton~=3.9.0", "sympy>=1.13.3"]
    assert ts.cuda_requirements(reqs) == reqs[1:3]


# ---------------------------------------------------------------- derive (pure)

def _wheel(name, build=None, abi="cp311"):
    return {"filename": name, "url": f"https://files.example/{name}", "sha256": "ab" * 32, "size": 1,
            "upload_time": "2025-01-29T16:17:26Z", "yanked": False, "build_tag": build,
            "python_tags": [abi.rstrip("tm")], "abi_tags": [abi], "platform_tags": ["manylinux_2_28_x86_64"]}


def _measured(name, flags, cuda="12.6", commit="c0ffee", abi=1):
    return {
        "wheel": {"filename": name, "url": f"https://files.example/{name}", "sha256": "ab" * 32,
                  "citation": f"https://files.example/{name}#sha256={'ab' * 32}"},
        "metadata": {"Requires-Python": ">=3.9.0", "requires_dist_cuda": ["nvidia-cuda-runtime-cu12==12.6.77"],
                     "requires_dist_triton": []},
        "version_py": {"__version__": f"2.7.0+cu{cuda.replace('.', '')}", "cuda": cuda, "hip": None, "git_version": commit,
                       "evidence": []},
        "arch_flags": {"strings": flags},
        "cxx11abi": {"value": abi, "method": "dynsym"},
    }


def test_derive_one_release():
    ext = {"version": "2.7.0",
           "linux_x86_64_wheels": [_wheel("a-cp39.whl", abi="cp39"), _wheel("a-cp313.whl", abi="cp313"),
                                   _wheel("a-cp313t.whl", abi="cp313t"), _wheel("a-cp310.whl", abi="cp310"),
                                   _wheel("a-cp311.whl"), _wheel("a-cp312.whl", abi="cp312")],
           "measured": [_measured("a-cp311.whl", ["sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90 compute_90"])]}
    [d] = ts.derive([ext])
    assert d["python"]["specifier"] == ">=3.9,<3.14" and d["python"]["free_threaded"] == ["3.13t"]
    assert d["default_cuda"] == "12.6" and d["local_version"] == "cu126"
    assert d["pypi_archs"] == ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    assert d["ptx"] == ["compute_90"]
    assert d["torch_cuda_arch_list"] == "5.0;6.0;7.0;7.5;8.0;8.6;9.0+PTX"
    assert d["cxx11abi"] == 1 and d["git_commit"] == "c0ffee"
    assert d["sources"] == [f"https://files.example/a-cp311.whl#sha256={'ab' * 32}"]


def test_derive_sorts_and_refuses_ambiguous_flags():
    e1 = {"version": "2.10.0", "linux_x86_64_wheels": [_wheel("b.whl")],
          "measured": [_measured("b.whl", ["sm_70 sm_75", "sm_80 sm_90"]), _measured("b0.whl", ["sm_70 sm_75"])]}
    e2 = {"version": "2.9.0", "linux_x86_64_wheels": [_wheel("c.whl")], "measured": [_measured("c.whl", ["sm_75 sm_80"])]}
    out = ts.derive([e1, e2])
    assert [d["version"] for d in out] == ["2.9.0", "2.10.0"]
    amb = out[1]
    assert amb["pypi_archs"] is None and amb["ptx"] is None and "expected exactly 1" in amb["arch_reason"]
    assert amb["other_builds"] == {"measured": ["b0.whl"], "differ": ["b0.whl"]}
    assert out[0]["ptx"] is None


def test_derive_without_measurement():
    [d] = ts.derive([{"version": "9.9.9", "linux_x86_64_wheels": [], "measured": []}])
    assert d["pypi_archs"] is None and d["reason"]


# ---------------------------------------------------------------- build-script interpreters (synthetic inputs)

BUILD_CUDA = """
cuda_version_nodot=$(echo $CUDA_VERSION | tr -d '.')

TORCH_CUDA_ARCH_LIST="5.0;6.0"
case ${CUDA_VERSION} in
    12.4)
        if [[ "$GPU_ARCH_TYPE" = "cuda-aarch64" ]]; then
            TORCH_CUDA_ARCH_LIST="9.0"
        else
            TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST};9.0"
        fi
        ;;
    11.[67])
        TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST};3.7"
        ;;
    12.8|12.9)
        TORCH_CUDA_ARCH_LIST="7.5;12.0+PTX"
        ;;
    *)
        echo "unknown cuda version $CUDA_VERSION"
        exit 1
        ;;
esac
if [[ -n "$OVERRIDE_TORCH_CUDA_ARCH_LIST" ]]; then
    TORCH_CUDA_ARCH_LIST="$OVERRIDE_TORCH_CUDA_ARCH_LIST"
fi
"""


def test_build_cuda_interpreter():
    r = ts.cuda_arch_list_from_build_cuda(BUILD_CUDA, "12.4")
    assert r["arch_list"] == "5.0;6.0;9.0"
    assert [n for n, _ in r["lines"]] == [4, 6, 10]
    assert ts.cuda_arch_list_from_build_cuda(BUILD_CUDA, "11.7")["arch_list"] == "5.0;6.0;3.7"
    assert ts.cuda_arch_list_from_build_cuda(BUILD_CUDA, "12.9")["arch_list"] == "7.5;12.0+PTX"
    with pytest.raises(ts.Unrecognised):
        ts.cuda_arch_list_from_build_cuda(BUILD_CUDA, "13.0")


def test_build_cuda_interpreter_refuses_unknown_shapes():
    with pytest.raises(ts.Unrecognised):
        ts.cuda_arch_list_from_build_cuda("TORCH_CUDA_ARCH_LIST=\"5.0\"\n", "12.4")
    odd = BUILD_CUDA.replace('if [[ "$GPU_ARCH_TYPE" = "cuda-aarch64" ]]; then', 'if [[ "$X" = "y" ]]; then')
    with pytest.raises(ts.Unrecognised):
        ts.cuda_arch_list_from_build_cuda(odd, "12.4")
    later = BUILD_CUDA + 'TORCH_CUDA_ARCH_LIST="8.0"\n'
    with pytest.raises(ts.Unrecognised):
        ts.cuda_arch_list_from_build_cuda(later, "12.4")


BUILD_DOCKER = """
case ${GPU_ARCH_TYPE} in
    cuda)
        TARGET=cuda_final
        ;;
    rocm)
        TARGET=rocm_final
        PYTORCH_ROCM_ARCH="gfx900;gfx906"
        if [[ $ROCM_VERSION_INT -ge 40300 ]]; then
            PYTORCH_ROCM_ARCH="${PYTORCH_ROCM_ARCH};gfx90a"
        fi
        if [[ $ROCM_VERSION_INT -ge 60000 ]]; then
            PYTORCH_ROCM_ARCH+=";gfx942"
        fi
        DOCKER_GPU_BUILD_ARG="--build-arg PYTORCH_ROCM_ARCH=${PYTORCH_ROCM_ARCH}"
        ;;
esac
"""


def test_build_docker_rocm_interpreter():
    assert ts.rocm_arch_from_build_docker(BUILD_DOCKER, "4.2")["gfx"] == ["gfx900", "gfx906"]
    assert ts.rocm_arch_from_build_docker(BUILD_DOCKER, "5.4.2")["gfx"] == ["gfx900", "gfx906", "gfx90a"]
    r = ts.rocm_arch_from_build_docker(BUILD_DOCKER, "6.0")
    assert r["gfx"] == ["gfx900", "gfx906", "gfx90a", "gfx942"]
    assert [n for n, _ in r["lines"]] == [8, 9, 10, 12, 13]
    with pytest.raises(ts.Unrecognised):
        ts.rocm_arch_from_build_docker(BUILD_DOCKER.replace("rocm)", "hip)"), "6.0")


def test_release_matrix_is_read_without_executing():
    text = ('import os\nCUDA_ARCHES_DICT = {\n    "nightly": ["12.6", "13.0"],\n    "test": ["12.6", "13.0"],\n}\n'
            'ROCM_ARCHES_DICT = {"test": ["7.1"]}\nCURRENT_CANDIDATE_VERSION = "2.12.0"\nX = os.getcwd()\n')
    m = ts.parse_release_matrix(text)
    assert m == {"CUDA_ARCHES_DICT": {"nightly": ["12.6", "13.0"], "test": ["12.6", "13.0"]},
                 "ROCM_ARCHES_DICT": {"test": ["7.1"]}, "CURRENT_CANDIDATE_VERSION": "2.12.0"}


# ---------------------------------------------------------------- Linux aarch64: PyPI wheels

def _pypi_file(name: str):
    return pypi.PyPIFile(filename=name, url=f"https://files.example/{name}", sha256="ab" * 32, size=1,
                         upload_time="2025-01-29T16:17:26Z", has_metadata=True, yanked=False)


def test_linux_wheels_split_by_machine():
    names = ["torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl", "torch-2.6.0-cp311-cp311-manylinux_2_28_aarch64.whl",
             "torch-2.5.1-cp311-cp311-manylinux2014_aarch64.whl", "torch-2.6.0-cp311-none-macosx_11_0_arm64.whl",
             "torch-2.6.0-cp311-cp311-win_amd64.whl", "torch-2.6.0.tar.gz"]
    fs = [_pypi_file(n) for n in names]
    assert [f.filename for f in ts.linux_x86_64(fs)] == [names[0]]
    assert [f.filename for f in ts.linux_aarch64(fs)] == sorted([names[1], names[2]])


# ---------------------------------------------------------------- Linux aarch64: the build matrix (synthetic, in the
# shapes of generate_binary_build_matrix.py at 2.0.0, 2.1.0, 2.4.0, 2.9.1 and 2.12.1)

MATRIX_NO_AARCH64 = '''
CUDA_ARCHES = ["11.7", "11.8"]
ENABLE = "enable"
def generate_wheels_matrix(os, channel, with_cuda, arches=None):
    if arches is None:
        arches = ["cpu"]
'''

MATRIX_21 = '''
import sys
mod = sys.modules[__name__]
CUDA_ARCHES_DICT = {"nightly": ["11.8", "12.1"], "test": ["11.8", "12.1"], "release": ["11.8", "12.1"]}
ROCM_ARCHES_DICT = {"test": ["5.5", "5.6"]}
CPU_AARCH64_ARCH = ["cpu-aarch64"]
ENABLE = "enable"
TEST = "test"
CURRENT_CANDIDATE_VERSION = "2.1.0"

def arch_type(arch_version: str) -> str:
    if arch_version in mod.CUDA_ARCHES:
        return "cuda"
    elif arch_version in mod.ROCM_ARCHES:
        return "rocm"
    elif arch_version in CPU_AARCH64_ARCH:
        return "cpu-aarch64"
    else:  # arch_version should always be "cpu" in this case
        return "cpu"

def initialize_globals(channel: str):
    if channel == TEST:
        mod.CURRENT_VERSION = CURRENT_CANDIDATE_VERSION
    mod.CUDA_ARCHES = CUDA_ARCHES_DICT[channel]
    mod.ROCM_ARCHES = ROCM_ARCHES_DICT[channel]
    mod.WHEEL_CONTAINER_IMAGES = {**{a: f"pytorch/manylinux-builder:cuda{a}" for a in mod.CUDA_ARCHES}}

def translate_desired_cuda(gpu_arch_type: str, gpu_arch_version: str) -> str:
    return {
        "cpu": "cpu",
        "cpu-aarch64": "cpu",
        "cuda": f"cu{gpu_arch_version.replace('.', '')}",
        "rocm": f"rocm{gpu_arch_version}",
    }.get(gpu_arch_type, gpu_arch_version)

def generate_wheels_matrix(os: str, channel: str, with_cuda: str, with_rocm: str, with_cpu: str,
                           limit_pr_builds: bool, arches=None, python_versions=None):
    package_type = "wheel"
    upload_to_base_bucket = "yes"
    if arches is None:
        # Define default compute architectures
        arches = []

        if with_cpu == ENABLE:
            arches += ["cpu"]

        if os == "linux-aarch64":
            arches = ["cpu-aarch64"]

        if with_cuda == ENABLE:
            upload_to_base_bucket = "no"
            if os == "linux" or os == "windows":
                arches += mod.CUDA_ARCHES
    return []
'''

MATRIX_24 = '''
CUDA_ARCHES_DICT = {"test": ["11.8", "12.1", "12.4"]}
ROCM_ARCHES_DICT = {"test": ["6.0", "6.1"]}
LINUX = "linux"
LINUX_AARCH64 = "linux-aarch64"
WINDOWS = "windows"
CPU = "cpu"
CPU_AARCH64 = "cpu-aarch64"
CUDA_AARCH64 = "cuda-aarch64"
CUDA = "cuda"
ROCM = "rocm"
XPU = "xpu"
ENABLE = "enable"

def arch_type(arch_version: str) -> str:
    if arch_version in CUDA_ARCHES:
        return CUDA
    elif arch_version in ROCM_ARCHES:
        return ROCM
    elif arch_version == CPU_AARCH64:
        return CPU_AARCH64
    elif arch_version == CUDA_AARCH64:
        return CUDA_AARCH64
    elif arch_version == XPU:
        return XPU
    else:
        return CPU

def initialize_globals(channel: str, build_python_only: bool) -> None:
    global CUDA_ARCHES, ROCM_ARCHES
    CUDA_ARCHES = CUDA_ARCHES_DICT[channel]
    ROCM_ARCHES = ROCM_ARCHES_DICT[channel]
    WHEEL_CONTAINER_IMAGES = {CPU_AARCH64: "pytorch/manylinuxaarch64-builder:cpu-aarch64",
                              CUDA_AARCH64: "pytorch/manylinuxaarch64-builder:cuda12.4"}

def translate_desired_cuda(gpu_arch_type: str, gpu_arch_version: str) -> str:
    return {
        CPU: "cpu",
        CPU_AARCH64: CPU,
        CUDA_AARCH64: "cu124",
        CUDA: f"cu{gpu_arch_version.replace('.', '')}",
        ROCM: f"rocm{gpu_arch_version}",
        XPU: "xpu",
    }.get(gpu_arch_type, gpu_arch_version)

def generate_wheels_matrix(os: str, channel: str, with_cuda: str, with_rocm: str, with_cpu: str, with_xpu: str,
                           limit_pr_builds: bool, use_only_dl_pytorch_org: bool, arches=None):
    if arches is None:
        arches = []
        if with_cpu == ENABLE:
            arches += [CPU]
        if os == LINUX_AARCH64:
            arches = [CPU_AARCH64, CUDA_AARCH64]
        if with_cuda == ENABLE:
            if os == LINUX or os == WINDOWS:
                arches += CUDA_ARCHES
        if with_xpu == ENABLE:
            if os == LINUX:
                arches += [XPU]
    return []
'''

MATRIX_291 = '''
CUDA_ARCHES_DICT = {"nightly": ["12.6", "12.8", "13.0"], "test": ["12.6", "12.8", "13.0"], "release": ["12.6", "12.8", "13.0"]}
CUDA_AARCH64_ARCHES = ["12.6-aarch64", "12.8-aarch64", "13.0-aarch64"]
ROCM_ARCHES_DICT = {"test": ["6.3", "6.4"], "release": ["6.3", "6.4"]}
LINUX = "linux"
LINUX_AARCH64 = "linux-aarch64"
WINDOWS = "windows"
CPU = "cpu"
CPU_AARCH64 = "cpu-aarch64"
CUDA_AARCH64 = "cuda-aarch64"
CUDA = "cuda"
ROCM = "rocm"
XPU = "xpu"
ENABLE = "enable"

def arch_type(arch_version: str) -> str:
    if arch_version in CUDA_ARCHES:
        return CUDA
    elif arch_version in ROCM_ARCHES:
        return ROCM
    elif arch_version == CPU_AARCH64:
        return CPU_AARCH64
    elif arch_version in CUDA_AARCH64_ARCHES:
        return CUDA_AARCH64
    else:
        return CPU

def initialize_globals(channel: str, os: str, build_python_only: bool) -> None:
    global CUDA_ARCHES, CUDA_AARCH64_ARCHES, ROCM_ARCHES
    CUDA_ARCHES = CUDA_ARCHES_DICT[channel]
    if channel != "release" and (os == LINUX or os == LINUX_AARCH64):
        CUDA_ARCHES.append("12.9")
        CUDA_AARCH64_ARCHES.append("12.9-aarch64")
    ROCM_ARCHES = ROCM_ARCHES_DICT[channel]

def translate_desired_cuda(gpu_arch_type: str, gpu_arch_version: str) -> str:
    return {
        CPU: "cpu",
        CPU_AARCH64: CPU,
        CUDA_AARCH64: f"cu{gpu_arch_version.replace('-aarch64', '').replace('.', '')}",
        CUDA: f"cu{gpu_arch_version.replace('.', '')}",
        ROCM: f"rocm{gpu_arch_version}",
        XPU: "xpu",
    }.get(gpu_arch_type, gpu_arch_version)

def generate_wheels_matrix(os: str, channel: str, with_cuda: str, with_rocm: str, with_cpu: str, with_xpu: str,
                           limit_pr_builds: bool, use_only_dl_pytorch_org: bool, getting_started: bool = False,
                           python_versions=None, arches=None):
    upload_to_base_bucket = "yes"
    if arches is None:
        arches = []

        if with_cpu == ENABLE:
            arches += [CPU_AARCH64] if os == LINUX_AARCH64 else [CPU]

        if with_cuda == ENABLE:
            upload_to_base_bucket = "no"
            if os in (LINUX, WINDOWS):
                arches += CUDA_ARCHES
            elif os == LINUX_AARCH64:
                arches += CUDA_AARCH64_ARCHES

        if with_rocm == ENABLE and os == LINUX:
            arches += ROCM_ARCHES
    return []
'''

MATRIX_2121 = MATRIX_291.replace(
    'CUDA_AARCH64_ARCHES = ["12.6-aarch64", "12.8-aarch64", "13.0-aarch64"]\n',
    'CUDA_AARCH64_ARCHES_DICT = {\n    "nightly": ["12.6-aarch64", "13.0-aarch64", "13.2-aarch64"],\n'
    '    "test": ["12.6-aarch64", "12.9-aarch64", "13.0-aarch64", "13.2-aarch64"],\n'
    '    "release": ["12.6-aarch64", "13.0-aarch64", "13.2-aarch64"],\n}\n'
    'CUDA_AARCH64_ARCHES = CUDA_AARCH64_ARCHES_DICT["nightly"]\n').replace(
    '''    if channel != "release" and (os == LINUX or os == LINUX_AARCH64):
        CUDA_ARCHES.append("12.9")
        CUDA_AARCH64_ARCHES.append("12.9-aarch64")
''', '''    CUDA_AARCH64_ARCHES = CUDA_AARCH64_ARCHES_DICT[channel]
    if channel == "test" and os == LINUX:
        CUDA_ARCHES = CUDA_ARCHES + ["12.9"]
''')


def _names(m):
    return [(x["desired_cuda"], x["cuda"]) for x in m["variants"]]


def test_aarch64_matrix_absent_before_2_1():
    m = ts.aarch64_wheel_matrix(MATRIX_NO_AARCH64)
    assert m["listed"] is False and m["variants"] == [] and "names no linux-aarch64" in m["reason"]


def test_aarch64_matrix_cpu_only_through_mod_attributes():
    m = ts.aarch64_wheel_matrix(MATRIX_21)
    assert m["listed"] and m["arches"] == ["cpu-aarch64"] and _names(m) == [("cpu", None)]
    assert [text.strip() for _n, text, _w in m["lines"]] == ['if os == "linux-aarch64":', 'arches = ["cpu-aarch64"]']


def test_aarch64_matrix_one_cuda_named_by_translate_desired_cuda():
    m = ts.aarch64_wheel_matrix(MATRIX_24)
    assert m["arches"] == ["cpu-aarch64", "cuda-aarch64"]
    assert _names(m) == [("cpu", None), ("cu124", "12.4")]
    assert ("translate_desired_cuda", 'CUDA_AARCH64: "cu124",') in [(w, t.strip()) for _n, t, w in m["lines"]]


def test_aarch64_matrix_test_channel_append():
    m = ts.aarch64_wheel_matrix(MATRIX_291)
    assert _names(m) == [("cpu", None), ("cu126", "12.6"), ("cu128", "12.8"), ("cu130", "13.0"), ("cu129", "12.9")]
    texts = [t.strip() for _n, t, _w in m["lines"]]
    assert 'CUDA_AARCH64_ARCHES.append("12.9-aarch64")' in texts
    assert 'if channel != "release" and (os == LINUX or os == LINUX_AARCH64):' in texts
    # the release channel does not take the append
    assert [x["desired_cuda"] for x in ts.aarch64_wheel_matrix(MATRIX_291, "release")["variants"]] == \
        ["cpu", "cu126", "cu128", "cu130"]


def test_aarch64_matrix_per_channel_dict():
    m = ts.aarch64_wheel_matrix(MATRIX_2121)
    assert [x["desired_cuda"] for x in m["variants"]] == ["cpu", "cu126", "cu129", "cu130", "cu132"]
    assert any(w == "CUDA_AARCH64_ARCHES_DICT" and '"test":' in t for _n, t, w in m["lines"])


def test_aarch64_matrix_is_not_executed_and_refuses_what_it_cannot_read():
    # module code that would fail if it ran is never run
    assert ts.aarch64_wheel_matrix('RAISE = open("/nonexistent/file").read()\n' + MATRIX_24)["listed"]
    odd = MATRIX_291.replace("arches += CUDA_AARCH64_ARCHES", "arches += sorted(CUDA_AARCH64_ARCHES)")
    with pytest.raises(ts.Unrecognised):
        ts.aarch64_wheel_matrix(odd)
    unknown = MATRIX_291.replace('CUDA_AARCH64_ARCHES.append("12.9-aarch64")', "CUDA_AARCH64_ARCHES.insert(0, X)")
    with pytest.raises(ts.Unrecognised):
        ts.aarch64_wheel_matrix(unknown)
    rocm = MATRIX_24.replace('CUDA_AARCH64: "cu124",', 'CUDA_AARCH64: "rocm6.1",')
    with pytest.raises(ts.Unrecognised):
        ts.aarch64_wheel_matrix(rocm)


def test_aarch64_listing_records_the_file_and_lines():
    f = {"text": MATRIX_24, "path": ts.MATRIX_PY, "commit": "c0ffee", "blob": "b10b", "date": "2024-07-23T16:06:21-04:00",
         "url_at_commit": f"{ts.TEST_INFRA_URL}/blob/c0ffee/{ts.MATRIX_PY}"}
    a = ts.aarch64_listing(f, "2.4.0", "2024-07-24T00:00:00Z")
    assert a["status"] == "verified" and a["channel"] == "test"
    assert a["variants"] == [{"name": "cpu", "cuda": None, "arch_version": "cpu-aarch64"},
                             {"name": "cu124", "cuda": "12.4", "arch_version": "cuda-aarch64"}]
    assert a["evidence"]["url_at_commit"].startswith(f"{ts.TEST_INFRA_URL}/blob/c0ffee/{ts.MATRIX_PY}#L")
    assert a["evidence"]["blob"] == "b10b" and all("line" in x and "text" in x for x in a["evidence"]["lines"])
    assert ts.aarch64_listing({**f, "text": MATRIX_NO_AARCH64}, "2.0.0", "x")["status"] == "not-listed"
    assert ts.aarch64_listing(None, "2.15.0", "2026-11-01")["status"] == "not-found"


# ---------------------------------------------------------------- Linux aarch64: derivation of [[torch]] rows

# METADATA lines recorded from PyPI's aarch64 wheels: pkg:pypi/torch@2.10.0 (its nvidia-* lines are for x86_64
# only: a CPU build) and pkg:pypi/torch@2.11.0 (cuda-toolkit 13.0 on every Linux machine: a CUDA 13.0 build)
REQS_2_10_AARCH64 = ['cuda-bindings==12.9.4; platform_system == "Linux" and platform_machine == "x86_64"',
                     'nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"',
                     'nvidia-cudnn-cu12==9.10.2.21; platform_system == "Linux" and platform_machine == "x86_64"']
REQS_2_11_AARCH64 = ['cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.2; '
                     'platform_system == "Linux"', 'cuda-bindings<14,>=13.0.3; platform_system == "Linux"',
                     'nvidia-cudnn-cu13==9.19.0.56; platform_system == "Linux"']


def test_runtime_cuda_reads_the_lines_that_hold_on_aarch64():
    assert dt.runtime_cuda(REQS_2_10_AARCH64, "3.11") == (None, [])
    assert dt.runtime_cuda(REQS_2_11_AARCH64, "3.11") == ("13.0", REQS_2_11_AARCH64[:1])
    assert dt.runtime_cuda(["nvidia-cuda-runtime-cu12 (==12.4.127)"], "3.11")[0] == "12.4"
    with pytest.raises(dt.DeriveError):
        dt.runtime_cuda(["nvidia-cuda-runtime-cu12==12.4.127", "cuda-toolkit[cudart]==13.0.2"], "3.11")
    with pytest.raises(dt.DeriveError):
        dt.runtime_cuda(["nvidia-cuda-runtime-cu12>=12.4"], "3.11")


def _a64(name, version, cuda, flags, reqs, abi=1):
    m = _measured(name, flags, cuda=cuda or "12.6", abi=abi)
    m["metadata"]["requires_dist_cuda"] = reqs
    local = f"+cu{cuda.replace('.', '')}" if cuda else "+cpu"
    m["version_py"].update({"__version__": f"{version}{local}", "cuda": cuda})
    return m


def _aarch64_wheel(name, abi="cp311"):
    return {**_wheel(name, abi=abi), "platform_tags": ["manylinux_2_28_aarch64"]}


def _torch_ext(version, aarch64):
    x86 = f"torch-{version}-cp311-cp311-manylinux_2_28_x86_64.whl"
    m = _measured(x86, ["sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"], cuda="13.0")
    m["version_py"]["__version__"] = f"{version}+cu130"
    return {"version": version, "linux_x86_64_wheels": [_wheel(x86, abi="cp310"), _wheel(x86)], "measured": [m],
            "linux_aarch64_wheels": [_aarch64_wheel(a["wheel"]["filename"]) for a in aarch64], "linux_aarch64_measured": aarch64}


LISTING = {"version": "2.11.0", "listing": {"status": "verified", "evidence": {"url_at_commit": "https://github.com/pytorch/test-infra/blob/c0ffee/M.py#L39"}},
           "variants": [{"name": "cu130", "cuda": "13.0", "on_pypi": True, "published": "verified", "status": "verified"},
                        {"name": "cu128", "cuda": "12.8", "on_pypi": False, "published": "verified", "status": "verified",
                         "archs": ["sm_75", "sm_80"], "evidence": []},
                        {"name": "cu126", "cuda": "12.6", "on_pypi": False, "published": "verified", "status": "verified",
                         "archs": ["sm_50", "sm_90"], "evidence": []}],
           "linux_aarch64": {"status": "verified", "channel": "test",
                             "variants": [{"name": "cpu", "cuda": None}, {"name": "cu128", "cuda": "12.8"}],
                             "evidence": {"url_at_commit": "https://github.com/pytorch/test-infra/blob/c0ffee/M.py#L62"}}}
ABI = {"statements": [{"releases": ["2.11.0", "2.10.0"], "variants": {"*": True}, "evidence": [{"url": "https://example.org/abi"}]}]}


def _by_name(row):
    return {v["name"]: v for v in row["variants"]}


def test_derive_aarch64_cuda_wheel_on_pypi():
    a64 = _a64("torch-2.11.0-cp311-cp311-manylinux_2_28_aarch64.whl", "2.11.0", "13.0", ["sm_80 sm_90 sm_100 sm_110 sm_120"],
               REQS_2_11_AARCH64)
    row = dt.derive_release(_torch_ext("2.11.0", [a64]), LISTING, {}, ABI)
    v = _by_name(row)
    assert v["cu130"]["machines"] == ["x86_64", "aarch64"] and v["cu130"]["aarch64_pypi"] is True
    assert v["cu130"]["aarch64_archs"] == ["8.0", "9.0", "10.0", "11.0", "12.0"]
    assert v["cu130"]["archs"] == ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]  # the x86_64 build's, unchanged
    assert v["cu130"]["aarch64_python"] == ">=3.11,<3.12" and v["cu130"]["aarch64_cxx11abi"] is True
    assert v["cu130"]["aarch64_source"] == a64["wheel"]["citation"]
    # the index builds the build matrix lists for linux-aarch64, and only those
    assert v["cu128"]["machines"] == ["x86_64", "aarch64"] and "aarch64_pypi" not in v["cu128"] and "aarch64_archs" not in v["cu128"]
    assert v["cu128"]["aarch64_source"].endswith("#L62")
    assert v["cu126"]["machines"] == ["x86_64"] and "aarch64_source" not in v["cu126"]
    assert v["cpu"]["machines"] == ["x86_64", "aarch64"] and "aarch64_pypi" not in v["cpu"]


def test_derive_aarch64_cpu_wheel_on_pypi_is_the_cpu_build():
    a64 = _a64("torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl", "2.10.0", None, [], REQS_2_10_AARCH64)
    listing = {**LISTING, "linux_aarch64": {"status": "not-listed", "reason": "x"}}
    row = dt.derive_release(_torch_ext("2.10.0", [a64]), listing, {}, ABI)
    v = _by_name(row)
    assert v["cu130"]["machines"] == ["x86_64"] and "aarch64_pypi" not in v["cu130"]
    assert v["cu128"]["machines"] == ["x86_64"]
    assert v["cpu"]["machines"] == ["x86_64", "aarch64"] and v["cpu"]["aarch64_pypi"] is True
    assert "aarch64_archs" not in v["cpu"] and v["cpu"]["aarch64_source"] == a64["wheel"]["citation"]
    assert list(v["cpu"])[-1] == "source"


def test_derive_without_aarch64_facts_says_x86_64_only():
    ext = _torch_ext("2.11.0", [])
    row = dt.derive_release(ext, {k: v for k, v in LISTING.items() if k != "linux_aarch64"}, {}, ABI)
    assert {v["name"]: v["machines"] for v in row["variants"]} == \
        {"cu130": ["x86_64"], "cu128": ["x86_64"], "cu126": ["x86_64"], "cpu": ["x86_64"]}


def test_derive_refuses_inconsistent_aarch64_measurements():
    name = "torch-2.11.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    # version.py says CUDA 13.0, the METADATA requires no CUDA runtime on aarch64
    bad = _a64(name, "2.11.0", "13.0", ["sm_80 sm_90"], REQS_2_10_AARCH64)
    with pytest.raises(dt.DeriveError, match="version.py says cuda"):
        dt.derive_release(_torch_ext("2.11.0", [bad]), LISTING, {}, ABI)
    # a CUDA build no variant of the release is
    other = _a64(name, "2.11.0", "12.9", ["sm_80 sm_90"], ["nvidia-cuda-runtime-cu12==12.9.79"])
    with pytest.raises(dt.DeriveError, match="which no variant"):
        dt.derive_release(_torch_ext("2.11.0", [other]), LISTING, {}, ABI)
    # an aarch64 CPU wheel with CUDA arch flags
    cpu = _a64(name, "2.11.0", None, ["sm_80 sm_90"], [])
    with pytest.raises(dt.DeriveError, match="CPU wheel carries"):
        dt.derive_release(_torch_ext("2.11.0", [cpu]), LISTING, {}, ABI)
