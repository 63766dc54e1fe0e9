"""pip, run as a subprocess of this Python: each line of its output handed to a callback (the bundle's
reporter, or a target's log under build --all), and a failure as one ExternalError naming pip's first error."""
from __future__ import annotations

import subprocess
import sys
from typing import Callable

from envkit.errors import ExternalError


def run(args: list[str], on_line: Callable[[str], None], fix: str) -> None:
    lines: list[str] = []
    with subprocess.Popen([sys.executable, "-m", "pip", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:  # closes pip's pipe and waits for it, also when on_line raises
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.strip():
                lines.append(line)
                on_line(line)
    if proc.returncode != 0:
        first_error = next((ln for ln in lines if ln.startswith("ERROR:")), lines[-1] if lines else "pip failed")
        raise ExternalError(f"pip {args[0]} failed: {first_error[:300]}", fix)
