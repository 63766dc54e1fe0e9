"""vLLM facts from PyPI: the CMakeLists/setup.py/envs.py/pipeline readers on small literal inputs, and
the pure derivation of table rows from extracts (no network)."""
from __future__ import annotations

import struct
import textwrap
from typing import Any, Optional

import pytest

from envkit.matrixgen import derive_vllm as dv
from envkit.matrixgen import vllm_source as v

CMAKE = textwrap.dedent("""\
    cmake_minimum_required(VERSION 3.26)
    # Supported python versions (keep in sync with setup.py)
    set(PYTHON_SUPPORTED_VERSIONS "3.10" "3.11" "3.12")

    # Supported AMD GPU architectures.
    set(HIP_SUPPORTED_ARCHS "gfx906;gfx908;gfx90a;gfx942;gfx950;gfx1200;gfx1201")

    set(TORCH_SUPPORTED_VERSION_CUDA "2.9.0")
    set(TORCH_SUPPORTED_VERSION_ROCM "2.9.0")

    find_package(Torch REQUIRED)

    # Supported NVIDIA architectures (a comment with (parens) and "quotes")
    if(DEFINED CMAKE_CUDA_COMPILER_VERSION AND
       CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0)
      set(CUDA_SUPPORTED_ARCHS "7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0")
    elseif(DEFINED CMAKE_CUDA_COMPILER_VERSION AND
       CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8)
      set(CUDA_SUPPORTED_ARCHS "7.0;7.2;7.5;8.0;8.6;8.7;8.9;9.0;10.0;10.1;12.0")
    else()
      set(CUDA_SUPPORTED_ARCHS "7.0;7.2;7.5;8.0;8.6;8.7;8.9;9.0")
    endif()

    function(helper)
      set(CUDA_SUPPORTED_ARCHS "1.0" PARENT_SCOPE)
    endfunction()

    if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER 12.8 AND SCALED_MM_ARCHS)
      message(STATUS "x)")
    endif()
""")

PLAIN_CMAKE = textwrap.dedent("""\
    # Supported NVIDIA architectures.
    set(CUDA_SUPPORTED_ARCHS "7.0;7.5;8.0;8.6;8.9;9.0")

    # Supported AMD GPU architectures.
    set(HIP_SUPPORTED_ARCHS "gfx906;gfx908;gfx90a;gfx940;gfx941;gfx942;gfx1030;gfx1100")
    set(TORCH_SUPPORTED_VERSION_CUDA "2.3.1")
""")


# ---------------------------------------------------------------- CMakeLists.txt

def test_cmake_commands_skip_comments_and_keep_lines():
    cmds = v.cmake_commands(CMAKE)
    names = [c["name"] for c in cmds]
    assert names[:3] == ["cmake_minimum_required", "set", "set"]
    first_if = next(c for c in cmds if c["name"] == "if")
    assert first_if["line"] == 14
    assert _ws(first_if["args"]) == "DEFINED CMAKE_CUDA_COMPILER_VERSION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0"
    msg = next(c for c in cmds if c["name"] == "message")
    assert msg["args"] == 'STATUS "x)"'  # a parenthesis inside quotes does not end the command


def _ws(s: str) -> str:
    return " ".join(s.split())


def test_parse_cmake_conditional_arch_list():
    out = v.parse_cmake(CMAKE)
    cuda = out["vars"]["CUDA_SUPPORTED_ARCHS"]
    assert cuda["conditional"] is True
    assert [b["when"] for b in cuda["branches"]] == [
        "DEFINED CMAKE_CUDA_COMPILER_VERSION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0",
        "DEFINED CMAKE_CUDA_COMPILER_VERSION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8",
        "else",
    ]
    assert cuda["branches"][0]["list"] == ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0"]
    assert cuda["branches"][2]["list"][0] == "7.0"
    assert [b["line"] for b in cuda["branches"]] == [16, 19, 21]
    els = cuda["branches"][2]["branch"][0]
    assert els["kind"] == "else" and len(els["preceding"]) == 2
    # the set() inside a function is recorded but is not the file's list
    infn = [s for s in out["sets"] if s["in_function"]]
    assert infn and infn[0]["in_function"] == "helper" and infn[0]["list"] == ["1.0"]
    # verbatim evidence
    sets = [s for s in out["sets"] if s["var"] == "CUDA_SUPPORTED_ARCHS" and not s["in_function"]]
    assert sets[1]["text"] == 'set(CUDA_SUPPORTED_ARCHS "7.0;7.2;7.5;8.0;8.6;8.7;8.9;9.0;10.0;10.1;12.0")'


