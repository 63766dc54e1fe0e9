"""The loader validates every row and reports all bad rows at once, each with its line."""
from __future__ import annotations

from pathlib import Path

import pytest

from packaging.version import Version
from envkit.config import matrix_file as matrix
from envkit.errors import MatrixError

TEXT = (Path(__file__).resolve().parent.parent / "matrix.toml").read_text()


def _line_of(text: str, needle: str) -> int:
    return text.splitlines().index(needle) + 1


def test_shipped_matrix_is_valid_and_sourced() -> None:
    m = matrix.parse(TEXT)
    rows = [*m.cuda, *m.gpus, *m.torch, *m.rocm, *m.dtk, *m.flash_attn, *m.flash_attn_broken, *m.vllm, *m.python]
    assert rows and all(r.source for r in rows)
    assert {"11.0", "11.8", "12.8", "13.0"} <= {str(c.version) for c in m.cuda}
    assert all(str(a) not in {"5.0", "6.0", "7.0", "7.2"} for a in m.cuda_toolkit(Version("13.0")).archs)


def test_every_bad_row_is_reported_with_its_line() -> None:
    bad = TEXT.replace('version = "11.8"\nrelease = "11.8.0"', 'version = "eleven"\nrelease = "11.8.0"', 1)
    bad = bad.replace('name = "RTX 4090"\naliases = ["4090", "GeForce RTX 4090"]\nvendor = "nvidia"', 'name = "RTX 4090"\naliases = ["4090", "GeForce RTX 4090"]\nvendor = "intel"', 1)
    needle = 'source = "https://www.techpowerup.com/gpu-specs/geforce-rtx-3090.c3622"'
    bad = bad.replace(needle, "", 1)
    with pytest.raises(MatrixError) as info:
        matrix.parse(bad, "broken.toml")
    problems = info.value.problems
    text = "\n".join(problems)
    lines = bad.splitlines()
    cuda_line = next(i + 1 for i, l in enumerate(lines) if l == "[[cuda]]" and lines[i + 1] == 'version = "eleven"')
    assert f"line {cuda_line}: [[cuda]]" in text and "`version`" in text
    assert "`vendor`: vendor must be nvidia, amd or hygon" in text
    assert "`source`: every row needs a source" in text
    assert len(problems) >= 3
    assert info.value.exit_code == 3


def test_unknown_keys_and_tables_are_named() -> None:
    bad = TEXT.replace("schema = 1", "schema = 1\n\n[[gadgets]]\nname = 'x'", 1).replace(
        'cudnn = "8"\n', 'cudnn = "8"\ncudnn_version = "8"\n', 1)
    with pytest.raises(MatrixError) as info:
        matrix.parse(bad)
    text = "\n".join(info.value.problems)
    assert "unknown table `gadgets`" in text
    assert "`cudnn_version`: unknown key" in text


def test_invalid_toml_is_one_clear_problem() -> None:
    with pytest.raises(MatrixError) as info:
        matrix.parse("schema = 1\n[[cuda]\n", "x.toml")
    assert info.value.problems[0].startswith("not valid TOML")


def test_a_vllm_pin_without_a_torch_row_is_refused() -> None:
    bad = TEXT.replace('torch = "==2.1.2"\npython = ">=3.8,<3.12"', 'torch = "==2.1.9"\npython = ">=3.8,<3.12"', 1)
    with pytest.raises(MatrixError) as info:
        matrix.parse(bad)
    assert any("matches no [[torch]] row" in p for p in info.value.problems)


DERIVED_MUTATIONS = [
    ('cuda_ptx = "9.0"', "cuda_ptx = 9", "cuda_ptx"),
    ('python = ["3.8", "3.9", "3.10", "3.11"], abi', 'python = "310", abi', "wheels"),
    ('{ cuda_major = 11, to = "11.8" }', '{ cuda_major = "11", to = "11.8" }', "wheel_rule"),
    ("wheel_cuda_major = 12", "wheel_cuda_major = true", "wheel_cuda_major"),
    ('wheels = ["vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"]', "wheels = []", "wheels"),
]


@pytest.mark.parametrize("old,new,key", DERIVED_MUTATIONS)
def test_bad_values_in_the_new_fields_are_named_not_raised(old: str, new: str, key: str) -> None:
    assert old in TEXT, old
    with pytest.raises(MatrixError) as err:
        matrix.parse(TEXT.replace(old, new, 1))
    assert any(key in p and p.startswith("line ") for p in err.value.problems), err.value.problems


def test_two_pypi_builds_of_one_torch_release_are_refused() -> None:
    i = TEXT.index('name = "cu126", cuda = "12.6"')
    bad = TEXT[:i] + TEXT[i:].replace('cxx11abi = true', 'pypi = true, cxx11abi = true', 1)
    with pytest.raises(MatrixError, match="PyPI build"):
        matrix.parse(bad)
