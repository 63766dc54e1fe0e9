"""`envkit compare`: several engines on one model and the same prompts, as the seed document's two tables."""
from __future__ import annotations

from typing import Optional

import typer

from envkit import ui
from envkit.cli import options as opt


def compare(
    engines: list[str] = typer.Option([], "--engine", metavar="NAME=KIND:TARGET",
                                      help="an engine to compare (repeat): NAME=openai:URL (/v1/completions, vLLM), NAME=chat:URL "
                                           "(/v1/chat/completions, fastllm) or NAME=hf:MODEL_DIR (transformers here, single batch only)"),
    model_name: Optional[str] = typer.Option(None, "--model-name", metavar="NAME",
                                             help="the served model's name, asked of every server, and the table's model column "
                                                  "(default: the first server's first model, from /v1/models)"),
    concurrency: str = typer.Option("1,4,8", "--concurrency", help="the servers' concurrency levels (1 is always run: it is the single batch)"),
    num_prompts: int = typer.Option(16, "--num-prompts", min=1, help="requests per level, the same prompts for every engine"),
    input_len: int = typer.Option(128, "--input-len", min=1, help="prompt tokens of the random workload"),
    output_len: int = typer.Option(32, "--output-len", min=2, help="tokens generated per request"),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="JSONL prompts ({\"prompt\": ..., \"output_tokens\": N}) instead of random token ids"),
    dtypes: list[str] = typer.Option([], "--dtype", metavar="DTYPE|NAME=DTYPE",
                                     help="the dtype column (repeat; NAME=DTYPE for one engine); hf: loads the weights as it "
                                          "(float32, float16, bfloat16; default auto: float32 on CPU, bfloat16 on CUDA)"),
    site: str = typer.Option("this host", "--site", help="the 环境/site column: where this ran, e.g. \"CPU (this host)\""),
    markdown: Optional[str] = typer.Option(None, "--markdown", metavar="FILE.md", help="also write both tables as Markdown"),
    png: Optional[str] = typer.Option(None, "--png", metavar="FILE.png", help="also write a chart of both tables"),
    as_json: bool = opt.as_json("print the comparison as one JSON document"),
    ready_timeout: float = typer.Option(60.0, "--ready-timeout", min=0.0, help="seconds each server may take, in all, to answer GET /v1/models"),
    request_timeout: float = typer.Option(300.0, "--request-timeout", metavar="S", help="seconds one streamed request may take, "
                                          "connecting to its last line (keep-alives do not extend it); past it the request fails"),
    seed: int = typer.Option(0, "--seed", help="seed of the random workload"),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY", show_default=False,
                                          help="the servers' API key, sent as Authorization: Bearer; never printed or written"),
    hf_python: Optional[str] = typer.Option(None, "--hf-python", metavar="PYTHON",
                                            help="the Python with torch and transformers that runs hf: engines (default: envkit's own)"),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code", help="hf: models with their own code (Qwen-7B-Chat)"),
) -> None:
    """Compare engines on one model and the same prompts: single-batch tokens/s and characters/s, and each server's concurrency sweep."""
    from envkit.app import compare as use_case
    from envkit.ui import compare as show

    req = use_case.CompareRequest(tuple(engines), model_name or None, concurrency, num_prompts, input_len, output_len, dataset,
                                  tuple(dtypes), site, ready_timeout, seed, api_key or None,
                                  hf_python, trust_remote_code, request_timeout)
    use_case.check(req)
    for path, option in ((markdown, "--markdown"), (png, "--png")):
        if path:
            show.ready(path, option)
    with ui.progress.reporter(ui.progress.console(stderr=True)) as reporter:
        result = use_case.compare(req, reporter)
    if markdown:
        show.write(markdown, show.markdown([result]).encode(), "--markdown")
    if png:
        show.write(png, show.chart(result), "--png")
    if as_json:
        ui.output.print_json(result.to_json())
    else:
        show.print_comparison(result)
    if not result.ok:
        raise typer.Exit(1)