def test_parse_cmake_plain_lists_and_torch_versions():
    out = v.parse_cmake(CMAKE)
    assert out["vars"]["HIP_SUPPORTED_ARCHS"] == {"conditional": False, "line": 6,
                                                  "list": ["gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1200", "gfx1201"]}
    assert out["vars"]["TORCH_SUPPORTED_VERSION_CUDA"]["list"] == ["2.9.0"]
    assert out["vars"]["PYTHON_SUPPORTED_VERSIONS"]["list"] == ["3.10", "3.11", "3.12"]
    plain = v.parse_cmake(PLAIN_CMAKE)["vars"]["CUDA_SUPPORTED_ARCHS"]
    assert plain == {"conditional": False, "line": 2, "list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"]}


@pytest.mark.parametrize("cuda,expected", [("13.0", "11.0"), ("13.1", "11.0"), ("12.8", "10.1"), ("12.9", "10.1"), ("12.4", None)])
def test_select_branch_by_nvcc(cuda, expected):
    branches = v.parse_cmake(CMAKE)["vars"]["CUDA_SUPPORTED_ARCHS"]["branches"]
    b, why = v.select_branch(branches, cuda)
    assert why == ""
    if expected is None:
        assert b["when"] == "else"
    else:
        assert expected in b["list"]


def test_eval_cuda_condition_is_three_valued():
    assert v.eval_cuda_condition("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8", "12.8") is True
    assert v.eval_cuda_condition("${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER 12.8", "12.8") is None  # 12.8.x > 12.8 ?
    assert v.eval_cuda_condition("${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER 12.8", "12.9") is True
    assert v.eval_cuda_condition("NOT CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 13.0", "12.9") is False
    assert v.eval_cuda_condition("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8 AND SCALED_MM_ARCHS", "13.0") is None
    assert v.eval_cuda_condition("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8.1", "12.8") is None


# ---------------------------------------------------------------- setup.py, envs.py

SETUP = textwrap.dedent("""\
    import os
    ROCM_SUPPORTED_ARCHS = {"gfx90a", "gfx908", "gfx906", "gfx1030", "gfx1100"}
    MAIN_CUDA_VERSION = "12.1"
    NVIDIA_SUPPORTED_ARCHS = {"7.0", "7.5", "8.0", "8.6", "8.9", "9.0"}

    def get_vllm_version():
        version = "0.3.0"
        if _is_hip():
            if hipcc_version != MAIN_CUDA_VERSION:
                version += "+rocm"
        else:
            cuda_version = str(nvcc_cuda_version)
            if cuda_version != MAIN_CUDA_VERSION:
                version += f"+cu{cuda_version}"
        return version

    setup(name="vllm", python_requires=">=3.8")
""")


def test_parse_setup_py():
    out = v.parse_setup_py(SETUP)
    assert out["main_cuda_version"] == {"value": "12.1", "line": 3, "text": 'MAIN_CUDA_VERSION = "12.1"'}
    archs = {a["name"]: a["list"] for a in out["supported_archs"]}
    assert archs["NVIDIA_SUPPORTED_ARCHS"] == ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"]
    assert archs["ROCM_SUPPORTED_ARCHS"][0] == "gfx90a"  # source order
    assert out["python_requires"] == ">=3.8"
    assert out["suffix_rule"] == [{"line": 13, "text": "if cuda_version != MAIN_CUDA_VERSION:"}]


