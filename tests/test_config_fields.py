"""The declarative table reader of envkit/config: every table's keys are declared once and the
declarations fill their model dataclasses exactly."""
from __future__ import annotations

import dataclasses

import pytest

from envkit.config import matrix_file as mx
from envkit.config.fields import REQUIRED, Field, Problem, Table, boolean, text
from envkit.model.matrix import Rocm


def _read(table: Table, row: dict) -> tuple[dict, list[Problem]]:
    problems: list[Problem] = []
    return table.read(row, problems.append), problems


def test_a_row_is_converted_and_defaults_fill_the_rest() -> None:
    t = Table.of(Field("n", int, int), Field("s", default="x"), Field("on", boolean, object, False, attr="enabled"))
    values, problems = _read(t, {"n": 3, "on": True})
    assert values == {"n": 3, "s": "x", "enabled": True} and problems == []


def test_every_problem_is_reported_not_only_the_first() -> None:
    t = Table.of(Field("n", int, int), Field("s"), Field("on", boolean, object, False))
    values, problems = _read(t, {"s": 5, "on": "yes", "zz": 1})
    assert [(p.key, p.what) for p in problems] == [("zz", "unknown"), ("n", "missing"), ("s", "type"), ("on", "invalid")]
    assert problems[0].why == "unknown key (allowed: n, on, s)" and problems[0].allowed == ("n", "on", "s")
    assert problems[2].why == "expected str, got int"
    assert problems[3].fix_at("[x] on") == "write on = true"
    assert values["n"] is None and values["s"] is None


def test_an_inherited_default_overrides_the_declared_one() -> None:
    t = Table.of(Field("source"))
    assert _read(t, {})[1][0].why == "missing"
    assert t.convert({}, lambda p: None, {"source": "doc:x"}) == {"source": "doc:x"}


def test_text_names_the_value_and_its_place() -> None:
    tag = text(r"[a-z]+", "{value} is not a tag", "write {where} = \"a\"")
    _, problems = _read(Table.of(Field("tag", tag, object, REQUIRED)), {"tag": "A B"})
    assert problems[0].why == "'A B' is not a tag" and problems[0].fix_at("[t] tag") == 'write [t] tag = "a"'


def test_a_row_that_is_not_a_table_is_a_problem() -> None:
    assert _read(Table.of(Field("a")), ["x"])[1][0].why == "expected a table, got list"  # type: ignore[arg-type]


SPECS = [mx._CUDA, mx._GPU, mx._GPU_DRIVER, mx._ROCM, mx._ABI_BREAK, mx._FA_BROKEN, mx._PYTHON, mx._OS, mx._VLLM]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.build.__name__)
def test_each_matrix_table_fills_its_dataclass_exactly(spec) -> None:
    declared = {f.name for f in spec.table.fields}
    fields = {f.name: f for f in dataclasses.fields(spec.build) if f.init}
    required = {n for n, f in fields.items() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    assert required <= declared <= set(fields)


def test_flash_attn_declares_every_field_but_the_split_wheel_rule() -> None:
    from envkit.model.matrix import FlashAttn
    declared = {f.name for f in mx._FLASH_ATTN.table.fields} - {"wheel_rule"} | {"wheel_format", "wheel_remap"}
    assert declared == {f.name for f in dataclasses.fields(FlashAttn)}


def test_a_key_a_table_accepts_without_reading_is_allowed() -> None:
    assert "confidence" in mx._ROCM.table.keys and "confidence" not in {f.name for f in dataclasses.fields(Rocm)}
