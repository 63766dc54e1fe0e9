"""flash-attn facts: the extractor reads workflow/setup.py/README shapes into data, the derivation
turns them into [[flash_attn]] rows, and the shipped matrix says what the committed extracts say."""
from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from envkit.config import matrix_file as matrix
from envkit.matrixgen import derive_flash_attn as d
from envkit.matrixgen import flash_attn_kernels as fk
from envkit.matrixgen import flash_attn_source as src
from envkit.matrixgen import refresh

ROOT = Path(__file__).resolve().parent.parent

WORKFLOW = textwrap.dedent("""\
    name: Build wheels and deploy
    on:
      create:
        tags:
          - v*
    jobs:
      build_wheels:
        name: Build Wheel
        runs-on: ${{ matrix.os }}
        strategy:
          matrix:
              os: [ubuntu-20.04]
              python-version: ['3.8', '3.12']
              torch-version: ['2.1.2', '2.5.1', '2.6.0.dev20241001']
              cuda-version: ['11.8.0', '12.4.1']
              cxx11_abi: ['FALSE', 'TRUE']
              exclude:
                - torch-version: '2.1.2'
                  python-version: '3.12'
        steps:
          - name: Set CUDA and PyTorch versions
            run: |
              echo "MATRIX_CUDA_VERSION=$(echo ${{ matrix.cuda-version }} | awk -F \\. {'print $1 $2'})" >> $GITHUB_ENV
              echo "WHEEL_CUDA_VERSION=$(echo ${{ matrix.cuda-version }} | awk -F \\. {'print $1'})" >> $GITHUB_ENV
          - name: Install PyTorch
            run: |
              export TORCH_CUDA_VERSION=$(python -c "from os import environ as env; \\
                minv = {'2.1': 118, '2.5': 118}[env['MATRIX_TORCH_VERSION']]; \\
                maxv = {'2.1': 121, '2.5': 124}[env['MATRIX_TORCH_VERSION']]; \\
                print(minv if int(env['MATRIX_CUDA_VERSION']) < 120 else maxv)" \\
              )
              pip install --no-cache-dir torch==${{ matrix.torch-version }} --index-url https://download.pytorch.org/whl/cu${TORCH_CUDA_VERSION}
          - name: Build wheel
            run: |
              tmpname=cu${WHEEL_CUDA_VERSION}torch${MATRIX_TORCH_VERSION}cxx11abi${{ matrix.cxx11_abi }}
              wheel_name=$(ls dist/*whl | xargs -n 1 basename | sed "s/-/+$tmpname-/2")
    """)


def test_workflow_matrix_is_read_as_data() -> None:
    wf = src.parse_workflow(WORKFLOW)
    assert wf["axes"]["torch-version"] == ["2.1.2", "2.5.1", "2.6.0.dev20241001"]
    assert wf["exclude"] == [{"torch-version": "2.1.2", "python-version": "3.12"}]
    assert wf["wheel_cuda"] == "major"
    assert wf["torch_index"] == {"min": {"2.1": "118", "2.5": "118"}, "max": {"2.1": "121", "2.5": "124"},
                                 "formula": "below-120-min-else-max"}


def test_wheel_cells_drop_excludes_and_jobs_whose_index_lookup_fails() -> None:
    cells = d.wheel_cells(src.parse_workflow(WORKFLOW))
    # 2.6.0.dev has no minv/maxv entry: its jobs raise KeyError and build nothing
    assert {c["torch"] for c in cells} == {"2.1.2", "2.5.1"}
    assert not any(c["torch"] == "2.1.2" and c["python"] == "3.12" for c in cells)
    cu11 = [c for c in cells if c["cuda"] == "11"]
    assert {c["torch_index"] for c in cu11} == {"cu118"} and {c["nvcc"] for c in cu11} == {"11.8.0"}
    assert {c["torch_index"] for c in cells if c["cuda"] == "12" and c["torch"] == "2.5.1"} == {"cu124"}
    groups = d.group_cells(cells)
    g = next(x for x in groups if x["cuda"] == "12" and x["torch"] == "2.1.2")
    assert g == {"cuda": "12", "torch": "2.1.2", "torch_index": "cu121", "nvcc": "12.4.1", "python": ["3.8"], "abi": [False, True]}