@pytest.mark.parametrize("getter", [
    '    "VLLM_MAIN_CUDA_VERSION": lambda: os.getenv("VLLM_MAIN_CUDA_VERSION", "").lower() or "12.8",\n',
    '    "VLLM_MAIN_CUDA_VERSION": lambda: os.getenv("VLLM_MAIN_CUDA_VERSION", "").lower()\n    or "12.8",\n',
    '    "VLLM_MAIN_CUDA_VERSION": lambda: (\n        os.getenv("VLLM_MAIN_CUDA_VERSION", "").lower() or "12.8"\n    ),\n',
])
def test_parse_envs_py_getter_shapes(getter):
    text = ("import os\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    VLLM_MAIN_CUDA_VERSION: str = \"12.8\"\n"
            "environment_variables = {\n" + getter + "}\n")
    out = v.parse_envs_py(text)
    assert out["getter"]["value"] == "12.8" and out["getter"]["line"] == 6
    assert out["annotation"] == {"value": "12.8", "line": 4, "text": 'VLLM_MAIN_CUDA_VERSION: str = "12.8"'}


def test_parse_envs_py_without_the_variable():
    assert v.parse_envs_py("import os\nenvironment_variables = {'VLLM_HOST_IP': lambda: os.getenv('VLLM_HOST_IP', '')}\n") == \
        {"getter": None, "annotation": None}


# ---------------------------------------------------------------- release pipeline, Dockerfile, docs

PIPELINE = textwrap.dedent("""\
    env:
      CUDA_ARCH_X86: "7.5 8.0 8.9 9.0 10.0 12.0"
    steps:
      - label: "Build wheel - x86_64 - CUDA 13.0"
        commands:
          - "DOCKER_BUILDKIT=1 docker build --build-arg CUDA_VERSION=13.0.2 --build-arg torch_cuda_arch_list=\\"${CUDA_ARCH_X86}\\" --tag x --target build -f docker/Dockerfile ."
      - group: "older"
        steps:
          - label: "Build wheel - CUDA 12.9"
            commands:
              - "docker build --build-arg CUDA_VERSION=12.9.1 --target build -f docker/Dockerfile ."
          - label: "Build arm64 wheel - CUDA 12.9"
            commands:
              - "docker build --build-arg CUDA_VERSION=12.9.1 --build-arg torch_cuda_arch_list='8.7 9.0' --target build ."
      - label: "Build release image"
        commands:
          - "docker build --build-arg CUDA_VERSION=13.0.2 --target vllm-openai ."
""")

DOCKERFILE = textwrap.dedent("""\
    ARG CUDA_VERSION=12.9.1
    FROM nvidia/cuda:${CUDA_VERSION}-devel AS base
    ARG torch_cuda_arch_list='7.0 7.5 8.0 8.9 9.0 10.0 12.0'
    ENV TORCH_CUDA_ARCH_LIST=${torch_cuda_arch_list}
    FROM base AS build
    RUN python3 setup.py bdist_wheel
    FROM nvidia/cuda:${CUDA_VERSION}-runtime AS vllm-base
    ARG torch_cuda_arch_list='9.0'
""")


def test_parse_release_pipeline():
    out = v.parse_release_pipeline(PIPELINE)
    assert [b["label"] for b in out["wheel_builds"]] == [
        "Build wheel - x86_64 - CUDA 13.0", "Build wheel - CUDA 12.9", "Build arm64 wheel - CUDA 12.9"]
    b0, b1, b2 = out["wheel_builds"]
    assert (b0["cuda_version"], b0["torch_cuda_arch_list"], b0["torch_cuda_arch_list_resolved"]) == \
        ("13.0.2", "${CUDA_ARCH_X86}", "7.5 8.0 8.9 9.0 10.0 12.0")
    assert b0["dockerfile"] == "docker/Dockerfile" and b0["platform"] == "x86_64" and b0["line"] == 4
    assert b1["torch_cuda_arch_list"] is None
    assert b2["platform"] == "aarch64" and b2["torch_cuda_arch_list"] == "8.7 9.0" and b2["dockerfile"] == "Dockerfile"
    assert out["env"] == {"CUDA_ARCH_X86": "7.5 8.0 8.9 9.0 10.0 12.0"}


