"""Unit tests of envkit.matrixgen.torch_source on literal inputs (no network, no git)."""
from __future__ import annotations

import struct

import pytest

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