def test_clamp_formula_of_older_workflows() -> None:
    wf = src.parse_workflow(WORKFLOW.replace(
        "print(minv if int(env['MATRIX_CUDA_VERSION']) < 120 else maxv)",
        "print(max(min(int(env['MATRIX_CUDA_VERSION']), maxv), minv))"))
    assert wf["torch_index"]["formula"] == "clamp"
    cells = d.wheel_cells(wf)
    assert {c["torch_index"] for c in cells if c["torch"] == "2.5.1" and c["nvcc"] == "12.4.1"} == {"cu124"}
    assert {c["torch_index"] for c in cells if c["torch"] == "2.1.2" and c["nvcc"] == "12.4.1"} == {"cu121"}


def test_a_workflow_of_unknown_shape_stops_the_extraction() -> None:
    with pytest.raises(src.Unrecognised, match="tmpname"):
        src.parse_workflow(WORKFLOW.replace("tmpname=", "othername="))


SETUP_RULES = {
    "verbatim": ("", {"downloads": True, "format": "major_minor", "remap": []}),
    "torch-2.1-override": (
        "    if torch_version_raw.major == 2 and torch_version_raw.minor == 1:\n        torch_cuda_version = parse('12.2')\n",
        {"downloads": True, "format": "major_minor", "remap": [{"torch": "2.1", "to": "12.2"}]}),
    "ifexp": (
        "    torch_cuda_version = parse('11.8') if torch_cuda_version.major == 11 else parse('12.3')\n",
        {"downloads": True, "format": "major_minor", "remap": [{"cuda_major": 11, "to": "11.8"}, {"to": "12.3"}]}),
}


@pytest.mark.parametrize("name", SETUP_RULES)
def test_wheel_name_rule_is_interpreted_not_executed(name: str) -> None:
    body, want = SETUP_RULES[name]
    code = ("def get_wheel_url():\n    torch_cuda_version = parse(torch.version.cuda)\n    torch_version_raw = parse(torch.__version__)\n"
            + body + "    cuda_version = f'{torch_cuda_version.major}{torch_cuda_version.minor}'\n"
            "    wheel_filename = f'x+cu{cuda_version}'\n")
    got = src.wheel_name_rule(ast.parse(code))
    got.pop("line")
    assert got == want


def test_elif_chain_and_major_format() -> None:
    code = textwrap.dedent("""\
        def get_wheel_url():
            if IS_ROCM:
                wheel_filename = 'rocm'
            else:
                torch_cuda_version = parse(torch.version.cuda)
                if torch_cuda_version.major == 11:
                    torch_cuda_version = parse("11.8")
                elif torch_cuda_version.major == 12:
                    torch_cuda_version = parse("12.3")
                else:
                    torch_cuda_version = parse("13.0")
                cuda_version = f"{torch_cuda_version.major}"
                wheel_filename = f"x+cu{cuda_version}"
        """)
    got = src.wheel_name_rule(ast.parse(code))
    assert got["format"] == "major"
    assert got["remap"] == [{"cuda_major": 11, "to": "11.8"}, {"cuda_major": 12, "to": "12.3"}, {"to": "13.0"}]


def test_gencode_floors_and_arch_switches() -> None:
    code = textwrap.dedent("""\
        def cuda_archs():
            return os.getenv("FLASH_ATTN_CUDA_ARCHS", "80;90;120").split(";")
        if not SKIP_CUDA_BUILD:
            if bare_metal_version < Version("11.7"):
                raise RuntimeError("too old")
            if "80" in cuda_archs():
                cc_flag.append("arch=compute_80,code=sm_80")
            if bare_metal_version >= Version("11.8") and "90" in cuda_archs():
                cc_flag.append("arch=compute_90,code=sm_90")
            if bare_metal_version >= Version("12.8") and "100" in cuda_archs():
                cc_flag.append("arch=compute_100,code=sm_100")
            if bare_metal_version >= Version("12.8") and "120" in cuda_archs():
                cc_flag.append("arch=compute_120,code=sm_120")
        setup(python_requires=">=3.9")
        """)
    s = src.parse_setup(code)
    assert s["nvcc_floor"] == "11.7" and s["python_requires"] == ">=3.9"
    s["wheel_name"] = {"downloads": False}
    # sm_100 is not in FLASH_ATTN_CUDA_ARCHS' default: the release builds do not emit it
    assert d._archs(s) == [{"arch": "8.0", "nvcc": ">=11.7"}, {"arch": "9.0", "nvcc": ">=11.8"}, {"arch": "12.0", "nvcc": ">=12.8"}]


