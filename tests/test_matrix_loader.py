"""The loader validates every row and reports all bad rows at once, each with its own line; it never crashes
(issue 14: fuzz report item 12 and its "Minor" section, newcomer review 1.5)."""
from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

from envkit.config import matrix_file as matrix
from envkit.errors import InputError, MatrixError
from fuzzing import run
from schema_check import validate

ROOT = Path(__file__).resolve().parent.parent
TEXT = (ROOT / "matrix.toml").read_text(encoding="utf-8")
LINES = TEXT.splitlines()


def _line_of(text: str, needle: str, after: int = 0) -> int:
    """The 1-based line of the first line at or after line `after` that holds `needle`."""
    lines = text.splitlines()
    return next(i + 1 for i in range(after, len(lines)) if needle in lines[i])


def _problems(text: str | bytes) -> list[str]:
    with pytest.raises(MatrixError) as info:
        matrix.parse(text, "m.toml")
    assert info.value.exit_code == 3
    return info.value.lines


def _with_row(text: str, table: str, index: int, old: str, new: str) -> tuple[str, int]:
    """`text` with `old` replaced by `new` inside the index'th [[table]] row, and the line of that row's header."""
    starts = [m.start() for m in re.finditer(r"^\[\[" + re.escape(table) + r"\]\]$", text, re.M)]
    start = starts[index]
    end = text.index("\n[[", start + 1)
    row = text[start:end]
    assert old in row, (table, index, old)
    return text[:start] + row.replace(old, new, 1) + text[end:], text.count("\n", 0, start) + 1


def test_shipped_matrix_is_valid_and_sourced() -> None:
    m = matrix.parse(TEXT)
    rows = [*m.cuda, *m.gpus, *m.torch, *m.rocm, *m.dtk, *m.flash_attn, *m.flash_attn_broken, *m.vllm, *m.python]
    assert rows and all(r.source for r in rows)
    assert {"11.0", "11.8", "12.8", "13.0"} <= {str(c.version) for c in m.cuda}
    assert all(str(a) not in {"5.0", "6.0", "7.0", "7.2"} for a in m.cuda_toolkit(Version("13.0")).archs)


def test_no_string_in_the_shipped_matrix_names_developer_notes() -> None:
    """Newcomer review 1.5: `source` strings printed by resolve and baked into image labels cited ../shared notes."""
    strings: list[str] = []
    stack: list[object] = [tomllib.loads(TEXT)]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str):
            strings.append(v)
    assert len(strings) > 1000
    assert [s for s in strings if "shared/" in s or re.search(r"(?<![\w-])notes/", s)] == []  # NVIDIA's release-notes/ pages are fine


def test_every_bad_row_is_reported_with_its_line() -> None:
    bad = TEXT.replace('version = "11.8"\nrelease = "11.8.0"', 'version = "eleven"\nrelease = "11.8.0"', 1)
    bad = bad.replace('name = "RTX 4090"\naliases = ["4090", "GeForce RTX 4090"]\nvendor = "nvidia"', 'name = "RTX 4090"\naliases = ["4090", "GeForce RTX 4090"]\nvendor = "intel"', 1)
    needle = ('source = "https://www.techpowerup.com/gpu-specs/geforce-rtx-3090.c3622; '
              'segment: https://developer.nvidia.com/cuda-gpus (Workstation/Consumer column)"')
    assert needle in bad
    bad = bad.replace(needle, "", 1)
    problems = _problems(bad)
    text = "\n".join(problems)
    version_line = _line_of(bad, 'version = "eleven"')
    assert f"line {version_line}: [[cuda]] #" in text and "`version`: Invalid version: 'eleven'" in text
    assert "`vendor`: vendor must be nvidia, amd or hygon" in text
    assert "`source`: every row needs a source" in text
    assert len(problems) == 3


