"""Output for machines: one JSON document on stdout, in the order its object built it."""
from __future__ import annotations

import json
import sys
from typing import Any, Optional

from envkit.model.solution import Result


def print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")


def show_result(result: Result, as_json: bool) -> None:
    """A resolve result: its JSON document, or the stack (or the conflicts with their fixes) as tables."""
    if as_json:
        print_json(result.to_json())
    else:
        from envkit.ui.report import print_result  # rich only where people read the output

        print_result(result)


def outputs_ready(junit_path: Optional[str], report: Optional[str] = None) -> None:
    """Before a long run: the --junit file and the --report directory proven writable (made where missing)."""
    from envkit.ui import junit, report_dir

    if report:
        report_dir.ready(report)
    if junit_path:
        junit.prepare(junit_path)