def test_readme_floors() -> None:
    r = src.parse_readme("## Installation\n- CUDA 12.0 and above.\n- PyTorch 2.2 and above.\n\n### AMD\n- ROCm 6.0 and above.\n")
    assert (r["torch_min"], r["rocm_min"]) == ("2.2", "6.0")


def test_a_release_without_its_workflow_names_no_wheel() -> None:
    setup = {"python_requires": ">=3.9", "nvcc_floor": "11.7", "gencode": [{"arch": "8.0"}], "cuda_archs_default": None,
             "wheel_name": {"downloads": True, "format": "major", "remap": []}, "platform": "linux_{machine}", "rocm_archs": None}
    doc = {"pypi_version": "2.8.3.post2", "git": None,
           "sdist": {"filename": "flash_attn-2.8.3.post2.tar.gz", "sha256": "ab", "setup": setup,
                     "readme": {"torch_min": "2.2", "rocm_min": None},
                     "kernels": {"layer_norm": {"dir": True, "setup_py": True}, "rotary": {"dir": False, "setup_py": False}}}}
    row = d.derive_row(doc)
    assert row["wheel_set"] == "unknown" and "wheels" not in row
    assert row["kernels"] == ["layer_norm"] and row["kernel_setup_py"] is True
    assert row["source"] == "pkg:pypi/flash-attn@2.8.3.post2?checksum=sha256:ab&file_name=flash_attn-2.8.3.post2.tar.gz"


def test_shipped_matrix_matches_the_committed_extracts() -> None:
    path = ROOT / "matrix.toml"
    assert refresh.check(path.read_text(encoding="utf-8"), ROOT / "data" / "sources") == []


def test_derived_rows_load_and_every_release_has_one() -> None:
    m = matrix.load(str(ROOT / "matrix.toml"))
    extracts = sorted((ROOT / "data" / "sources" / "flash-attn").glob("*.json"))
    assert len(m.flash_attn) == len(extracts) >= 57
    fa = {str(f.version): f for f in m.flash_attn}
    # the published cu11 builds of 2.7.0.post2, and its torch 2.1.2 builds (issue: they were missed)
    assert any(w.cuda == "11" and str(w.torch) == "2.1.2" for w in fa["2.7.0.post2"].wheels)
    # 2.8.2 built no torch 2.8 wheel; 2.5.8 built no cp312 wheel
    assert not any(w.torch_minor == "2.8" for w in fa["2.8.2"].wheels)
    assert not any(str(p) == "3.12" for w in fa["2.5.8"].wheels for p in w.python)
    assert fa["2.8.3.post2"].wheel_set == "unknown"


def test_a_later_assignment_overrides_an_earlier_one() -> None:
    code = textwrap.dedent("""\
        def get_wheel_url():
            torch_cuda_version = parse(torch.version.cuda)
            torch_version_raw = parse(torch.__version__)
            torch_cuda_version = parse("11.8") if torch_cuda_version.major == 11 else parse("12.3")
            if torch_version_raw.major == 2 and torch_version_raw.minor == 1:
                torch_cuda_version = parse("12.2")
            cuda_version = f"{torch_cuda_version.major}{torch_cuda_version.minor}"
            wheel_filename = f"x+cu{cuda_version}"
        """)
    rule = src.wheel_name_rule(ast.parse(code))
    assert rule["remap"] == [{"torch": "2.1", "to": "12.2"}, {"cuda_major": 11, "to": "11.8"}, {"to": "12.3"}]


