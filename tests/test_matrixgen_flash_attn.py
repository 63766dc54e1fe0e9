"""flash-attn facts: the extractor reads workflow/setup.py/README shapes into data, the derivation
turns them into [[flash_attn]] rows, and the shipped matrix says what the committed extracts say."""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from envkit.config import matrix_file as matrix
from envkit.matrixgen import derive_flash_attn as d
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
           "sdist": {"url": "https://files.pythonhosted.org/x.tar.gz", "sha256": "ab", "setup": setup,
                     "readme": {"torch_min": "2.2", "rocm_min": None},
                     "kernels": {"layer_norm": {"dir": True, "setup_py": True}, "rotary": {"dir": False, "setup_py": False}}}}
    row = d.derive_row(doc)
    assert row["wheel_set"] == "unknown" and "wheels" not in row
    assert row["kernels"] == ["layer_norm"] and row["kernel_setup_py"] is True
    assert row["source"] == "https://files.pythonhosted.org/x.tar.gz#sha256=ab"


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