def test_parse_dockerfile_follows_the_build_stage():
    out = v.parse_dockerfile(DOCKERFILE)
    assert out["stage_chain"] == ["build", "base"]
    seen = out["target_sees"]["torch_cuda_arch_list"]
    assert seen["value"] == "7.0 7.5 8.0 8.9 9.0 10.0 12.0" and seen["line"] == 3
    assert [a["value"] for a in out["args"] if a["name"] == "torch_cuda_arch_list"] == ["7.0 7.5 8.0 8.9 9.0 10.0 12.0", "9.0"]


def test_docs_cuda():
    lines = v.doc_statements("docs/installation.md", textwrap.dedent("""\
        vLLM contains pre-compiled C++ and CUDA (12.8) binaries.
        As of now, vLLM's binaries are compiled with CUDA 12.8 and public PyTorch release versions by default. We also provide vLLM binaries compiled with CUDA 12.6, 11.8, and public PyTorch release versions:
        unrelated line
        pip install vllm-${VLLM_VERSION}+cu118-cp38-abi3-manylinux1_x86_64.whl
    """))
    assert [d["line"] for d in lines] == [1, 2, 4]
    assert v.docs_cuda(lines) == {"default": "12.8", "others": ["12.6", "11.8"]}


# ---------------------------------------------------------------- ELF

def _tiny_elf(needed: list[str], runpath: str = "") -> bytes:
    """A 64-bit little-endian ELF with a .dynstr and a .dynamic naming `needed` (and a RUNPATH)."""
    names = needed + ([runpath] if runpath else [])
    dynstr = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    offs, o = [], 1
    for n in names:
        offs.append(o)
        o += len(n) + 1
    tags = [1] * len(needed) + ([29] if runpath else [])
    dynamic = b"".join(struct.pack("<qQ", t, x) for t, x in zip(tags, offs)) + struct.pack("<qQ", 0, 0)
    str_off = 64
    dyn_off = str_off + len(dynstr)
    sh_off = dyn_off + len(dynamic)
    hdr = bytearray(64)
    hdr[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", hdr, 0x28, sh_off)
    struct.pack_into("<HHH", hdr, 0x3A, 64, 3, 0)
    null = bytes(64)
    s_str = struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, str_off, len(dynstr), 0, 0, 1, 0)
    s_dyn = struct.pack("<IIQQQQIIQQ", 0, 6, 0, 0, dyn_off, len(dynamic), 1, 0, 8, 16)
    return bytes(hdr) + dynstr + dynamic + null + s_str + s_dyn


def test_elf_needed():
    assert v.elf_needed(_tiny_elf(["libtorch.so", "libcudart.so.12", "libc.so.6"])) == ["libtorch.so", "libcudart.so.12", "libc.so.6"]
    assert v.elf_needed(b"not an elf") is None
    assert v.elf_dynamic(_tiny_elf(["libcudart.so.12"], "/usr/local/cuda-12.1/lib64:")) == \
        {"needed": ["libcudart.so.12"], "runpath": ["/usr/local/cuda-12.1/lib64:"]}


# ---------------------------------------------------------------- derive (pure)