def test_code_the_interpreter_cannot_express_stops_the_extraction() -> None:
    code = textwrap.dedent("""\
        def get_wheel_url():
            torch_cuda_version = parse(torch.version.cuda)
            if torch_version_raw.minor == 1:
                if torch_cuda_version.major == 12:
                    torch_cuda_version = parse("12.2")
            else:
                torch_cuda_version = parse("12.3")
            cuda_version = f"{torch_cuda_version.major}"
            wheel_filename = f"x+cu{cuda_version}"
        """)
    with pytest.raises(src.Unrecognised):
        src.wheel_name_rule(ast.parse(code))


# ---------------------------------------------------------------- the CUDA extension's sources (sdist.cuda_extension)

KERNEL_CU = textwrap.dedent("""\
    // a header comment, as kernel files begin
    #include "namespace_config.h"
    #include "flash_fwd_launch_template.h"

    // template<>
    // void run_mha_fwd_<cutlass::half_t, 64, true>(Flash_fwd_params &params, cudaStream_t stream) { }
    /* template<> void run_mha_fwd_<cutlass::half_t, 32, true>(Flash_fwd_params &params, cudaStream_t stream) {} */
    namespace FLASH_NAMESPACE {

    template<>
    void run_mha_fwd_<cutlass::half_t, 128, true>(Flash_fwd_params &params, cudaStream_t stream) {
        run_mha_fwd_hdim128<cutlass::half_t, true>(params, stream);
    }

    } // namespace FLASH_NAMESPACE
    """)

SPLIT_CU = ('#include "flash_fwd_launch_template.h"\n\n'
            "template void run_mha_fwd_splitkv_dispatch<cutlass::bfloat16_t, 256>(Flash_fwd_params &params, cudaStream_t stream);\n")

BWD_CU = ("template<>\nvoid run_mha_bwd_<cutlass::half_t, 128>(Flash_bwd_params &params, cudaStream_t stream, const bool configure) {\n"
          "    run_mha_bwd_hdim128<cutlass::half_t>(params, stream, configure);\n}\n")


@pytest.mark.parametrize("name,want", [
    ("flash_fwd_hdim128_fp16_causal_sm80.cu", {"kind": "fwd", "hdim": 128, "dtype": "fp16", "causal": True, "arch": "sm80"}),
    ("flash_fwd_split_hdim256_bf16_sm80.cu", {"kind": "fwd_split", "hdim": 256, "dtype": "bf16", "causal": None, "arch": "sm80"}),
    ("csrc/x/flash_bwd_hdim64_bf16_sm90.cu", {"kind": "bwd", "hdim": 64, "dtype": "bf16", "causal": None, "arch": "sm90"}),
    ("flash_fwd_hdim64_e4m3_sm90.cu", {"kind": "fwd", "hdim": 64, "dtype": "fp8", "causal": None, "arch": "sm90"}),
    ("flash_fwd_hdim64_fp16_gqa2_sm90.cu", None),
    ("flash_api.cpp", None),
])
def test_kernel_file_names_are_split_into_their_parts(name: str, want) -> None:
    assert fk.kernel_name(name) == want


def test_the_specialization_a_cu_file_defines_is_read_without_its_comments() -> None:
    specs = fk.specializations(KERNEL_CU)
    assert specs == [{"form": "specialization", "returns": "void", "function": "run_mha_fwd_",
                      "template_args": ["cutlass::half_t", "128", "true"], "params": "Flash_fwd_params &params, cudaStream_t stream",
                      "namespace": "FLASH_NAMESPACE", "line": 10}]
    (split,) = fk.specializations(SPLIT_CU)
    assert (split["form"], split["function"], split["template_args"], split["namespace"], split["line"]) == \
        ("instantiation", "run_mha_fwd_splitkv_dispatch", ["cutlass::bfloat16_t", "256"], None, 3)
    (bwd,) = fk.specializations(BWD_CU)
    assert bwd["params"] == "Flash_bwd_params &params, cudaStream_t stream, const bool configure"
    # a primary template and a declaration define no specialization
    assert fk.specializations("template<typename T, int D> void run_mha_fwd_(Flash_fwd_params &p);\n"
                              "template<> void run_mha_fwd_<cutlass::half_t, 64>(Flash_fwd_params &p);\n") == []


