"""`envkit build --all`: every target of a project, each in its own `envkit build --target` process,
at most N at once, with a live table of their progress and a summary."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from envkit.model.project import Project, Target

LOG_DIR = Path("envkit-build") / "logs"


class _Board:
    def __init__(self, targets: tuple[Target, ...]) -> None:
        self.lock = threading.Lock()
        self.rows = {t.name: {"state": "waiting", "step": "", "start": None, "seconds": 0.0} for t in targets}

    def update(self, name: str, **kw) -> None:
        with self.lock:
            self.rows[name].update(kw)

    def table(self):
        from rich.table import Table

        t = Table(title="envkit build --all", title_justify="left", header_style="bold")
        for col in ("target", "state", "progress", "time"):
            t.add_column(col, overflow="fold")
        with self.lock:
            for name, r in self.rows.items():
                secs = (time.monotonic() - r["start"]) if r["state"] == "building" and r["start"] else r["seconds"]
                style = {"done": "green", "failed": "bold red", "building": "cyan"}.get(r["state"], "")
                t.add_row(name, f"[{style}]{r['state']}[/]" if style else r["state"], r["step"], f"{secs:.0f} s" if secs else "")
        return t


def _run_one(project: Project, t: Target, network: str, no_cache: bool, board: _Board, dry_run: bool = False,
             matrix_path: str | None = None) -> dict:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"{t.name}.log"
    cmd = [sys.executable, "-m", "envkit", "build", "--project", project.path, "--target", t.name, "--network", network, "--json"]
    if no_cache:
        cmd.append("--no-cache")
    if dry_run:
        cmd.append("--dry-run")
    if matrix_path:
        cmd += ["--matrix", matrix_path]
    board.update(t.name, state="building", start=time.monotonic(), step="starting")
    start = time.monotonic()
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        out_chunks: list[str] = []
        reader = threading.Thread(target=lambda: out_chunks.append(proc.stdout.read() if proc.stdout else ""), daemon=True)
        reader.start()
        assert proc.stderr is not None
        for line in proc.stderr:
            log.write(line)
            m = re.search(r"(?:\[\d+/\d+\] )?Step (\d+/\d+)", line, re.I) or re.search(r"compiled (\d+/\d+)", line)
            if m:
                board.update(t.name, step=("step " if "tep" in m.group(0) else "nvcc ") + m.group(1))
            elif line.startswith("bundle:"):
                board.update(t.name, step="bundling")
        rc = proc.wait()
        reader.join()
    seconds = time.monotonic() - start
    out = "".join(out_chunks)
    doc = None
    try:
        doc = json.loads(out[out.find("{"):]) if "{" in out else None
    except ValueError:
        doc = None
    ok = rc == 0 and (dry_run or bool(doc and doc.get("ok")))
    last = ""
    if not ok:
        tail = [l.strip() for l in log_path.read_text().splitlines() if l.strip()]
        last = next((l for l in reversed(tail) if l.startswith("envkit: error:")), tail[-1] if tail else f"exit {rc}")
    board.update(t.name, state="done" if ok else "failed", seconds=seconds, step="" if ok else last[:120])
    return {"name": t.name, "ok": ok, "exit": rc, "image": t.image, "seconds": round(seconds, 1), "log": str(log_path),
            "size": (doc or {}).get("size"), "error": last or None}


def build_all(project: Project, *, jobs: int, network: str, no_cache: bool, console_json: bool, dry_run: bool = False,
              matrix_path: str | None = None) -> list[dict]:
    from rich.console import Console
    from rich.live import Live

    console = Console(stderr=console_json)
    board = _Board(project.targets)
    with Live(board.table(), console=console, refresh_per_second=2, transient=False) as live:
        stop = threading.Event()

        def refresh() -> None:
            while not stop.wait(0.5):
                live.update(board.table())

        ticker = threading.Thread(target=refresh, daemon=True)
        ticker.start()
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(lambda t: _run_one(project, t, network, no_cache, board, dry_run, matrix_path), project.targets))
        stop.set()
        live.update(board.table())
    ok = sum(r["ok"] for r in results)
    console.print(f"{ok}/{len(results)} targets built; logs in {LOG_DIR}/")
    return results
