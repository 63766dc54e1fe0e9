"""`envkit compare`: several engines on one model and the same prompts, as the seed document's two tables."""
from __future__ import annotations

import typer

from envkit import ui
from envkit.cli.options import Args, declared


@declared("compare")
def compare(a: Args) -> None:
    """Compare engines on one model and the same prompts: single-batch tokens/s and characters/s, and each server's concurrency sweep."""
    from envkit.app import compare as use_case
    from envkit.ui import compare as show

    req = use_case.CompareRequest(tuple(a.engines), a.model_name or None, a.concurrency, a.num_prompts, a.input_len, a.output_len,
                                  a.dataset, tuple(a.dtypes), a.site, a.ready_timeout, a.seed, a.api_key or None, a.hf_python,
                                  a.trust_remote_code, a.request_timeout)
    use_case.check(req)
    for path, option in ((a.markdown, "--markdown"), (a.png, "--png")):
        if path:
            show.ready(path, option)
    with ui.progress.reporter(ui.progress.console(stderr=True)) as reporter:
        result = use_case.compare(req, reporter)
    if a.markdown:
        show.write(a.markdown, show.markdown([result]).encode(), "--markdown")
    if a.png:
        show.write(a.png, show.chart(result), "--png")
    if a.as_json:
        ui.output.print_json(result.to_json())
    else:
        show.print_comparison(result)
    if not result.ok:
        raise typer.Exit(1)
