"""The sweep's PNG chart, both ways (newcomer review, audit of plot.py): through matplotlib (the optional extra
`plot`, installed by scripts/test.sh, so that path really runs here) and the standard library's fallback.
Each is a valid PNG whose pixels show the series, with failed levels marked in red."""
from __future__ import annotations

import sys

import pytest
from pngread import decode_png

from envkit.ui.plot import BLUE, RED, Panel, line_charts, matplotlib_chart, nice_max, stdlib_chart, sweep_chart

lv = lambda c, ok, thr, ttft: {"concurrency": c, "completed": ok, "output_throughput": thr, "p99_ttft_ms": ttft}  # noqa: E731
DOC = {"model": "tiny", "engine": "http://127.0.0.1:8000",
       "levels": [lv(1, 64, 200.0, 18.0), lv(4, 64, 480.0, 50.0), lv(16, 64, 900.0, 120.0), lv(128, 0, 0.0, None)]}


def ink(rows, color, x0, x1) -> int:
    return sum(1 for row in rows for px in row[x0:x1] if px == color)


def test_nice_axis_tops():
    assert [nice_max(v) for v in (0, 0.7, 1, 3, 7, 180, 1268, 4001)] == [1.0, 1.0, 1, 5, 10, 200, 2000, 5000]


def test_rising_series_climbs_left_to_right():
    w, h, rows = decode_png(line_charts([Panel("tok/s", [1, 2, 4, 8], [10, 20, 40, 80])], "concurrency", width=400, height=300))
    assert (w, h) == (400, 300 + 10)
    blue_rows = [y for y, row in enumerate(rows) if any(px == BLUE for px in row)]
    first_blue_col = lambda y: next(x for x, px in enumerate(rows[y]) if px == BLUE)  # noqa: E731
    top, bottom = min(blue_rows), max(blue_rows)
    assert first_blue_col(top) > first_blue_col(bottom)      # the highest point is the rightmost
    assert not ink(rows, RED, 0, w)


def _rises_left_to_right(rows, x0, x1) -> bool:
    blue = [(y, x) for y, row in enumerate(rows) for x, px in enumerate(row[x0:x1], x0) if px == BLUE]
    top, bottom = min(blue), max(blue)
    return top[1] > bottom[1]                                # the highest point is right of the lowest


@pytest.mark.parametrize("draw", [stdlib_chart, matplotlib_chart], ids=["stdlib", "matplotlib"])
def test_sweep_chart_has_two_panels_and_marks_the_failed_level(draw):
    w, h, rows = decode_png(draw(DOC))
    assert w == 2 * 560 and h > 400
    for x0, x1 in ((0, 560), (560, 1120)):                   # each panel: a rising blue series and a red cross
        assert ink(rows, BLUE, x0, x1) > 200
        assert ink(rows, RED, x0, x1) > 50
        assert _rises_left_to_right(rows, x0, x1)


def test_matplotlib_draws_when_installed_and_the_stdlib_when_not(monkeypatch):
    """The matplotlib path really runs matplotlib (scripts/test.sh installs the plot extra); hidden, the fallback draws."""
    assert sweep_chart(DOC) == matplotlib_chart(DOC) != stdlib_chart(DOC)
    assert "matplotlib.backends.backend_agg" in sys.modules
    monkeypatch.setitem(sys.modules, "matplotlib", None)    # as where the extra is not installed: ImportError
    assert sweep_chart(DOC) == stdlib_chart(DOC)
    with pytest.raises(ImportError):
        matplotlib_chart(DOC)


def test_selftest_tables_show_decode_and_lambada_rows():
    from rich.console import Console

    from envkit.ui.report import print_selftest

    doc = {"checks": [{"name": "torch imports", "ok": True, "detail": "2.11.0+cu130"}], "decode": None, "device": "cuda",
           "models": [{"shape": "llama-2-7b", "engine": "hf-static", "weights_gb": 13.477, "tokens_per_s": 157.2, "ttft_ms": 20.4,
                       "tpot_ms": 6.36, "roofline_tokens_per_s": 356.2, "pct_of_roofline": 44.1}],
           "lambada": [{"model": "/m", "engine": "hf", "examples": 20, "correct": 10, "accuracy": 0.5, "seconds": 0.1}]}
    console = Console(record=True, width=200)
    print_selftest(doc, None, console)
    text = console.export_text()
    assert "157.2" in text and "44.1 % of 356.2" in text and "50.0%" in text