def _extract(version: str, *, wheels: Optional[list[str]] = None, requires_python: Optional[str] = ">=3.9",
             torch: Optional[list[str]] = None, cmake: Optional[str] = None, sdist: bool = True,
             main_cuda: Optional[str] = None, cudart: Optional[str] = "12", setup: Optional[str] = None,
             pipeline: Optional[str] = None, dockerfile: Optional[str] = None, sdist_torch: Optional[list[str]] = None) -> dict[str, Any]:
    wheels = [f"vllm-{version}-cp38-abi3-manylinux1_x86_64.whl"] if wheels is None else wheels
    wheel = wheels[-1] if wheels else None
    e: dict[str, Any] = {"project": "vllm", "version": version, "schema": 1, "files": [],
                         "has": {"sdist": [f"vllm-{version}.tar.gz"] if sdist else [], "linux_x86_64_wheels": wheels,
                                 "other_wheels": [], "all_yanked": False}, "missing": {}}
    if wheel:
        e["metadata"] = {"wheel": wheel, "citation": f"https://files.example/{wheel}#sha256=aa", "requires_python": requires_python,
                         "requires_dist": {"torch": torch} if torch else {}, "requires_dist_nvidia": [], "other_x86_64_wheels": {}}
        e["wheel_extensions"] = {"wheel": wheel, "citation": "c", "read": [{"member": "vllm/_C.abi3.so"}],
                                 "libcudart": {"major": cudart, "needed": f"libcudart.so.{cudart}", "member": "vllm/_C.abi3.so"} if cudart else None,
                                 "toolkit_paths": []}
    else:
        e["metadata"] = None
        e["missing"]["metadata"] = "PyPI has no Linux x86_64 wheel for this release"
        e["wheel_extensions"] = None
        e["sdist_torch_lines"] = [{"file": "requirements.txt", "line": 1, "text": t} for t in sdist_torch or []]
    e["main_cuda"] = {"value": main_cuda, "basis": "vllm/envs.py VLLM_MAIN_CUDA_VERSION default" if main_cuda else None,
                      "reason": None if main_cuda else "no artifact states the build CUDA"}
    e["torch_pypi_cuda"] = None
    e["cmake"] = None if cmake is None else v.parse_cmake(cmake)
    if cmake is None:
        e["missing"]["cmake"] = "no sdist on PyPI, and the wheel carries no CMakeLists.txt" if not sdist else \
            "the sdist has no CMakeLists.txt (setup.py-only build)"
    e["setup_py"] = None if setup is None else v.parse_setup_py(setup)
    e["sdist"] = {"filename": f"vllm-{version}.tar.gz", "citation": f"https://files.example/vllm-{version}.tar.gz#sha256=bb",
                  "members_read": ["CMakeLists.txt", "setup.py"]} if sdist else None
    e["release_pipeline"] = None if pipeline is None else v.parse_release_pipeline(pipeline)
    e["dockerfiles"] = None if dockerfile is None else {"docker/Dockerfile": v.parse_dockerfile(dockerfile)}
    e["variants"] = None
    e["missing"]["variants"] = "no sdist on PyPI" if not sdist else "the sdist states no other CUDA variant"
    return e


def test_derive_conditional_arch_list_picks_the_wheel_branch():
    (row,) = v.derive([_extract("0.12.0", torch=["torch==2.9.0"], requires_python="<3.14,>=3.10", cmake=CMAKE, main_cuda="12.9",
                                pipeline=PIPELINE, dockerfile=DOCKERFILE)])
    assert row["torch"] == "==2.9.0" and row["torch_from"] == "wheel METADATA"
    assert row["python"] == ">=3.10,<3.14" and row["wheel_tag"] == "abi3"
    assert row["wheel"] == "vllm-0.12.0-cp38-abi3-manylinux1_x86_64.whl"
    assert row["wheel_cuda"] == "12.9" and row["wheel_cuda_major"] == "12"
    assert [b["when"].split()[-1] for b in row["cuda_archs"]] == ["13.0", "12.8", "else"]
    assert row["cuda_archs_wheel"] == ["7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1", "12.0"]
    assert row["min_cc"] == "7.0"
    assert row["rocm_archs"][-2:] == ["gfx1200", "gfx1201"]
    assert row["cmake_torch"] == {"TORCH_SUPPORTED_VERSION_CUDA": ["2.9.0"], "TORCH_SUPPORTED_VERSION_ROCM": ["2.9.0"]}
    # the 12.9 x86_64 build passes no arch list: the Dockerfile's build-stage default applies
    assert row["build_arch_list"]["archs"] == ["7.0", "7.5", "8.0", "8.9", "9.0", "10.0", "12.0"]
    assert row["source"]["wheel"]["citation"].endswith("#sha256=aa") and row["source"]["sdist"]["members"] == ["CMakeLists.txt", "setup.py"]
    assert row["nulls"] == {"other_cuda_variants": "the sdist states no other CUDA variant"}


def test_derive_cuda13_wheel_has_no_volta():
    (row,) = v.derive([_extract("0.20.0", torch=["torch==2.11.0"], cmake=CMAKE, main_cuda="13.0", cudart="13", pipeline=PIPELINE)])
    assert row["min_cc"] == "7.5" and "11.0" in row["cuda_archs_wheel"]
    assert row["build_arch_list"] == {"archs": ["7.5", "8.0", "8.9", "9.0", "10.0", "12.0"],
                                      "from": "release-pipeline.yaml step 'Build wheel - x86_64 - CUDA 13.0'"}


