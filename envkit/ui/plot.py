"""The sweep's PNG chart: through matplotlib where it is installed (this distribution's optional extra `plot`), else
a small line chart in the standard library (zlib + struct), so `--report` always has its picture.

    png = sweep_chart(doc)                       # matplotlib when it imports, else the fallback
    png = line_charts([Panel("output tokens/s", xs, ys), ...], x_label="concurrency")   # the fallback itself

Either way each panel plots one series against the concurrency levels; a failed point (a level where every
request failed, e.g. out of memory) is a red cross at the axis. The fallback's text uses a built-in 5x7 bitmap
font (upper case, digits, a few symbols); matplotlib's has a legend, a log2 concurrency axis and real type.
Both PNGs are 8-bit RGB written by `encode_png` (matplotlib draws, the encoder here writes).
"""
from __future__ import annotations

import importlib
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Optional, Sequence

WHITE, BLACK, GREY, BLUE, RED = (255, 255, 255), (0, 0, 0), (200, 200, 200), (31, 119, 180), (214, 39, 40)

# 5x7 glyphs, one string of 7 rows of 5 bits each (1 = ink).
_FONT = {
    "0": "01110 10001 10011 10101 11001 10001 01110", "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111", "3": "11110 00001 00001 01110 00001 00001 11110",
    "4": "00010 00110 01010 10010 11111 00010 00010", "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110", "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110", "9": "01110 10001 10001 01111 00001 00010 01100",
    "A": "01110 10001 10001 11111 10001 10001 10001", "B": "11110 10001 10001 11110 10001 10001 11110",
    "C": "01110 10001 10000 10000 10000 10001 01110", "D": "11100 10010 10001 10001 10001 10010 11100",
    "E": "11111 10000 10000 11110 10000 10000 11111", "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111", "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110", "J": "00111 00010 00010 00010 00010 10010 01100",
    "K": "10001 10010 10100 11000 10100 10010 10001", "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001", "N": "10001 10001 11001 10101 10011 10001 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110", "P": "11110 10001 10001 11110 10000 10000 10000",
    "Q": "01110 10001 10001 10001 10101 10010 01101", "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110", "T": "11111 00100 00100 00100 00100 00100 00100",
    "U": "10001 10001 10001 10001 10001 10001 01110", "V": "10001 10001 10001 10001 10001 01010 00100",
    "W": "10001 10001 10001 10101 10101 10101 01010", "X": "10001 10001 01010 00100 01010 10001 10001",
    "Y": "10001 10001 10001 01010 00100 00100 00100", "Z": "11111 00001 00010 00100 01000 10000 11111",
    " ": "00000 00000 00000 00000 00000 00000 00000", ".": "00000 00000 00000 00000 00000 01100 01100",
    ",": "00000 00000 00000 00000 01100 00100 01000", ":": "00000 01100 01100 00000 01100 01100 00000",
    "-": "00000 00000 00000 11111 00000 00000 00000", "/": "00001 00010 00010 00100 01000 01000 10000",
    "(": "00010 00100 01000 01000 01000 00100 00010", ")": "01000 00100 00010 00010 00010 00100 01000",
    "%": "11000 11001 00010 00100 01000 10011 00011", "=": "00000 00000 11111 00000 11111 00000 00000",
    "+": "00000 00100 00100 11111 00100 00100 00000", "_": "00000 00000 00000 00000 00000 00000 11111",
    "?": "01110 10001 00001 00010 00100 00000 00100",
}