def test_unknown_keys_and_tables_are_named_at_their_lines() -> None:
    bad = TEXT.replace("schema = 1", "schema = 1\n\n[[gadgets]]\nname = 'x'", 1).replace(
        'cudnn = "8"\n', 'cudnn = "8"\ncudnn_version = "8"\n', 1)
    problems = _problems(bad)
    assert f"line {_line_of(bad, '[[gadgets]]')}: unknown table `gadgets`" in "\n".join(problems)
    assert f"line {_line_of(bad, 'cudnn_version')}: [[cuda]] #1 `cudnn_version`: unknown key" in "\n".join(problems)


def test_invalid_toml_is_one_problem_at_its_line() -> None:
    assert _problems("schema = 1\n[[cuda]\n") == ["line 2: not valid TOML: Expected ']]' at the end of an array declaration (column 7)"]


# ---------------------------------------------------------------- fuzz report 12: crashes become problems with lines

def test_a_byte_that_is_not_utf8_is_named_with_its_line_and_offset(tmp_path: Path) -> None:
    """Fuzz report 12: `{ printf '\\xff'; cat matrix.toml; } > m1.toml` gave UnicodeDecodeError."""
    assert _problems(b"\xff" + TEXT.encode()) == ["line 1: byte 0xff (column 1, offset 0) is not UTF-8: save matrix.toml as UTF-8"]
    raw = TEXT.encode()
    at = raw.index(b"[[gpu]]")
    problems = _problems(raw[:at + 2] + b"\xe9" + raw[at + 3:])
    assert problems[0].startswith(f"line {TEXT.count(chr(10), 0, TEXT.index('[[gpu]]')) + 1}: byte 0xe9 (column 3, offset {at + 2})")
    m1 = tmp_path / "m1.toml"
    m1.write_bytes(b"\xff" + raw)
    ran = run(["matrix", "check", str(m1)], "matrix loader")
    assert ran.code == 3 and "line 1: byte 0xff" in ran.err and "Traceback" not in ran.err


ROW_SHAPES = [  # (table, index, old, new, the problem's row label and expected shape)
    ("dtk", 0, 'torch = [\n  { version = "1.13.1"', 'torch = ["x",\n  { version = "1.13.1"', "[[dtk]] #1 torch build #1: expected a table, got str"),
    ("dtk", 0, "torch = [", "torch = 3\nxtorch = [", "[[dtk]] #1 `torch`: expected list, got int"),
    ("torch", 0, 'variants = [\n  { name = "cu132"', 'variants = ["cpu",\n  { name = "cu132"', "[[torch]] #1 variant #1: a variant must be a table"),
    ("torch", 0, "variants = [", 'variants = "cpu"\nxvariants = [', "[[torch]] #1 `variants`: expected list, got str"),
    ("cuda", 0, 'archs = ["3.5"', 'archs = 3\nxarchs = ["3.5"', "[[cuda]] #1 `archs`: expected list, got int"),
    ("flash_attn", 0, "wheel_rule = ", "wheel_rule = [1]\nxwheel_rule = ", "[[flash_attn]] #1 `wheel_rule`: expected str or dict, got list"),
    ("flash_attn", 0, "archs = [", 'archs = [{ arch = 8, nvcc = ">=11.6" },', "[[flash_attn]] #1 `archs` #1: 8 is not a compute capability"),
    ("gpu", 0, "memory_gb = ", "memory_gb = 1e400\nxmemory_gb = ", "[[gpu]] #1 `memory_gb`: must be a number >= 0"),
]


@pytest.mark.parametrize("table,index,old,new,said", ROW_SHAPES, ids=[s[-1][:40] for s in ROW_SHAPES])
def test_a_row_of_the_wrong_shape_names_the_row_its_line_and_the_expected_type(table, index, old, new, said) -> None:
    """Fuzz report 12: a row that is not a table, a string or list where a table belongs, an int where a list belongs."""
    bad, _header = _with_row(TEXT, table, index, old, new)
    problems = _problems(bad)
    hit = [p for p in problems if said in p]
    assert hit, problems
    line = int(hit[0].split(":")[0].removeprefix("line "))
    first_new_line = new.split("\n")[0]
    assert first_new_line in bad.splitlines()[line - 1], (hit[0], bad.splitlines()[line - 1])


