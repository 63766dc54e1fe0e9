"""The stdlib PNG chart: a valid PNG whose pixels show the series, and failed levels marked in red."""
from __future__ import annotations

from pngread import decode_png

from envkit.ui.plot import BLUE, RED, Panel, line_charts, nice_max, sweep_chart


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


def test_sweep_chart_has_two_panels_and_marks_the_failed_level():
    lv = lambda c, ok, thr, ttft: {"concurrency": c, "completed": ok, "output_throughput": thr, "p99_ttft_ms": ttft}  # noqa: E731
    doc = {"model": "tiny", "engine": "http://127.0.0.1:8000",
           "levels": [lv(1, 64, 200.0, 18.0), lv(4, 64, 480.0, 50.0), lv(128, 0, 0.0, None)]}
    w, h, rows = decode_png(sweep_chart(doc))
    assert w == 2 * 560
    for x0, x1 in ((0, 560), (560, 1120)):                   # each panel: a blue series and a red cross
        assert ink(rows, BLUE, x0, x1) > 200
        assert ink(rows, RED, x0, x1) > 50


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
