"""Fuzzing matrix.toml (issue 14; fuzz report item 12 and its "Minor" section): the real file's text, mutated the
ways people and bad merges break it (a value of the wrong type, a table turned into a string, list or number, a
missing key, a bad version, a duplicated row, a reference to a row that does not exist, truncation at any point, a
byte that is not UTF-8). The property of every mutation: the loader returns a Matrix or raises MatrixError (never
another exception), and every problem names a line of the file, on one line of its own.

The text mutated is matrix.toml with every row of its tables but flash_attn and vllm, of which every 8th row is
kept (the rows keep each shape of those tables); it must load as it is, so every problem found comes from the
mutation. Parsing 400 kB of TOML 200 times would take most of a minute; this text is about 40% of that. The
mutations are cut from spans found once, with one regex each."""
from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from envkit.config import matrix_file
from envkit.errors import MatrixError
from fuzzing import CASES, TRACEBACKS, fuzz_settings

FULL = (Path(__file__).resolve().parent.parent / "matrix.toml").read_text(encoding="utf-8")
AREA = "matrix.toml mutations"


def _sampled(text: str, keep_every: int = 8) -> str:
    heads = [(m.start(), m.group(1)) for m in re.finditer(r"^\[\[(\w+)\]\]", text, re.M)]
    out, seen = [text[: heads[0][0]]], {"flash_attn": 0, "vllm": 0}
    for i, (start, table) in enumerate(heads):
        end = heads[i + 1][0] if i + 1 < len(heads) else len(text)
        if table in seen:
            seen[table] += 1
            if (seen[table] - 1) % keep_every:
                continue
        out.append(text[start:end])
    return "".join(out)


TEXT = _sampled(FULL)

# Spans of the text, each a place a mutation can hit: (start, end) of what it replaces.
KEY_VALUES = [m.span(2) for m in re.finditer(r"^([a-z_]+ = )(.+)$", TEXT, re.M)]
KEY_LINES = [m.span() for m in re.finditer(r"^[a-z_]+ = [^\[\n].*\n", TEXT, re.M)]
INLINE_VALUES = [m.span(2) for m in re.finditer(r"[{,] ([a-z_]+) = (\"[^\"\n]*\"|\[[^\]\n]*\]|true|false|-?\d+)", TEXT)]
INLINE_KEYS = [m.span() for m in re.finditer(r", [a-z_]+ = (\"[^\"\n]*\"|\[[^\]\n]*\]|true|false|-?\d+)", TEXT)]
INLINE_TABLES = [m.span() for m in re.finditer(r"\{[^{}\n]*\}", TEXT)]
HEADERS = [m.span() for m in re.finditer(r"^\[\[\w+\]\]$", TEXT, re.M)]
_STARTS = [s for s, _e in HEADERS] + [len(TEXT)]
ROWS = [(_STARTS[i], _STARTS[i + 1]) for i in range(len(HEADERS))]
VERSIONS = [m.span(1) for m in re.finditer(r"(?:version|torch|rocm|cuda|python|nvcc) = \"([^\"\n]*)\"", TEXT)]
REFERENCES = [m.span(1) for m in re.finditer(r"(?:\bos|, cuda|, rocm|^torch) = \"([^\"\n]*)\"", TEXT, re.M)]

WRONG_VALUES = ['"x"', "1", "0", "-1", "1.5", "true", "[]", "[1]", '["x"]', "[[1]]", "{}", "{ a = 1 }", "inf", "nan",
                "1979-05-27", '""', '"sm_5"', '"gfx"', '"0.0"', '"3.11"', '"==2.1.2"', '"[/]"', '"' + "x" * 400 + '"',
                "9" * 400, "[" * 40 + "]" * 40, '"\\u0000"']
BAD_VERSIONS = ["", "x", "1..2", "12.", "v", "１２.４", ">=", "==", "2.*.1", "sm_5", "9" * 60, " 1.0", "1.0\\n"]
UNKNOWN = ["ubuntu99.99", "99.9", "==9.9.9", "nope", "12.99"]
TABLE_AS = ['"x"', "1", "[1]", '["cpu"]', "[]", "true"]


def _splice(span: tuple[int, int], new: str) -> str:
    return TEXT[: span[0]] + new + TEXT[span[1]:]


def mutations() -> st.SearchStrategy[str | bytes]:
    def pick(spans: list[tuple[int, int]], values: list[str]) -> st.SearchStrategy[str]:
        return st.builds(_splice, st.sampled_from(spans), st.sampled_from(values))

    def duplicated(row: tuple[int, int], at: int) -> str:
        cut = _STARTS[at % len(HEADERS)]
        return TEXT[:cut] + TEXT[row[0]:row[1]] + TEXT[cut:]

    def bad_byte(at: int, byte: int) -> bytes:
        raw = TEXT.encode()
        at %= len(raw)
        return raw[:at] + bytes([byte]) + raw[at + 1:]

    return st.one_of(
        pick(KEY_VALUES, WRONG_VALUES),                                    # a value of the wrong type
        pick(INLINE_VALUES, WRONG_VALUES),                                 # ... inside a variant, a wheel, a DTK build
        pick(INLINE_TABLES, TABLE_AS),                                     # a table turned into a string, list, number
        pick(HEADERS, ["cuda = 1", '[cuda]', "[[gadget]]", "[[torch.variants]]", "[[dtk.torch]]"]),
        pick(KEY_LINES, [""]),                                             # a missing key
        pick(INLINE_KEYS, [""]),                                           # ... inside an inline table
        pick(VERSIONS, BAD_VERSIONS),                                      # a bad version
        pick(REFERENCES, UNKNOWN),                                         # a reference to no row
        st.builds(duplicated, st.sampled_from(ROWS), st.integers(0, 10**6)),  # a duplicated row
        st.integers(0, len(TEXT)).map(lambda n: TEXT[:n]),                 # truncated anywhere
        st.builds(bad_byte, st.integers(0, 10**7), st.integers(0x80, 0xFF)),  # a byte that is not UTF-8
    )


def test_the_sampled_text_loads_so_every_problem_is_a_mutations() -> None:
    m = matrix_file.parse(TEXT, "sampled.toml")
    assert len(m.flash_attn) >= 7 and len(m.vllm) >= 11 and len(m.torch) == len(matrix_file.parse(FULL).torch)
    assert min(map(len, (KEY_VALUES, KEY_LINES, INLINE_VALUES, INLINE_KEYS, INLINE_TABLES, HEADERS, VERSIONS,
                         REFERENCES))) >= 10


@fuzz_settings(200)
@given(mutations())
def test_a_mutated_matrix_loads_or_names_each_problem_on_its_line(source: str | bytes) -> None:
    """Fuzz report 12: never UnicodeDecodeError, AttributeError, TypeError, ValueError or RecursionError."""
    CASES[AREA] += 1
    n_lines = (source.count(b"\n") if isinstance(source, bytes) else source.count("\n")) + 1
    try:
        matrix_file.parse(source, "m.toml")
    except MatrixError as exc:
        assert exc.problems and exc.exit_code == 3
        assert "\n" not in exc.message and "\n" not in exc.fix
        assert exc.message.startswith("m.toml: ") and "line " in exc.message
        for p in exc.problems:
            assert 1 <= p.line <= n_lines, p
            assert p.text.strip() and "\n" not in p.text and len(p.text) <= 300, p
        assert [p.line for p in exc.problems] == sorted(p.line for p in exc.problems)
    except BaseException:
        TRACEBACKS[AREA] += 1
        raise