def test_a_table_where_an_array_of_tables_belongs_is_named() -> None:
    problems = _problems(TEXT.replace("schema = 1", "schema = 1\npython = 3", 1).replace("[[python]]", "[[pythons]]"))
    assert "line 7: `python` must be an array of tables ([[python]]), got int" in problems
    problems = _problems(TEXT.replace("schema = 1", "schema = 1\ncuda = [1]", 1).replace("[[cuda]]", "[[cudas]]"))
    assert "line 7: [[cuda]] #1: expected a table, got int" in problems


def test_a_5000_digit_integer_and_deep_nesting_are_one_problem_each() -> None:
    """Fuzz report 12: ValueError (int's digit limit) and RecursionError (tomllib) escaped."""
    big = TEXT.replace("memory_gb = 80\n", "memory_gb = " + "9" * 5000 + "\n", 1)
    assert _problems(big) == [f"line {_line_of(big, '9' * 5000)}: an integer of more than 4300 digits"]
    deep = TEXT.replace("schema = 1", "schema = 1\nx = " + "[" * 2000 + "]" * 2000, 1)
    assert _problems(deep) == ["line 7: arrays or inline tables nested more than 16 deep"]
    within_tomllib = TEXT.replace("schema = 1", "schema = 1\nx = " + "[" * 20 + "]" * 20, 1)
    assert _problems(within_tomllib) == ["line 7: arrays or tables nested more than 16 deep"]


ARCHS = [("sm_5", False), ("sm_0", False), ("sm5", False), ("sm_", False), ("gfx", False), ("gfx9999x", False),
         ("sm_90", True), ("sm_100a", True), ("sm_120f", True), ("gfx90a", True)]


@pytest.mark.parametrize("arch,ok", ARCHS)
def test_gpu_archs_are_checked_at_load(arch: str, ok: bool) -> None:
    """Fuzz report 11 (M4): `arch = "sm_5"` passed `matrix check`, then crashed resolve."""
    vendor = "amd" if arch.startswith("gfx") else "nvidia"
    row = f'\n[[gpu]]\nname = "Z9"\nvendor = "{vendor}"\narch = "{arch}"\nmemory_gb = 1\nbandwidth_gbs = 1\nsource = "https://x"\n'
    if ok:
        assert any(g.name == "Z9" for g in matrix.parse(TEXT + row).gpus)
    else:
        assert _problems(TEXT + row) == [f"line {len(LINES) + 5}: [[gpu]] #{len(matrix.parse(TEXT).gpus) + 1} `arch`: {arch!r} is not an arch: "
                                         "write sm_NN with NN >= 10 (sm_90, sm_100a) or gfxNNN (gfx942, gfx90a)"]


def test_arch_lists_and_the_vendor_are_checked_at_load() -> None:
    bad = TEXT.replace('"3.5", "3.7", "5.0"', '"3.5", "sm_5", "5.0"', 1)
    assert "[[cuda]] #1 `archs`: 'sm_5' is not a compute capability" in _problems(bad)[0]
    bad = TEXT.replace('arch = "sm_80"', 'arch = "gfx942"', 1)
    assert "`arch`: a nvidia GPU's arch is sm_NN, not gfx942" in _problems(bad)[0]
    bad, _ = _with_row(TEXT, "rocm", 0, '"gfx', '"sm_90", "gfx')
    assert "`archs`: 'sm_90' is not an AMD arch" in _problems(bad)[0]


# ---------------------------------------------------------------- duplicates and references, each at its line

UNIQUE_TABLES = ["cuda", "rocm", "python", "dtk", "os", "gpu", "gpu_driver", "torch", "flash_attn", "vllm",
                 "torch_abi_break", "flash_attn_broken"]


