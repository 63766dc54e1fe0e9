"""`envkit compare`'s output: its two tables (core/compare.py's rows) as rich tables, as Markdown, and as a PNG
(matplotlib where installed, else ui/plot.py's standard-library canvas), and the files written whole.

The PNG has three panels: single-batch tokens/s per engine (bars), and output tokens/s and P99 TTFT against the
concurrency, one line per server engine; a level that ran out of memory (or where every request failed) is a red
cross at the axis.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from envkit.core.compare import HF, Comparison, Table, failures, single_cell, tables
from envkit.errors import InputError
from envkit.model.redact import printable
from envkit.ui import plot
from envkit.ui.settings import console as _console

COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (148, 103, 189), (140, 86, 75), (227, 119, 194), (127, 127, 127)]


# ---------------------------------------------------------------- rich and Markdown

def rich_table(t: Table) -> RichTable:
    out = RichTable(title=Text(printable(t.title)), title_justify="left", header_style="bold", pad_edge=False)
    for i, col in enumerate(t.header):
        out.add_column(Text(printable(col)), justify="left" if i == 0 or not t.rows else "right" if _numeric(t, i) else "left",
                       overflow="fold")
    for row in t.rows:
        out.add_row(*(Text(printable(cell)) for cell in row))
    return out


def _numeric(t: Table, i: int) -> bool:
    return any(cell[:1].isdigit() for row in t.rows for cell in row[i:i + 1])


def print_comparison(c: Comparison, console: Optional[Console] = None) -> None:
    out = console or _console()
    workload = f"prompts from {c.dataset}" if c.dataset else f"{c.input_len} random prompt tokens"
    out.print(Text(printable(f"{c.model} on {c.site}: {c.num_prompts} requests a level, {workload}, {c.output_len} output tokens each")))
    for t in tables([c]):
        out.print(rich_table(t))
    for line in failures(c):
        out.print(Text(printable(line), style="red"), overflow="fold")


def _md_cell(cell: str) -> str:
    return printable(cell).replace("|", "\\|").replace("\n", " ")


def markdown_table(t: Table) -> str:
    lines = [f"| {' | '.join(map(_md_cell, t.header))} |", "|" + "|".join("---" for _ in t.header) + "|"]
    lines += [f"| {' | '.join(map(_md_cell, row))} |" for row in t.rows]
    return "\n".join(lines) + "\n"


def markdown(comparisons: Sequence[Comparison]) -> str:
    """Both tables: the single batch over every comparison, then a sweep table per engine; failures under them."""
    parts = []
    for t in tables(comparisons):
        parts.append(f"### {t.title}\n\n{markdown_table(t)}")
    notes = [line for c in comparisons for line in failures(c)]
    if notes:
        parts.append("\n".join(f"- {n}" for n in notes) + "\n")
    head = []
    for c in comparisons:
        workload = f"prompts from `{c.dataset}`" if c.dataset else f"{c.input_len} random prompt tokens"
        head.append(f"{c.model} on {c.site}: {c.num_prompts} requests a level, {workload}, {c.output_len} output tokens each; "
                    f"concurrency {', '.join(map(str, c.concurrency))}.")
    return printable("\n".join(head) + "\n\n" + "\n".join(parts))  # a server's model id, controls and all, escaped


# ---------------------------------------------------------------- the PNG

def _series(c: Comparison) -> tuple[list[str], list[Optional[float]], list[int],
                                    list[tuple[str, list[Optional[float]], list[Optional[float]]]]]:
    names = [e.name for e in c.engines]
    single = [e.single.tokens_per_s for e in c.engines]
    xs = list(c.concurrency)
    lines = []
    for e in c.engines:
        if e.kind == HF:
            continue
        by = {lv.concurrency: lv for lv in e.levels}
        thr = [by[x].output_throughput if x in by and by[x].completed and not by[x].out_of_memory else None for x in xs]
        ttft = [by[x].p99_ttft_ms if x in by and by[x].completed and not by[x].out_of_memory else None for x in xs]
        lines.append((e.name, thr, ttft))
    return names, single, xs, lines


def _axes(cv: plot.Canvas, ox: int, oy: int, w: int, h: int, title: str, ymax: float) -> tuple[int, int, int, int]:
    left, right, top, bottom = ox + 90, ox + w - 20, oy + 40, oy + h - 60
    cv.text((left + right) // 2, oy + 8, title, anchor="center")
    for t in range(6):
        py = bottom - round((bottom - top) * t / 5)
        cv.line(left, py, right, py, plot.GREY)
        cv.text(left - 8, py - 7, plot._fmt(ymax * t / 5), anchor="right")
    cv.line(left, top, left, bottom, plot.BLACK, 2)
    cv.line(left, bottom, right, bottom, plot.BLACK, 2)
    return left, right, top, bottom


def _cross(cv: plot.Canvas, x: int, y: int) -> None:
    cv.line(x - 8, y - 8, x + 8, y + 8, plot.RED, 3)
    cv.line(x - 8, y + 8, x + 8, y - 8, plot.RED, 3)


def stdlib_chart(c: Comparison, width: int = 560, height: int = 440) -> bytes:
    names, single, xs, lines = _series(c)
    top = 40
    cv = plot.Canvas(width * 3, height + top + 24 * max(1, len(names)))
    cv.text(cv.w // 2, 12, f"{c.model} on {c.site}", anchor="center")
    # bars: single batch tokens/s
    ymax = plot.nice_max(max([v for v in single if v] or [1.0]))
    left, right, t, bottom = _axes(cv, 0, top, width, height, "single batch tokens/s", ymax)
    n = len(names)
    for k, (name, v) in enumerate(zip(names, single)):
        cx = left + round((right - left) * (k + 0.5) / n)
        half = max(6, (right - left) // (3 * n))
        if v is None:
            _cross(cv, cx, bottom)
        else:
            cv.rect(cx - half, bottom - round((bottom - t) * v / ymax), cx + half, bottom - 1, COLORS[k % len(COLORS)])
        cv.text(cx, bottom + 12, str(k + 1), anchor="center")
    cv.text((left + right) // 2, bottom + 36, "engine (see legend)", anchor="center")
    for p, title in enumerate(("output tokens/s", "P99 TTFT (ms)")):
        values = [v for line in lines for v in (line[1] if p == 0 else line[2]) if v is not None]
        ymax = plot.nice_max(max(values or [1.0]))
        left, right, t, bottom = _axes(cv, (p + 1) * width, top, width, height, title, ymax)
        px = [left + round((right - left) * (k + 0.5) / max(1, len(xs))) for k in range(len(xs))]
        for x, xv in zip(px, xs):
            cv.line(x, bottom, x, bottom + 6, plot.BLACK)
            cv.text(x, bottom + 12, str(xv), anchor="center")
        cv.text((left + right) // 2, bottom + 36, "concurrency", anchor="center")
        for line in lines:
            color = COLORS[names.index(line[0]) % len(COLORS)]
            ys = line[1] if p == 0 else line[2]
            pts = [(x, None if v is None else bottom - round((bottom - t) * v / ymax)) for x, v in zip(px, ys)]
            for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
                if y0 is not None and y1 is not None:
                    cv.line(x0, y0, x1, y1, color, 3)
            for x, y in pts:
                if y is None:
                    _cross(cv, x, bottom)
                else:
                    cv.rect(x - 4, y - 4, x + 4, y + 4, color)
    for k, name in enumerate(names):  # the legend, under the panels
        y = top + height + 6 + 24 * k
        cv.rect(100, y, 120, y + 14, COLORS[k % len(COLORS)])
        cv.text(132, y, f"{k + 1} {name}", anchor="left")
    return cv.png()


def _mpl_text(text: str) -> str:
    """A server's or a user's text as matplotlib shows it as written: controls escaped, `$` not starting mathtext (a
    model id such as a$\\frac{$ would fail the whole chart)."""
    return printable(text).replace("$", r"\$")


def matplotlib_chart(c: Comparison, width: int = 1500, height: int = 480) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names, single, xs, lines = _series(c)
    hexes = ["#%02x%02x%02x" % rgb for rgb in COLORS]
    fig = Figure(figsize=(width / 100, height / 100), dpi=100, facecolor="white")
    canvas = FigureCanvasAgg(fig)
    fig.suptitle(_mpl_text(f"{c.model} on {c.site}"))
    ax: Any = fig.add_subplot(1, 3, 1)
    for k, (name, v) in enumerate(zip(names, single)):
        if v is None:
            ax.plot([k], [0], linestyle="none", color="#d62728", marker="X", markersize=14, clip_on=False)
        else:
            ax.bar([k], [v], color=hexes[k % len(hexes)])
            ax.annotate(single_cell(c.engines[k].single), (k, v), ha="center", va="bottom")
    ax.set_xticks(range(len(names)), names)
    ax.set_title("single batch tokens/s (labels: tokens/s / characters/s)")
    ax.set_ylim(bottom=0)
    ax.grid(True, axis="y", color="#dddddd")
    for p, title in enumerate(("output tokens/s", "P99 TTFT (ms)")):
        ax = fig.add_subplot(1, 3, p + 2)
        for name, thr, ttft in lines:
            ys = thr if p == 0 else ttft
            color = hexes[names.index(name) % len(hexes)]
            ok = [(x, y) for x, y in zip(xs, ys) if y is not None]
            if ok:
                ax.plot([q[0] for q in ok], [q[1] for q in ok], color=color, linewidth=2.5, marker="o", markersize=7, label=name)
            bad = [x for x, y in zip(xs, ys) if y is None]
            if bad:
                ax.plot(bad, [0] * len(bad), linestyle="none", color="#d62728", marker="X", markersize=14, clip_on=False, zorder=3,
                        label=f"{name}: out of memory / failed")
        if len(set(xs)) > 1 and min(xs) > 0:
            ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(xs)), [str(v) for v in sorted(set(xs))])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_xlabel("concurrency")
        ax.set_title(title)
        ax.grid(True, color="#dddddd")
        if lines:
            ax.legend(loc="best")
    fig.tight_layout()
    canvas.draw()
    w, h = canvas.get_width_height()
    rgba = bytes(canvas.buffer_rgba())
    rgb = bytearray(w * h * 3)
    for k in range(3):
        rgb[k::3] = rgba[k::4]
    return plot.encode_png(w, h, bytes(rgb))


def chart(c: Comparison) -> bytes:
    return matplotlib_chart(c) if plot.has_matplotlib() else stdlib_chart(c)


# ---------------------------------------------------------------- files

def ready(path: Optional[str], option: str) -> None:
    """Before the run: the file's directory exists (made) and can be written; not a directory itself (nothing without a path)."""
    if not path:
        return
    out = Path(path)
    try:
        if out.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        out.parent.mkdir(parents=True, exist_ok=True)
        probe = out.parent / f".{out.name}.envkit-write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"cannot write {option} {path}: {exc.strerror}", f"give a writable file path to {option}") from None


def write(path: str, data: bytes, option: str) -> None:
    """The file whole: a .part renamed over it."""
    out = Path(path)
    part = out.parent / f".{out.name}.part"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(data)
        os.replace(part, out)
    except OSError as exc:
        raise InputError(f"cannot write {option} {path}: {exc.strerror}", f"give a writable file path to {option}") from None



def write_outputs(result: Comparison, markdown_path: Optional[str], png_path: Optional[str], as_json: bool) -> None:
    """The comparison's files (--markdown, --png), then its JSON or its tables."""
    from envkit.ui import output

    if markdown_path:
        write(markdown_path, markdown([result]).encode(), "--markdown")
    if png_path:
        write(png_path, chart(result), "--png")
    if as_json:
        output.print_json(result.to_json())
    else:
        print_comparison(result)