def test_derive_conditional_list_without_wheel_cuda_leaves_min_cc_null():
    (row,) = v.derive([_extract("0.9.0", torch=["torch==2.7.0"], cmake=CMAKE, main_cuda=None)])
    assert row["cuda_archs"] is not None and row["cuda_archs_wheel"] is None and row["min_cc"] is None
    assert row["nulls"]["min_cc"] == "conditional list and the wheel's CUDA is unknown"
    assert row["nulls"]["wheel_cuda"] == "no artifact states the build CUDA"


def test_derive_release_without_sdist():
    (row,) = v.derive([_extract("0.15.0", torch=["torch==2.9.1"], sdist=False, main_cuda="12.9")])
    assert row["cuda_archs"] is None and row["rocm_archs"] is None and row["min_cc"] is None
    assert row["nulls"]["cuda_archs"] == "no sdist on PyPI, and the wheel carries no CMakeLists.txt"
    assert row["nulls"]["other_cuda_variants"] == "no sdist on PyPI"
    assert row["wheel_cuda"] == "12.9" and row["torch"] == "==2.9.1"
    assert "sdist" not in row["source"]


def test_derive_release_without_torch_pin():
    (row,) = v.derive([_extract("0.0.9", torch=None, cmake=PLAIN_CMAKE, main_cuda="12.1")])
    assert row["torch"] is None
    assert row["nulls"]["torch"] == "the wheel's METADATA has no torch requirement for Linux x86_64"
    assert row["cuda_archs"] == ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"] and row["min_cc"] == "7.0"


def test_derive_torch_pin_only_under_an_extra_or_other_platform_is_not_a_pin():
    (row,) = v.derive([_extract("0.0.8", torch=['torch==2.5.1; platform_machine == "aarch64"', 'torch==2.5.0; extra == "x"'],
                                cmake=PLAIN_CMAKE)])
    assert row["torch"] is None


def test_derive_old_style_pin_and_range():
    rows = v.derive([_extract("0.5.2", torch=["torch (==2.3.1)"], cmake=PLAIN_CMAKE),
                     _extract("0.2.2", torch=["torch >=2.1.0"], cmake=PLAIN_CMAKE)])
    assert [r["version"] for r in rows] == ["0.2.2", "0.5.2"]
    assert rows[0]["torch"] == ">=2.1.0" and rows[1]["torch"] == "==2.3.1"


def test_derive_cp_tagged_wheels_give_exact_pythons():
    wheels = [f"vllm-0.4.0-cp{x}-cp{x}-manylinux1_x86_64.whl" for x in ("38", "39", "310", "311")]
    (row,) = v.derive([_extract("0.4.0", wheels=wheels, torch=["torch==2.1.2"], requires_python=">=3.9", sdist=False,
                                main_cuda="12.1")])
    assert row["wheel_tag"] == "cp" and row["python"] == ["3.9", "3.10", "3.11"]
    assert row["wheels"] == wheels


def test_derive_release_without_wheel_reads_the_sdist_requirements():
    (row,) = v.derive([_extract("0.1.0", wheels=[], sdist_torch=["torch >= 2.0.0"],
                                setup='import os\nsetup(name="vllm", python_requires=">=3.8")\n')])
    assert row["torch"] == ">=2.0.0" and row["torch_from"] == "sdist requirements.txt (no wheel)"
    for f in ("python", "wheel", "wheel_tag", "wheel_cuda"):
        assert row[f] is None and f in row["nulls"]
    assert row["nulls"]["cuda_archs"].endswith("setup.py has no *SUPPORTED_ARCHS")


def test_derive_setup_py_arch_sets_when_no_cmake():
    (row,) = v.derive([_extract("0.3.0", torch=["torch==2.1.2"], setup=SETUP, main_cuda="12.1")])
    assert row["cuda_archs"] == ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"]
    assert row["cuda_archs_from"] == "setup.py NVIDIA_SUPPORTED_ARCHS (no CMakeLists.txt)"
    assert row["rocm_archs"] == ["gfx90a", "gfx908", "gfx906", "gfx1030", "gfx1100"]