@pytest.mark.parametrize("table", UNIQUE_TABLES)
def test_a_duplicated_row_is_refused_naming_both_lines(table: str) -> None:
    """Fuzz report 12 / Minor: duplicate [[python]] or [[rocm]] rows were accepted; duplicate errors had no line."""
    start = TEXT.index(f"\n[[{table}]]\n") + 1
    end = TEXT.index("\n[[", start + 1) + 1
    bad = TEXT[:end] + TEXT[start:end] + TEXT[end:]
    first, copy = TEXT.count("\n", 0, start) + 1, TEXT.count("\n", 0, end) + 1
    span = end - start
    n = TEXT[start:end].count("\n")
    dup = [p for p in _problems(bad) if "duplicate" in p]
    assert dup, table
    for p in dup:
        line, also = map(int, re.fullmatch(r"line (\d+): .*duplicate .* \(first at line (\d+)\)", p).groups())
        assert copy <= line < copy + n and first <= also < first + n, (p, first, copy, span)


def test_two_pypi_builds_of_one_torch_release_are_refused() -> None:
    i = TEXT.index('name = "cu126", cuda = "12.6"')
    bad = TEXT[:i] + TEXT[i:].replace('cxx11abi = true', 'pypi = true, cxx11abi = true', 1)
    assert any("duplicate PyPI build (pypi = true) of torch" in p for p in _problems(bad))


def test_references_to_no_row_name_the_referring_line() -> None:
    """Fuzz report Minor: `os 'x' has no [[os]] row` and `vllm ... matches no [[torch]] row` carried no line."""
    bad, header = _with_row(TEXT, "cuda", 2, 'os = "ubuntu20.04"', 'os = "x"')
    at = next(i for i in range(header, len(LINES)) if LINES[i] == 'os = "ubuntu20.04"')  # the row's own os line
    assert _problems(bad) == [f"line {at + 1}: [[cuda]] #3 `os`: 'x' has no [[os]] row"]
    old = 'torch = "==2.1.2"\npython = ">=3.8,<3.12"'
    bad = TEXT.replace(old, 'torch = "==2.1.9"\npython = ">=3.8,<3.12"', 1)
    line = _line_of(bad, 'torch = "==2.1.9"')
    (problem,) = _problems(bad)
    assert problem.startswith(f"line {line}: [[vllm]] #{_index_of(bad, 'vllm', line)} `torch`: vllm 0.")
    assert problem.endswith(" needs torch ==2.1.9, which matches no [[torch]] row")


def _index_of(text: str, table: str, line: int) -> int:
    """The 1-based number of the [[table]] row that holds `line`."""
    return sum(1 for i, t in enumerate(text.splitlines()[:line]) if t == f"[[{table}]]")


def test_a_torch_variant_and_a_dtk_build_are_reported_at_their_own_line_and_number() -> None:
    """Fuzz report Minor (M5): a variant at line 694 was reported as `line 678 ... #5`, the parent's line and number."""
    header = _line_of(TEXT, "[[torch]]")
    variant = _line_of(TEXT, '{ name = "cu126"', header)
    bad = "\n".join(LINES[:variant - 1] + [LINES[variant - 1].replace('cuda = "12.6"', 'cuda = "12.x"')] + LINES[variant:]) + "\n"
    nth = variant - max(i + 1 for i in range(variant) if LINES[i] == "variants = [")
    problems = _problems(bad)
    assert problems[0] == f"line {variant}: [[torch]] #{_index_of(TEXT, 'torch', variant)} variant #{nth} `cuda`: Invalid version: '12.x'"
    assert nth > 1 and variant - header > 4
    dtk = _line_of(TEXT, "[[dtk]]", _line_of(TEXT, "[[dtk]]"))  # the second [[dtk]] row: two torch builds
    build = _line_of(TEXT, '{ version = "1.13.1"', dtk)
    bad = "\n".join(LINES[:build - 1] + [LINES[build - 1].replace('python = ">=3.7,<3.11"', 'python = ">=3.7,<<3.11"')] + LINES[build:])
    assert _problems(bad + "\n") == [f"line {build}: [[dtk]] #2 torch build #2 `python`: Invalid specifier: '<<3.11'"]


def test_a_cross_reference_is_not_reported_again_for_rows_already_refused() -> None:
    """A bad [[cuda]] row is one problem, not one more for every torch build that names its version."""
    bad, header = _with_row(TEXT, "cuda", 20, 'min_driver = "', 'min_driver = "x')
    assert len(_problems(bad)) == 1