LITERAL_SETUP = textwrap.dedent("""\
    import os
    import glob
    from torch.utils.cpp_extension import CUDAExtension, IS_HIP_EXTENSION
    SKIP_CUDA_BUILD = os.getenv("FLASH_ATTENTION_SKIP_CUDA_BUILD", "FALSE") == "TRUE"
    IS_ROCM = True if IS_HIP_EXTENSION else False
    ext_modules = []
    if not SKIP_CUDA_BUILD and not IS_ROCM:
        ext_modules.append(
            CUDAExtension(
                name="flash_attn_2_cuda",
                sources=[
                    "csrc/flash_attn/flash_api.cpp",
                    "csrc/flash_attn/src/flash_fwd_hdim128_fp16_sm80.cu",
                    "csrc/flash_attn/src/flash_fwd_hdim128_fp16_causal_sm80.cu",
                    "csrc/flash_attn/src/flash_bwd_hdim128_bf16_sm80.cu",
                ],
            )
        )
    elif not SKIP_CUDA_BUILD and IS_ROCM:
        renamed_sources = ["csrc/flash_attn_ck/flash_api.cu"] + glob.glob("build/fmha_*wd*.cu")
        ext_modules.append(CUDAExtension(name="flash_attn_2_cuda", sources=renamed_sources))
    """)


def test_the_cuda_extension_is_the_one_on_the_cuda_path_with_its_sources_as_written() -> None:
    ext = fk.extension_sources(LITERAL_SETUP, [])
    assert ext is not None and ext.name == "flash_attn_2_cuda" and ext.line == 9 and not ext.computed
    assert ext.guard == ["not SKIP_CUDA_BUILD and (not IS_ROCM)"]
    assert ext.sources == ["csrc/flash_attn/flash_api.cpp", "csrc/flash_attn/src/flash_fwd_hdim128_fp16_sm80.cu",
                           "csrc/flash_attn/src/flash_fwd_hdim128_fp16_causal_sm80.cu", "csrc/flash_attn/src/flash_bwd_hdim128_bf16_sm80.cu"]
    old = fk.extension_sources(LITERAL_SETUP.replace("flash_attn_2_cuda", "flash_attn_cuda"), [])
    assert old is not None and old.name == "flash_attn_cuda"
    assert fk.extension_sources(LITERAL_SETUP.replace("flash_attn_2_cuda", "other_cuda"), []) is None