@dataclass(frozen=True)
class Panel:
    title: str
    x: Sequence[int]
    y: Sequence[Optional[float]]  # None where the level produced no figure (every request failed)


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.w, self.h = width, height
        self.px = bytearray(WHITE * (width * height))

    def dot(self, x: int, y: int, color: tuple) -> None:
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i:i + 3] = bytes(color)

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: tuple) -> None:
        for y in range(max(0, y0), min(self.h, y1 + 1)):
            i = 3 * (y * self.w + max(0, x0))
            n = min(self.w - 1, x1) - max(0, x0) + 1
            if n > 0:
                self.px[i:i + 3 * n] = bytes(color) * n

    def line(self, x0: int, y0: int, x1: int, y1: int, color: tuple, width: int = 1) -> None:
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        r = width // 2
        while True:
            self.rect(x0 - r, y0 - r, x0 + r, y0 + r, color) if r else self.dot(x0, y0, color)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x: int, y: int, s: str, color: tuple = BLACK, scale: int = 2, anchor: str = "left") -> None:
        width = text_width(s, scale)
        x -= {"left": 0, "center": width // 2, "right": width}[anchor]
        for ch in s.upper():
            rows = _FONT.get(ch, _FONT["?"]).split()
            for ry, row in enumerate(rows):
                for rx, bit in enumerate(row):
                    if bit == "1":
                        self.rect(x + rx * scale, y + ry * scale, x + rx * scale + scale - 1, y + ry * scale + scale - 1, color)
            x += 6 * scale

    def png(self) -> bytes:
        return encode_png(self.w, self.h, bytes(self.px))


def encode_png(width: int, height: int, rgb: bytes) -> bytes:
    """An 8-bit RGB PNG (filter 0 on every row) of `rgb`, width x height pixels of three bytes, row by row."""
    raw = b"".join(b"\x00" + rgb[3 * y * width:3 * (y + 1) * width] for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def text_width(s: str, scale: int = 2) -> int:
    return len(s) * 6 * scale - scale if s else 0


def nice_max(v: float) -> float:
    """The smallest 1, 2, 2.5 or 5 x 10^k at or above v (the top of a y axis)."""
    if v <= 0:
        return 1.0
    k = 1.0
    while k * 10 < v:
        k *= 10
    while k > v:
        k /= 10
    for m in (1, 2, 2.5, 5, 10):
        if m * k >= v:
            return m * k
    return 10 * k


def _fmt(v: float) -> str:
    return f"{v:.0f}" if v >= 10 or v == int(v) else f"{v:.1f}"


def line_charts(panels: Sequence[Panel], x_label: str, title: str = "", width: int = 560, height: int = 420) -> bytes:
    """Panels side by side, each a line over categorical x positions; PNG bytes."""
    top = 40 if title else 10
    c = Canvas(width * len(panels), height + top)
    if title:
        c.text(c.w // 2, 12, title, anchor="center")
    for i, p in enumerate(panels):
        _panel(c, i * width, top, width, height, p, x_label)
    return c.png()


def _panel(c: Canvas, ox: int, oy: int, w: int, h: int, p: Panel, x_label: str) -> None:
    left, right, top, bottom = ox + 90, ox + w - 20, oy + 40, oy + h - 60
    c.text((left + right) // 2, oy + 8, p.title, anchor="center")
    ys = [v for v in p.y if v is not None]
    ymax = nice_max(max(ys) if ys else 1.0)
    for t in range(6):
        yv = ymax * t / 5
        py = bottom - round((bottom - top) * t / 5)
        c.line(left, py, right, py, GREY)
        c.text(left - 8, py - 7, _fmt(yv), anchor="right")
    c.line(left, top, left, bottom, BLACK, 2)
    c.line(left, bottom, right, bottom, BLACK, 2)
    n = len(p.x)
    xs = [left + round((right - left) * (k + 0.5) / n) for k in range(n)]
    for px, xv in zip(xs, p.x):
        c.line(px, bottom, px, bottom + 6, BLACK)
        c.text(px, bottom + 12, str(xv), anchor="center")
    c.text((left + right) // 2, bottom + 36, x_label, anchor="center")
    pts = [(px, None if v is None else bottom - round((bottom - top) * v / ymax)) for px, v in zip(xs, p.y)]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if y0 is not None and y1 is not None:
            c.line(x0, y0, x1, y1, BLUE, 3)
    for px, mark in pts:
        if mark is None:
            c.line(px - 8, bottom - 8, px + 8, bottom + 8, RED, 3)
            c.line(px - 8, bottom + 8, px + 8, bottom - 8, RED, 3)
            c.text(px, bottom - 28, "FAILED", RED, anchor="center")
        else:
            c.rect(px - 4, mark - 4, px + 4, mark + 4, BLUE)


def _series(doc: dict) -> tuple[list[int], list[Optional[float]], list[Optional[float]], str]:
    levels = doc["levels"]
    x = [lv["concurrency"] for lv in levels]
    thr = [lv["output_throughput"] if lv["completed"] else None for lv in levels]
    ttft = [lv["p99_ttft_ms"] if lv["completed"] else None for lv in levels]
    return x, thr, ttft, sweep_title(doc)


def sweep_title(doc: dict) -> str:
    """The model, the server and the workload of a sweep document (also one written before the workload was recorded)."""
    workload = [f"prompts from {doc['dataset']}" if doc.get("dataset") else
                f"input {doc['input_len']}" if doc.get("input_len") else "", f"output {doc.get('output_len', '?')} tokens"]
    if doc.get("num_prompts"):
        workload.append(f"{doc['num_prompts']} requests per level")
    rate = doc.get("request_rate")
    if rate not in (None, "inf"):
        workload.append(f"{rate:g} requests/s")
    return f"{doc.get('model', '')} at {doc.get('engine', '')} ({', '.join(w for w in workload if w)})"


def stdlib_chart(doc: dict) -> bytes:
    """Output throughput and P99 TTFT against concurrency, drawn here: the fallback without matplotlib."""
    x, thr, ttft, title = _series(doc)
    return line_charts([Panel("output tokens/s", x, thr), Panel("P99 TTFT (ms)", x, ttft)], "concurrency", title)


def matplotlib_chart(doc: dict, width: int = 1120, height: int = 460) -> bytes:
    """The same two panels through matplotlib (its Agg canvas, no pyplot state); ImportError without it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    x, thr, ttft, title = _series(doc)
    dpi = 100
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi, facecolor="white")
    canvas = FigureCanvasAgg(fig)
    fig.suptitle(title, parse_math=False)  # a served model id may hold $...$: shown as written
    blue, red = ("#%02x%02x%02x" % c for c in (BLUE, RED))
    for k, (name, ys) in enumerate((("output tokens/s", thr), ("P99 TTFT (ms)", ttft))):
        ax: Any = fig.add_subplot(1, 2, k + 1)
        ok = [(xv, yv) for xv, yv in zip(x, ys) if yv is not None]
        if ok:
            ax.plot([p[0] for p in ok], [p[1] for p in ok], color=blue, linewidth=2.5, marker="o", markersize=7)
        failed = [xv for xv, yv in zip(x, ys) if yv is None]
        if failed:
            ax.plot(failed, [0] * len(failed), linestyle="none", color=red, marker="X", markersize=14, clip_on=False, zorder=3,
                    label="every request failed")
            ax.legend(loc="best")
        if len(set(x)) > 1 and min(x) > 0:
            ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(x)), [str(v) for v in sorted(set(x))])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_xlabel("concurrency")
        ax.set_title(name)
        ax.grid(True, color="#dddddd")
        ax.margins(x=0.08)
    fig.tight_layout()
    canvas.draw()
    w, h = canvas.get_width_height()
    rgba = bytes(canvas.buffer_rgba())
    rgb = bytearray(w * h * 3)
    for c in range(3):
        rgb[c::3] = rgba[c::4]
    return encode_png(w, h, bytes(rgb))


def has_matplotlib() -> bool:
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        return False
    return True


def sweep_chart(doc: dict) -> bytes:
    """Output throughput and P99 TTFT against concurrency, from a serving sweep document: matplotlib's chart where
    the `plot` extra is installed, else the standard library's."""
    return matplotlib_chart(doc) if has_matplotlib() else stdlib_chart(doc)