# ---------------------------------------------------------------- the messages: one line for resolve, a list for check

def test_matrix_error_is_one_line_naming_the_count_the_first_and_how_to_list_them() -> None:
    """Newcomer review 1.5: every problem crammed into one 630-character line, with a fix pointing at matrix check."""
    bad = TEXT.replace('version = "11.8"\nrelease = "11.8.0"', 'version = "eleven"\nrelease = "11.8.0"', 1)
    bad = bad.replace('vendor = "nvidia"', 'vendor = "intel"', 1)
    with pytest.raises(MatrixError) as info:
        matrix.parse(bad, "m.toml")
    err = info.value
    assert err.message == f"m.toml: 2 problems, the first: {err.lines[0]}"
    assert err.fix == "run `envkit matrix check m.toml` to list them all"
    with pytest.raises(MatrixError) as info:
        matrix.parse(TEXT.replace('vendor = "nvidia"', 'vendor = "intel"', 1), "my matrix.toml")
    assert info.value.message.startswith("my matrix.toml: line ") and "'my matrix.toml'" in info.value.fix


def test_matrix_check_lists_every_problem_on_its_own_line_and_as_json(tmp_path: Path) -> None:
    bad = tmp_path / "m.toml"
    text = TEXT.replace('version = "11.8"\nrelease = "11.8.0"', 'version = "eleven"\nrelease = "11.8.0"', 1)
    bad.write_text(text.replace('vendor = "nvidia"', 'vendor = "intel"', 1), encoding="utf-8")
    ran = run(["matrix", "check", str(bad)], "matrix loader")
    lines = ran.err.splitlines()
    assert ran.code == 3 and ran.out == ""
    assert lines[0] == f"envkit: error: {bad} is not a valid matrix: 2 problems, each below with its line (fix: correct each line named)"
    assert [re.match(r"  line \d+: \[\[", line) is not None for line in lines[1:]] == [True, True]
    ran = run(["matrix", "check", str(bad), "--json"], "matrix loader")
    doc = validate(json.loads(ran.out), "matrix-check")
    assert ran.code == 3 and doc["ok"] is False and [p["line"] for p in doc["problems"]] == [int(x.split()[1][:-1]) for x in lines[1:]]
    assert doc["error"]["exit_code"] == 3 and doc["error"]["kind"] == "matrix"
    ran = run(["resolve", "--gpu", "H100", "--matrix", str(bad)], "matrix loader")
    assert ran.code == 3 and ran.err.count("\n") == 1 and "2 problems, the first: line " in ran.err
    ran = run(["matrix", "check", "--json"], "matrix loader")
    assert ran.code == 0 and validate(json.loads(ran.out), "matrix-check")["ok"] is True


def test_a_matrix_file_that_cannot_be_read_is_bad_input_exit_2(tmp_path: Path) -> None:
    """Fuzz report Minor: `--matrix /nonexistent.toml` exited 3 with "1 invalid row(s): cannot read"."""
    with pytest.raises(InputError) as info:
        matrix.load(str(tmp_path / "none.toml"))
    assert info.value.one_line() == (f"cannot read matrix file {tmp_path / 'none.toml'}: No such file or directory "
                                     "(fix: give an existing matrix.toml, or leave --matrix out for the built-in one)")
    for path in (str(tmp_path / "none.toml"), str(tmp_path), "/dev/zero"):
        ran = run(["resolve", "--gpu", "H100", "--matrix", path], "matrix loader")
        assert ran.code == 2 and ran.err.startswith("envkit: error: ") and ran.err.count("\n") == 1, ran.err
        ran = run(["matrix", "check", path], "matrix loader")
        assert ran.code == 2 and ran.err.count("\n") == 1, ran.err


# ---------------------------------------------------------------- the cache holds plain data