def test_the_extract_record_parses_each_kernel_and_checks_its_name_against_its_text() -> None:
    ext = fk.extension_sources(LITERAL_SETUP, [])
    files = {
        "csrc/flash_attn/flash_api.cpp": b"// api\n",
        "csrc/flash_attn/src/flash_fwd_hdim128_fp16_sm80.cu": KERNEL_CU.replace("128, true", "128, false").encode(),
        "csrc/flash_attn/src/flash_fwd_hdim128_fp16_causal_sm80.cu": KERNEL_CU.encode(),
        # the name says bf16, the text instantiates half_t
    }
    rec = fk.cuda_extension(ext, files)
    assert rec is not None and rec["name"] == "flash_attn_2_cuda" and rec["file"] == "setup.py"
    api, fwd, causal, bwd = rec["sources"]
    assert api == {"path": "csrc/flash_attn/flash_api.cpp", "in_sdist": True, "blob": fk.git_blob(b"// api\n")}
    assert fk.git_blob(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git hash-object of an empty file
    # a name without _causal beside a _causal sibling is the non-causal kernel; with no sibling it says nothing
    assert (fwd["kind"], fwd["hdim"], fwd["dtype"], fwd["causal"], fwd["arch"]) == ("fwd", 128, "fp16", False, "sm80")
    assert causal["causal"] is True and causal["specialization"]["template_args"] == ["cutlass::half_t", "128", "true"]
    assert bwd["causal"] is None and bwd["in_sdist"] is False and bwd["blob"] is None and bwd["specialization"] is None
    assert rec["name_text_disagreements"] == []
    files["csrc/flash_attn/src/flash_bwd_hdim128_bf16_sm80.cu"] = BWD_CU.encode()
    rec = fk.cuda_extension(ext, files)
    assert rec["name_text_disagreements"] == [{"path": "csrc/flash_attn/src/flash_bwd_hdim128_bf16_sm80.cu",
                                               "why": "dtype bf16 in the name, cutlass::half_t in the text"}]


COMPUTED_SETUP = textwrap.dedent("""\
    import os
    import itertools
    from glob import glob
    from pathlib import Path
    this_dir = os.path.dirname(os.path.abspath(__file__))
    DISABLE_BACKWARD = os.getenv("FLASH_ATTENTION_DISABLE_BACKWARD", "FALSE") == "TRUE"
    HDIMS = [64, 128]
    sources = [os.path.join("csrc", "flash_api.cpp")]
    for hdim in HDIMS:
        sources.append(f"csrc/flash_fwd_hdim{hdim}_fp16_sm80.cu")
    sources += [f"csrc/flash_bwd_hdim{h}_{d}_sm80.cu" for h, d in itertools.product(HDIMS, ["fp16", "bf16"])
                if not DISABLE_BACKWARD]
    extra = sorted(glob("csrc/split/*.cu"))
    if not DISABLE_BACKWARD:
        extra = extra + glob("csrc/**/*_sm90.cu", recursive=True)
    ext_modules = [CUDAExtension(name="flash_attn_2_cuda", sources=sources + extra,
                                 include_dirs=[Path(this_dir) / "csrc"])]
    """)

MEMBERS = ["setup.py", "csrc/split/flash_fwd_split_hdim64_fp16_sm80.cu", "csrc/split/flash_fwd_split_hdim128_fp16_sm80.cu",
           "csrc/split/.hidden.cu", "csrc/split/deeper/x.cu", "csrc/a/b/flash_fwd_hdim64_bf16_sm90.cu", "csrc/flash_api.cpp"]


def test_computed_sources_are_evaluated_against_the_sdist_listing_without_running_setup_py() -> None:
    ext = fk.extension_sources(COMPUTED_SETUP, MEMBERS)
    assert ext is not None and ext.computed and ext.unreadable is None
    assert ext.sources == [
        "csrc/flash_api.cpp", "csrc/flash_fwd_hdim64_fp16_sm80.cu", "csrc/flash_fwd_hdim128_fp16_sm80.cu",
        "csrc/flash_bwd_hdim64_fp16_sm80.cu", "csrc/flash_bwd_hdim64_bf16_sm80.cu",
        "csrc/flash_bwd_hdim128_fp16_sm80.cu", "csrc/flash_bwd_hdim128_bf16_sm80.cu",
        # glob: one folder level, no hidden files; ** with recursive=True descends
        "csrc/split/flash_fwd_split_hdim128_fp16_sm80.cu", "csrc/split/flash_fwd_split_hdim64_fp16_sm80.cu",
        "csrc/a/b/flash_fwd_hdim64_bf16_sm90.cu",
    ]
    assert ext.assumed_env == {"FLASH_ATTENTION_DISABLE_BACKWARD": "FALSE"}
    assert ext.globs == [{"pattern": "csrc/split/*.cu", "line": 13, "matched": 2},
                         {"pattern": "csrc/**/*_sm90.cu", "line": 15, "matched": 1}]
    rec = fk.cuda_extension(ext, {})
    assert rec["computed"] is True and rec["assumed_env"] == ext.assumed_env and len(rec["sources"]) == 10


def test_sources_a_static_reading_cannot_know_are_null_with_the_reason() -> None:
    code = COMPUTED_SETUP.replace('HDIMS = [64, 128]', 'HDIMS = get_hdims()')
    ext = fk.extension_sources(code, MEMBERS)
    assert ext is not None and ext.sources is None and "get_hdims" in ext.unreadable
    rec = fk.cuda_extension(ext, {})
    assert rec["sources"] is None and rec["unreadable"] == ext.unreadable and "name_text_disagreements" not in rec
    undecided = COMPUTED_SETUP.replace("if not DISABLE_BACKWARD:\n", "if torch.cuda.is_available():\n")
    ext = fk.extension_sources(undecided, MEMBERS)
    assert ext.sources is None and "cannot decide" in ext.unreadable


HOPPER_SETUP = textwrap.dedent("""\
    import os
    PACKAGE_NAME = "flash_attn_3"
    DISABLE_SM8x = os.getenv("FLASH_ATTENTION_DISABLE_SM80", "FALSE") == "TRUE"
    def _write_ninja_file(sources):
        for source_file in sources:
            if source_file.endswith('_sm90.cu'):
                rule = 'cuda_compile'
            elif source_file.endswith('_sm80.cu'):
                rule = 'cuda_compile_sm80'
    if not SKIP_CUDA_BUILD:
        if bare_metal_version < Version("12.3"):
            raise RuntimeError("FlashAttention-3 is only supported on CUDA 12.3 and above")
        cc_flag = []
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_90a,code=sm_90a")
        sources = ["flash_api.cpp"] + (["instantiations/flash_fwd_hdim64_bf16_sm80.cu"] if not DISABLE_SM8x else []) \\
            + ["instantiations/flash_fwd_hdim64_bf16_sm90.cu"]
        ext_modules.append(CUDAExtension(
            name=f"{PACKAGE_NAME}._C",
            sources=sources))
    setup(name=PACKAGE_NAME, ext_modules=ext_modules)
    """)


def test_hopper_setup_py_package_extension_and_arch_are_quoted() -> None:
    h = fk.hopper_facts(HOPPER_SETUP, ["setup.py", "flash_api.cpp"])
    assert h["package"] == {"name": "flash_attn_3", "line": 2, "quote": 'PACKAGE_NAME = "flash_attn_3"'}
    assert h["extension"] == {"name": "flash_attn_3._C", "line": 19, "quote": 'name=f"{PACKAGE_NAME}._C",',
                              "sources": {"listed": 3, "in_sdist": 1, "assumed_env": {"FLASH_ATTENTION_DISABLE_SM80": "FALSE"},
                                          "by_arch_suffix": {"other": 1, "sm80": 1, "sm90": 1}}}
    assert h["gencode"] == [{"gencode": "arch=compute_90a,code=sm_90a", "arch": "9.0a", "line": 15,
                             "quote": 'cc_flag.append("arch=compute_90a,code=sm_90a")'}]
    assert h["nvcc_floor"] == {"version": "12.3", "line": 11, "quote": 'if bare_metal_version < Version("12.3"):'}
    assert [(r["suffix"], r["rule"], r["line"]) for r in h["per_file_rules"]] == \
        [("_sm90.cu", "cuda_compile", 6), ("_sm80.cu", "cuda_compile_sm80", 8)]


def test_every_committed_extract_reads_its_cuda_extension() -> None:
    for path in sorted((ROOT / "data" / "sources" / "flash-attn").glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        ext, hopper = doc["sdist"]["cuda_extension"], doc["sdist"]["hopper"]
        assert ext["name"] in fk.EXTENSION_NAMES and ext["sources"], path.name
        assert all(s["in_sdist"] for s in ext["sources"]) and ext["name_text_disagreements"] == [], path.name
        cu = [s for s in ext["sources"] if s["path"].endswith(".cu")]
        assert all(s["kind"] and s["specialization"] for s in cu), path.name
        assert hopper["dir"] == hopper["setup_py"], path.name
    fa283 = json.loads((ROOT / "data" / "sources" / "flash-attn" / "2.8.3.json").read_text(encoding="utf-8"))["sdist"]
    cu = [s for s in fa283["cuda_extension"]["sources"] if s["path"].endswith(".cu")]
    assert len(cu) == 72 and sorted({s["hdim"] for s in cu}) == [32, 64, 96, 128, 192, 256]
    assert fa283["hopper"]["package"]["name"] == "flash_attn_3" and fa283["hopper"]["gencode"][0]["arch"] == "9.0a"
