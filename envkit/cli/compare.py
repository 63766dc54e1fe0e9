"""`envkit compare`: several engines on one model and the same prompts, as the seed document's two tables."""
from __future__ import annotations

import typer

from envkit.cli.options import Args, declared, reporting, request


@declared("compare")
def compare(a: Args) -> None:
    """Compare engines on one model and the same prompts: single-batch tokens/s and characters/s, and each server's concurrency sweep."""
    from envkit.app import compare as use_case
    from envkit.ui import compare as show

    req = request(use_case.CompareRequest, a, model_name=a.model_name or None, api_key=a.api_key or None)
    use_case.check(req)
    show.ready(a.markdown, "--markdown")
    show.ready(a.png, "--png")
    result = reporting(lambda r: use_case.compare(req, r))
    show.write_outputs(result, a.markdown, a.png, a.as_json)
    if not result.ok:
        raise typer.Exit(1)