def test_the_cache_is_json_of_the_toml_and_every_load_validates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Architecture review: a pickle in a user-writable ~/.cache is code execution if tampered with."""
    monkeypatch.delenv("ENVKIT_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    m = tmp_path / "m.toml"
    m.write_text(TEXT, encoding="utf-8")
    matrix.load.cache_clear()
    first = matrix.load(str(m))
    (cached,) = (tmp_path / "envkit").glob("matrix-*.json")
    assert json.loads(cached.read_text()) == tomllib.loads(TEXT)
    assert list((tmp_path / "envkit").glob("*.pickle")) == []
    matrix.load.cache_clear()
    assert matrix.load(str(m)).torch == first.torch
    doc = json.loads(cached.read_text())
    doc["gpu"][0]["arch"] = "sm_5"  # a tampered cache is validated like the file
    cached.write_text(json.dumps(doc))
    matrix.load.cache_clear()
    with pytest.raises(MatrixError, match="'sm_5' is not an arch"):
        matrix.load(str(m))
    cached.write_text("not json")
    matrix.load.cache_clear()
    assert matrix.load(str(m)).torch == first.torch
    matrix.load.cache_clear()


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
    bad = TEXT.replace(old, new, 1)
    problems = _problems(bad)
    assert any(f"`{key}`" in p and p.startswith(f"line {_line_of(bad, new)}: ") for p in problems), problems


def test_an_element_of_a_list_of_tables_is_reported_at_its_own_line() -> None:
    old = 'python = ["3.8", "3.9", "3.10", "3.11"], abi = [false, true] },'
    line = _line_of(TEXT, old)
    wheels = max(i + 1 for i in range(line) if LINES[i] == "wheels = [")
    bad = "\n".join(LINES[:line - 1] + [LINES[line - 1].replace(old, 'python = "310", abi = [false, true] },')] + LINES[line:])
    assert _problems(bad + "\n") == [f"line {line}: [[flash_attn]] #{_index_of(TEXT, 'flash_attn', line)} `wheels` #{line - wheels}: "
                                     'a Python list is like ["3.10", "3.11"]']


# ---------------------------------------------------------------- [[cuda]] toolkit_wheels (issue 15)

TOOLKIT_WHEELS = json.loads((ROOT / "data" / "sources" / "nvidia" / "toolkit-wheels.json").read_text(encoding="utf-8"))
NVVM_130 = 'name = "nvidia-nvvm", version = "13.0.88", source = "pkg:pypi/nvidia-nvvm@13.0.88'


def test_toolkit_wheels_are_those_of_the_source_extract_release_by_release() -> None:
    """Each [[cuda]] row's toolkit_wheels are exactly what data/sources/nvidia/toolkit-wheels.json read from
    that release's redistrib manifest (never a neighbour's), and the releases the torch builds use have them."""
    m = matrix.parse(TEXT)
    by_release = {c.release: c for c in m.cuda}
    extract = {r["release"]: r for r in TOOLKIT_WHEELS["releases"]}
    assert {"12.4.1", "12.6.3", "12.8.1", "12.9.1", "13.0.1", "13.1.2", "13.2.1"} <= set(extract)
    for release, row in by_release.items():
        want = extract.get(release)
        got = [(w.name, str(w.version)) for w in row.wheels]
        assert got == ([(w["name"], w["version"]) for w in want["wheels"]] if want else []), release
        for w in row.wheels:
            assert w.source.startswith(f"pkg:pypi/{w.name}@{w.version} ")
            assert f"redistrib_{release}.json" in w.source
    for r in TOOLKIT_WHEELS["releases"]:
        assert r["redistrib"].endswith(f"/redistrib_{r['release']}.json") and r["read_from"].endswith(f"redistrib_{r['release']}.json")
        for w in r["wheels"]:
            assert w["component_version"] == w["version"] and w["files"], (r["release"], w["name"])
    cuda13 = {w.name: str(w.version) for w in by_release["13.0.1"].wheels}
    assert cuda13 == {"nvidia-cuda-nvcc": "13.0.88", "nvidia-cuda-runtime": "13.0.88", "nvidia-cuda-cccl": "13.0.85",
                      "nvidia-nvvm": "13.0.88", "nvidia-cuda-crt": "13.0.88"}
    torch_cudas = {str(v.toolkit) for v in m.torch if v.platform == "cuda" and v.toolkit >= Version("12.4")}
    assert torch_cudas <= {str(c.version) for c in m.cuda if c.wheels}, torch_cudas


TOOLKIT_WHEEL_MUTATIONS = [
    # issue 15: nvcc 13.0.88 pulled nvidia-nvvm unpinned, pip took 13.5.37 and ptxas refused the PTX
    (NVVM_130, NVVM_130.replace("13.0.88", "13.5.37"), "nvidia-nvvm==13.5.37 is not of CUDA 13.0: each toolkit wheel is pinned to its release"),
    ('{ name = "nvidia-cuda-crt", version = "13.0.88"', '{ name = "nvidia-cuda-crt-cu13", version = "13.0.88"',
     "nvidia-cuda-crt-cu13 is not a CUDA 13 toolkit wheel name"),
    ('{ name = "nvidia-cuda-nvcc-cu12", version = "12.8.93", source = "pkg:pypi/nvidia-cuda-nvcc-cu12@12.8.93',
     '{ name = "nvidia-cuda-nvcc", version = "12.8.93", source = "pkg:pypi/nvidia-cuda-nvcc@12.8.93',
     "nvidia-cuda-nvcc is not a CUDA 12 toolkit wheel name (they end in -cu12)"),
    ('version = "13.0.88", source = "pkg:pypi/nvidia-cuda-runtime@13.0.88',
     'version = "13.0.88", source = "pkg:pypi/nvidia-cuda-runtime@13.0.96',
     "nvidia-cuda-runtime's source must give its PyPI release"),
    ('{ name = "nvidia-cuda-nvcc", version = "13.0.88"', '{ name = "nvidia-cuda-nvcc", version = "13.0.x"', "Invalid version: '13.0.x'"),
    ('{ name = "nvidia-cuda-nvcc", version = "13.0.88"', '{ name = "nvidia-cuda-nvcc", versio = "13.0.88"', "each toolkit wheel is {"),
    ('{ name = "nvidia-cuda-nvcc", version = "13.0.88", source = "pkg:pypi/nvidia-cuda-nvcc@13.0.88',
     '{ name = "nvidia-cuda-nvcc", version = "13.0.88", source = "pypi nvidia-cuda-nvcc 13.0.88', "source"),
    ('{ name = "nvidia-cuda-nvcc", version = "13.0.88", source = "pkg:pypi/nvidia-cuda-nvcc@13.0.88',
     '{ name = "nvidia-cuda-nvvm", version = "13.0.88", source = "pkg:pypi/nvidia-cuda-nvvm@13.0.88',
     "the toolkit wheels include nvidia-cuda-nvcc"),
]


@pytest.mark.parametrize("old,new,said", TOOLKIT_WHEEL_MUTATIONS)
def test_a_toolkit_wheel_not_pinned_to_its_release_is_refused_at_its_line(old: str, new: str, said: str) -> None:
    assert old in TEXT, old
    bad = TEXT.replace(old, new, 1)
    problems = _problems(bad)
    assert len(problems) == 1, problems
    key_line = max(i + 1 for i in range(_line_of(bad, new)) if bad.splitlines()[i] == "toolkit_wheels = [")
    assert problems[0].startswith((f"line {key_line}: [[cuda]]", f"line {_line_of(bad, new)}: [[cuda]]")), problems
    assert "`toolkit_wheels`" in problems[0] and said in problems[0], problems


def test_a_cuda_row_without_toolkit_wheels_still_loads_with_none() -> None:
    m = matrix.parse(TEXT)
    assert [c.wheels for c in m.cuda if str(c.version) == "11.8"] == [()]


def test_a_gpu_segment_is_one_of_nvidias_columns_and_for_nvidia_gpus_only() -> None:
    amd = TEXT.replace('arch = "gfx942"\n', 'arch = "gfx942"\nsegment = "data-center"\n', 1)
    assert any("`segment`: segment is the column of NVIDIA's compute capability pages" in p for p in _problems(amd))
    unknown = TEXT.replace('segment = "workstation-consumer"', 'segment = "consumer"', 1)
    assert any("`segment`: segment must be data-center, workstation-consumer or jetson" in p for p in _problems(unknown))