@pytest.mark.parametrize("rp,wheels,expected", [
    ("<3.15,>=3.11", ["vllm-1-cp38-abi3-manylinux_2_28_x86_64.whl"], (">=3.11,<3.15", "abi3")),
    (None, ["vllm-1-cp38-abi3-manylinux_2_28_x86_64.whl"], (">=3.8", "abi3")),
    (">=3.7", ["vllm-1-cp38-abi3-manylinux_2_28_x86_64.whl"], (">=3.8", "abi3")),
    (">=3.8", ["vllm-1-cp310-cp310-manylinux1_x86_64.whl", "vllm-1-cp38-cp38-manylinux1_x86_64.whl"], (["3.8", "3.10"], "cp")),
])
def test_wheel_python(rp, wheels, expected):
    py, tag, _note = v.wheel_python(rp, wheels)
    assert (py, tag) == expected


# ---------------------------------------------------------------- Linux aarch64 wheels (from the extract's `files`)

def _file(name: str, yanked: bool = False) -> dict[str, Any]:
    return {"filename": name, "sha256": "cd" * 32, "size": 1, "upload_time": "2026-05-01T00:00:00Z",
            "url": f"pkg:pypi/vllm?file_name={name}", "yanked": yanked}


def test_linux_wheels_by_machine_highest_build_tag_first():
    files = [_file("vllm-0.20.1-cp38-abi3-manylinux_2_35_aarch64.whl"), _file("vllm-0.20.1-1-cp38-abi3-manylinux_2_35_aarch64.whl"),
             _file("vllm-0.20.1-cp38-abi3-manylinux_2_35_x86_64.whl"), _file("vllm-0.20.1.tar.gz"),
             _file("vllm-0.20.1-cp38-abi3-macosx_11_0_arm64.whl"), _file("vllm-0.20.1-2-cp38-abi3-manylinux_2_35_aarch64.whl", yanked=True)]
    assert [f["filename"] for f in dv.linux_wheels(files, "aarch64")] == \
        ["vllm-0.20.1-1-cp38-abi3-manylinux_2_35_aarch64.whl", "vllm-0.20.1-cp38-abi3-manylinux_2_35_aarch64.whl"]
    assert [f["filename"] for f in dv.linux_wheels(files, "x86_64")] == ["vllm-0.20.1-cp38-abi3-manylinux_2_35_x86_64.whl"]
    names, cites = dv.aarch64_wheels({"files": files})
    assert names[0].startswith("vllm-0.20.1-1-") and cites[0] == f"pkg:pypi/vllm@0.20.1?checksum=sha256:{'cd' * 32}&file_name={names[0]}"
    assert dv.aarch64_wheels(None) == ([], [])


def _derived_row(files: list[dict[str, Any]]) -> dict[str, Any]:
    e = _extract("0.11.0", torch=["torch==2.8.0"], cmake=PLAIN_CMAKE, main_cuda="12.8")
    e["files"] = files
    (r,) = v.derive([e])
    row = dv.derive_row(r, {}, e)
    assert row is not None
    return row


def test_derive_row_machines_from_the_pypi_files():
    x86 = _file("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl")
    arm = _file("vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl")
    row = _derived_row([x86, arm, _file("vllm-0.11.0.tar.gz")])
    assert row["machines"] == ["x86_64", "aarch64"]
    assert row["aarch64_wheels"] == [arm["filename"]]
    assert row["aarch64_source"] == f"pkg:pypi/vllm@0.11.0?checksum=sha256:{arm['sha256']}&file_name={arm['filename']}"
    assert row["wheels"] == [x86["filename"]]  # the x86_64 wheels, unchanged
    assert list(row)[-1] == "source"


def test_derive_row_without_aarch64_wheel_or_with_a_yanked_one():
    x86 = _file("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl")
    for files in ([x86], [x86, _file("vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl", yanked=True)]):
        row = _derived_row(files)
        assert row["machines"] == ["x86_64"] and "aarch64_wheels" not in row and "aarch64_source" not in row
