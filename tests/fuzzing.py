"""The fuzz tests' shared parts: the CLI run in-process (fast enough for thousands of cases), the property every
run must hold, hostile values, and a count of the cases each area ran (printed at the end of the session by
conftest.py, so CI shows how many inputs were tried).

Hypothesis runs derandomized by default (the same cases in every CI run). ENVKIT_FUZZ_SEED=N draws new cases
from seed N, and ENVKIT_FUZZ_EXAMPLES=M runs M per test: a fresh campaign, e.g.
    ENVKIT_FUZZ_SEED=7 ENVKIT_FUZZ_EXAMPLES=3000 .venv/bin/python -m pytest -q tests -k fuzz
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from hypothesis import HealthCheck, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from envkit.cli import main as cli_main
from envkit.errors import EXIT_BUG

CASES: Counter[str] = Counter()
TRACEBACKS: Counter[str] = Counter()
DOCUMENTED_EXIT_CODES = {0, 1, 2, 3, 4, 5, 6}
SEED = os.environ.get("ENVKIT_FUZZ_SEED")


def fuzz_settings(examples: int) -> Callable[[Any], Any]:
    """Bounded for CI; a campaign raises the count and changes the seed through the environment."""
    n = int(os.environ.get("ENVKIT_FUZZ_EXAMPLES", examples))
    s = settings(max_examples=n, deadline=None, derandomize=SEED is None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
                                        HealthCheck.function_scoped_fixture])

    def apply(test: Any) -> Any:
        test = s(test)
        return hypothesis_seed(int(SEED))(test) if SEED is not None else test

    return apply


@dataclass(frozen=True)
class Ran:
    argv: tuple[str, ...]
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def in_process(argv: Sequence[str]) -> tuple[int, str, str]:
    """envkit's own entry point, in this process: exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli_main.main(list(argv))
        except SystemExit as exc:
            code = exc.code
    return (code if isinstance(code, int) else 1), out.getvalue(), err.getvalue()


def run(argv: Sequence[str], area: str) -> Ran:
    """in_process, counted under `area`, with tracebacks and internal errors tallied."""
    CASES[area] += 1
    ran = Ran(tuple(argv), *in_process(argv))
    if "Traceback (most recent call last)" in ran.err or ran.code == EXIT_BUG:
        TRACEBACKS[area] += 1
    return ran


def holds(ran: Ran, as_json: Optional[bool] = None) -> None:
    """The property of every run: a documented exit code, never a traceback or an internal error; an error is one
    line naming the problem and the fix; with --json, stdout is one JSON document whose `ok` matches the exit code."""
    where = "envkit " + " ".join(repr(a) if len(a) <= 80 else repr(a[:60]) + f"...({len(a)} chars)" for a in ran.argv)
    assert ran.code in DOCUMENTED_EXIT_CODES, f"{where}: exit {ran.code}\n{ran.err[-2000:]}"
    assert "Traceback (most recent call last)" not in ran.err, f"{where}: traceback\n{ran.err[-2000:]}"
    if ran.code >= 2:
        lines = [line for line in ran.err.splitlines() if line.startswith("envkit: error: ")]
        assert len(lines) == 1, f"{where}: exit {ran.code} without one error line:\n{ran.err[-2000:]}"
    if as_json if as_json is not None else "--json" in ran.argv:
        doc = json.loads(ran.out)
        assert isinstance(doc, dict), f"{where}: {ran.out[:200]}"
        if "ok" in doc or ran.code != 0:  # a plan (generate --json) has no verdict; every answer and error has one
            assert doc.get("ok") is (ran.code == 0), f"{where}: ok={doc.get('ok')} exit {ran.code}"


# Values users type, values other tools print, and values that break naive code.
HOSTILE = [
    "", " ", "\t", "\n3.11", "3.11\n", "12.4\r", "\x00", "\x1b[31m", "１２.４", "١٢.٤", "12.４", "²", "½",
    "[/]", "[red]x[/red]", "[/]V100", "[bold", "]", "[/usr/lib/x86_64-linux-gnu]", "$(id)", "`id`", "'", '"', "\\",
    "9" * 5000, "1" * 40 + ".0", "-1", "0", "0.0", "1e9", "nan", "inf", "12.", ".12", "12..4", "12.4.1.2.3",
    "cu124", "cu", "rocm6.2", "12", "6", "24", "3", "3.11.4", "2", ">=2.3,<2.5", "==2.4.0", "torch==2.4.0", "latest",
    "2.*", "!=2.1", "~=2.1", "===2.1", ">", "<=", ",", "*", "sm_5", "sm_0", "sm5", "sm_", "sm_99", "sm_90a", "gfx9999",
    "gfx", "gfx942", "8.0", "A100 80GB PCIe", "NVIDIA A100-SXM4-80GB", "RTX4090", "4090", "mi300x", "Z100", "a10g",
    "cuda", "rocm", "dtk", "cpu", "CUDA", "tpu", "layer_norm", "rotary", "layer_norm,rotary", "layer_norm,,", "mlp",
    "--json", "-h", "--help", "x" * 300, "é", "日本", "\u2028", "\u0085", "\ud7ff", "\U0001f600",
]


def hostile_text() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(HOSTILE), st.text(max_size=12),
                     st.text(alphabet=st.sampled_from("0123456789.+-<>=!*,~ cu sm_gfx"), max_size=10))


def only_ascii_print(text: str) -> bool:
    return bool(re.fullmatch(r"[ -~]*", text))
