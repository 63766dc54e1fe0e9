"""The refresh machinery: the TOML writer round-trips what it writes, regions are rewritten in place,
a hand edit is caught by check(), and a broken extract is one InputError, never a traceback."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from envkit.errors import InputError
from envkit.matrixgen import refresh, toml_emit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("text", ["plain", 'quote " and \\ backslash', "new\nline\ttab", "del \x7f char", "unicode ✓ 中文", "\x00\x1f"])
def test_toml_strings_round_trip(text: str) -> None:
    rows = [{"s": text, "n": 3, "b": True, "l": ["a", text], "t": {"k": text, "i": [{"x": text}]}, "lt": [{"a": 1}, {"a": text}]}]
    assert tomllib.loads(toml_emit.table_rows("r", rows)) == {"r": rows}


def test_none_values_are_left_out_and_unknown_types_refused() -> None:
    assert tomllib.loads(toml_emit.table_rows("r", [{"a": 1, "b": None}])) == {"r": [{"a": 1}]}
    with pytest.raises(TypeError):
        toml_emit.value(object())


def _region(tmp: Path) -> Path:
    src = tmp / "sources"
    shutil.copytree(ROOT / "data" / "sources" / "flash-attn", src / "flash-attn")
    return src


def test_apply_rewrites_only_the_region_and_check_catches_a_hand_edit(tmp_path: Path) -> None:
    src = _region(tmp_path)
    region = refresh.REGIONS[0]
    begin = refresh._BEGIN.format(name=region.name, directory=region.directory)
    end = refresh._END.format(name=region.name)
    text = f"schema = 1\n# hand row above\n{begin}\nstale = true\n{end}\n# hand row below\n"
    new = refresh.apply(text, src, (region,))
    assert new.startswith("schema = 1\n# hand row above\n") and new.endswith(f"{end}\n# hand row below\n")
    assert "stale" not in new and refresh.check(new, src, (region,)) == []
    edited = new.replace('python = ">=3.9"', 'python = ">=3.8"', 1)
    (name, rows, diff), = refresh.check(edited, src, (region,))
    assert name == "flash_attn" and rows == 1 and '-python = ">=3.8"' in diff


def test_a_broken_extract_is_one_input_error(tmp_path: Path) -> None:
    src = _region(tmp_path)
    p = src / "flash-attn" / "2.5.8.json"
    d = json.loads(p.read_text())
    del d["git"]["workflow"]["torch_index"]
    p.write_text(json.dumps(d))
    with pytest.raises(InputError, match="do not derive flash_attn rows"):
        refresh.render(src, refresh.REGIONS[0])
    p.write_text("{not json")
    with pytest.raises(InputError, match="not a readable extract"):
        refresh.render(src, refresh.REGIONS[0])


def test_markers_missing_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no derived region"):
        refresh.check("schema = 1\n", _region(tmp_path), (refresh.REGIONS[0],))
