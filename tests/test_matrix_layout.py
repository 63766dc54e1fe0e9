"""matrix.toml in two parts: the tables kept by hand first, then the derived ones (their rows between the region
markers `envkit matrix refresh` writes). `envkit matrix check` refuses a file that mixes them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.matrixgen import refresh

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "matrix.toml"


def _check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", "matrix", "check", str(path), "--json"], capture_output=True, text=True)


def test_the_repository_matrix_keeps_its_two_parts_apart():
    parts = refresh.layout(MATRIX.read_text(encoding="utf-8"))
    assert parts.problems == ()
    assert set(parts.derived) == {r.name for r in refresh.REGIONS}
    assert {"cuda", "gpu", "gpu_driver", "rocm", "dtk", "python", "os"} <= set(parts.hand_kept)
    assert not set(parts.derived) & set(parts.hand_kept)
    lines = MATRIX.read_text(encoding="utf-8").splitlines()
    assert {name for name, _ in parts.begins} == set(parts.derived)
    assert all(lines[at - 1].startswith(f"# >>> derived: {name} ") for name, at in parts.begins)


def test_matrix_check_names_both_parts_in_its_json():
    ran = _check(MATRIX)
    assert ran.returncode == 0, ran.stderr
    tables = json.loads(ran.stdout)["tables"]
    assert tables["derived"][:3] == ["torch", "flash_attn", "vllm"] and "cuda" in tables["hand_kept"]


def test_a_hand_kept_table_among_the_derived_ones_is_refused_with_its_line(tmp_path):
    text = MATRIX.read_text(encoding="utf-8")
    start = text.index("# FasterTransformer: archived")
    end = text.index("\n\n", text.index("[[fastertransformer]]"))
    block = text[start:end]
    moved = tmp_path / "matrix.toml"
    moved.write_text(text[:start] + text[end + 2:] + "\n" + block + "\n", encoding="utf-8")
    line = moved.read_text(encoding="utf-8").splitlines().index("[[fastertransformer]]") + 1
    assert refresh.layout(moved.read_text(encoding="utf-8")).problems[0][0] == line
    ran = _check(moved)
    assert ran.returncode == 3
    assert f"line {line}: [[fastertransformer]] is kept by hand and sits among the derived tables" in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 2  # the headline and the one table's first row, not every row


def test_a_hand_written_row_of_a_derived_table_is_refused():
    text = "schema = 1\n[[torch]]\nversions = ['1']\n# >>> derived: torch (x)\n[[torch]]\nversions = ['2']\n# <<< derived: torch\n"
    parts = refresh.layout(text)
    assert parts.derived == ("torch",)
    assert [line for line, _ in parts.problems] == [2]
    assert "kept by hand, but [[torch]] is derived" in parts.problems[0][1]


def test_a_matrix_without_regions_is_all_hand_kept():
    parts = refresh.layout("schema = 1\n[[cuda]]\nversion = '12.4'\n[[gpu]]\nname = 'x'\n")
    assert parts == refresh.Layout((), ("cuda", "gpu"), ())


@pytest.mark.parametrize("header", ["[[ torch ]]", '[["torch"]]', "  [[torch]]", "[[torch]]  # a comment"])
def test_a_derived_table_s_row_is_found_however_its_header_is_spelt(header):
    text = f"schema = 1\n{header}\nversions = ['1']\n# >>> derived: torch (x)\n[[torch]]\nversions = ['2']\n# <<< derived: torch\n"
    assert [line for line, _ in refresh.layout(text).problems] == [2]


@pytest.mark.parametrize("text, line, says", [
    ("# >>> derived: torch (x)\n[[torch]]\nv = 1\n", 1, "region torch is never closed"),
    ("# >>> derived: torch (x)\n[[torch]]\n# <<< derived: vllm\n", 3, "closes region torch (line 1)"),
    ("[[cuda]]\n# <<< derived: torch\n", 2, "closes no region"),
    ("# >>> derived: torch (x)\n# >>> derived: vllm (x)\n# <<< derived: vllm\n", 2, "begins inside region torch (line 1)"),
    ("# >>> derived: torch (x)\n[[torch]]\n[[vllm]]\n# <<< derived: torch\n", 3, "a [[vllm]] row inside the derived region of torch"),
])
def test_a_broken_region_is_named_with_its_line(text, line, says):
    problems = refresh.layout(text).problems
    assert any(at == line and says in what for at, what in problems), problems


def _beside_the_sources(tmp_path: Path, text: str) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sources").symlink_to(ROOT / "data" / "sources")
    path = tmp_path / "matrix.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_hand_edit_inside_a_derived_region_is_refused_beside_the_extracts(tmp_path):
    text = MATRIX.read_text(encoding="utf-8")
    edited = text.replace('versions = ["2.15.0"]\npython = ">=3.11,<3.16"', 'versions = ["2.15.0"]\npython = ">=3.10,<3.16"', 1)
    assert edited != text
    ran = _check(_beside_the_sources(tmp_path, edited))
    assert ran.returncode == 3, ran.stdout
    line = edited.splitlines().index(next(x for x in edited.splitlines() if x.startswith("# >>> derived: torch "))) + 1
    assert f"line {line}: the derived [[torch]] rows differ from what data/sources/ derives (1 row(s))" in ran.stderr


def test_the_repository_matrix_beside_its_extracts_is_checked_and_valid(tmp_path):
    ran = _check(_beside_the_sources(tmp_path, MATRIX.read_text(encoding="utf-8")))
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["derived_checked"] is True


def test_a_marker_line_refresh_does_not_write_is_a_problem_not_a_crash(tmp_path):
    text = MATRIX.read_text(encoding="utf-8")
    marker = next(x for x in text.splitlines() if x.startswith("# >>> derived: vllm "))
    ran = _check(_beside_the_sources(tmp_path, text.replace(marker + "\n", marker + "  \n", 1)))
    assert ran.returncode == 3 and "no derived region for vllm" in ran.stderr, ran.stderr


def test_a_matrix_without_regions_beside_other_sources_is_not_compared(tmp_path):
    text = MATRIX.read_text(encoding="utf-8")
    plain = "\n".join(x for x in text.splitlines() if not x.startswith(("# >>> derived:", "# <<< derived:"))) + "\n"
    ran = _check(_beside_the_sources(tmp_path, plain))
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["derived_checked"] is False
