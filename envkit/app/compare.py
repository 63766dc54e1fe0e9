"""`envkit compare`: several engines on one model and the same prompts, one after another, into one Comparison
(core/compare.py makes its tables; docs/compare.md defines every figure).

- openai:URL: the serving sweep's requests to /v1/completions (vLLM's server, or any OpenAI-compatible one);
- chat:URL: the same to /v1/chat/completions (fastllm's server has no /v1/completions), token ids sent as words;
- hf:DIR: transformers in a local process (envkit/inimage/compare_hf.py, run by envkit's Python or --hf-python),
  one request at a time: the single-batch figures only.

Every fault that can be seen before measuring is seen first: the specs and options (exit 2), then each server's
readiness and one warm-up request (exit 4 with the server's reason; exit 6 where the server answers but not as an
OpenAI server: app/sweep.py's ServerError), and the hf: Python's torch and transformers (exit 2), so a comparison
never fails on its third engine after minutes on the first two. Each request has --request-timeout (default 300 s)
for its whole answer; every server text is redacted and its control characters escaped (model/redact.py). Then each engine runs the
concurrency levels (1 first, always: the single batch is level 1), the servers through app/sweep.py's run_level.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from envkit.adapters import openai_http
from envkit.app import sweep
from envkit.app.reporter import Reporter, Silent
from envkit.config.userfile import MAX_DATASET_BYTES, parse_file
from envkit.core.compare import HF, Comparison, EngineRun, EngineSpec, SingleBatch, levels_with_one, parse_dtypes, parse_engines
from envkit.core.sweep import REQUEST_TIMEOUT_S, RequestResult, parse_dataset, random_requests
from envkit.errors import ExternalError, InputError
from envkit.inimage import compare_hf
from envkit.model.redact import safe_text
from envkit.model.results import LevelResult

HF_FIX = "give --hf-python PATH: a Python that has torch and transformers (e.g. .vllm-venv/bin/python)"


@dataclass(frozen=True)
class CompareRequest:
    engines: tuple[str, ...]  # NAME=KIND:TARGET
    model_name: Optional[str] = None  # the served model's name and the model column's; None: the first server's first model
    concurrency: str = "1,4,8"
    num_prompts: int = 16
    input_len: int = 128
    output_len: int = 32
    dataset: Optional[str] = None
    dtypes: tuple[str, ...] = ()  # DTYPE or NAME=DTYPE
    site: str = "this host"
    ready_timeout: float = 60.0
    seed: int = 0
    api_key: Optional[str] = field(default=None, repr=False)  # never shown, never written
    hf_python: Optional[str] = None  # the Python that runs hf: engines; None: this one
    trust_remote_code: bool = False  # hf: models with their own code (Qwen-7B-Chat)
    request_timeout: float = REQUEST_TIMEOUT_S  # seconds one server request may take, connecting to its last line


@dataclass(frozen=True)
class Checked:
    specs: tuple[EngineSpec, ...]
    levels: tuple[int, ...]
    dtypes: dict[str, str]


def check(req: CompareRequest) -> Checked:
    """The request's own faults, before any process or network: InputError, one line."""
    specs = parse_engines(req.engines)
    levels = levels_with_one(sweep.check(sweep.SweepRequest("openai:http://127.0.0.1", concurrency=req.concurrency,
                                                            ready_timeout=req.ready_timeout, request_timeout=req.request_timeout)))
    dtypes = parse_dtypes(req.dtypes, specs)
    if not req.site.strip() or "\n" in req.site or len(req.site) > 80:
        raise InputError(f"--site {req.site!r} is not a one-line label of at most 80 characters", 'write --site "CPU (this host)"')
    if req.output_len < 2 or req.num_prompts < 1 or req.input_len < 1:
        raise InputError("--output-len needs 2 tokens or more, --num-prompts and --input-len 1 or more",
                         "write --output-len 32 --num-prompts 16")
    for s in specs:
        if s.kind == HF and not Path(s.target).is_dir():
            raise InputError(f"--engine {s.name}=hf:{s.target}: no such model directory",
                             "give the local model directory (config.json, tokenizer, weights)")
    if req.hf_python and not any(s.kind == HF for s in specs):
        raise InputError("--hf-python runs the hf: engines", "add --engine NAME=hf:MODEL_DIR, or drop --hf-python")
    if req.hf_python and not Path(req.hf_python).is_file():
        raise InputError(f"--hf-python {req.hf_python}: no such file", HF_FIX)
    return Checked(specs, levels, dtypes)


def workload(req: CompareRequest) -> list[tuple[Any, int]]:
    """(prompt, output length) pairs every engine gets: the dataset's, or the seeded random token ids."""
    if req.dataset:
        return list(parse_file(req.dataset, "dataset",
                               'give a JSONL file of {"prompt": "...", "output_tokens": N} lines (vLLM\'s custom dataset format)',
                               lambda text: parse_dataset(text, req.num_prompts, req.output_len), limit=MAX_DATASET_BYTES))
    return list(random_requests(req.num_prompts, req.input_len, req.output_len, seed=req.seed))


def _python(req: CompareRequest) -> str:
    return req.hf_python or sys.executable


def _script(python: str, args: Sequence[str], stdin: str = "") -> tuple[int, Any, str]:
    """(exit code, the JSON document it printed or None, its stderr's tail)."""
    try:
        p = subprocess.run([python, compare_hf.__file__, *args], input=stdin, capture_output=True, text=True)
    except OSError as exc:
        raise InputError(f"cannot run {python}: {exc.strerror}", HF_FIX) from None
    try:
        doc = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else None
    except ValueError:
        doc = None
    return p.returncode, doc, " | ".join(p.stderr.strip().splitlines()[-3:])


def check_hf_python(python: str, reporter: Reporter = Silent()) -> None:
    rc, doc, err = _script(python, ["--check"])
    if rc != 0 or not isinstance(doc, dict) or "torch" not in doc:
        why = doc.get("error") if isinstance(doc, dict) and doc.get("error") else err or f"exit {rc}"
        raise InputError(f"hf: engines need torch and transformers, and {python} cannot import them: {why}", HF_FIX)
    reporter.say(f"hf: transformers {doc['transformers']}, torch {doc['torch']} in {python}")


def run_hf(spec: EngineSpec, requests: Sequence[tuple[Any, int]], dtype: str, req: CompareRequest,
           reporter: Reporter = Silent()) -> EngineRun:
    python = _python(req)
    reporter.say(f"{spec.name}: transformers decoding {len(requests)} prompts one at a time ({Path(spec.target).name}, {dtype})")
    rc, doc, err = _script(python, [spec.target, dtype, *(["--trust-remote-code"] if req.trust_remote_code else [])],
                           json.dumps([[p, n] for p, n in requests]))
    if not isinstance(doc, dict) or not isinstance(doc.get("requests"), list):
        why = doc.get("error") if isinstance(doc, dict) and doc.get("error") else err or f"exit {rc}"
        raise ExternalError(f"{spec.name}: transformers could not decode {spec.target} in {python}: {why}",
                            "check the model directory (config.json, tokenizer, weights) and --dtype; --trust-remote-code for models with "
                            "their own code")
    results = [RequestResult(ok=bool(r["ok"]), prompt_tokens=int(r["prompt_tokens"]), output_tokens=int(r["output_tokens"]),
                             latency=float(r["latency_s"]), error=safe_text(str(r.get("error", ""))), output_chars=int(r["output_chars"]))
               for r in doc["requests"]]
    reporter.requests_done(1, len(results), len(requests))
    return EngineRun(spec.name, spec.kind, spec.target, str(doc["dtype"]), Path(spec.target).name, SingleBatch.of(results),
                     device=str(doc["device"]))


def _requests_for(spec: EngineSpec, requests: Sequence[tuple[Any, int]]) -> list[tuple[Any, int]]:
    """A chat message is text: token ids become words once, here, before any clock runs (as the sweep does)."""
    return [(openai_http.chat_text(p), n) for p, n in requests] if spec.endpoint == "chat" else list(requests)


def run_server(spec: EngineSpec, model: str, extras: bool, requests: Sequence[tuple[Any, int]], levels: Sequence[int], dtype: str,
               req: CompareRequest, reporter: Reporter = Silent()) -> EngineRun:
    endpoint = spec.endpoint or "completions"
    reqs = _requests_for(spec, requests)
    reporter.say(f"{spec.name}: {len(reqs)} requests at concurrency {', '.join(map(str, levels))} to {endpoint} at {spec.target} "
                 f"({safe_text(model, (), 80)})")
    sweep.one_request(spec.target, model, reqs[0][0], 2, api_key=req.api_key, endpoint=endpoint, extras=extras,
                      request_timeout=req.request_timeout)  # warm again, untimed
    kept: list[RequestResult] = []
    rows = []
    for c in levels:
        def progress(done: int, total: int, c: int = c) -> None:
            reporter.requests_done(c, done, total)

        rows.append(LevelResult.from_json(sweep.run_level(spec.target, model, reqs, c, progress, math.inf, req.seed, req.api_key,
                                                          endpoint=endpoint, extras=extras, kept=kept if c == 1 else None,
                                                          request_timeout=req.request_timeout)))
    return EngineRun(spec.name, spec.kind, spec.target, dtype, model, SingleBatch.of(kept), tuple(rows), endpoint)


def compare(req: CompareRequest, reporter: Reporter = Silent()) -> Comparison:
    """Every engine on the same prompts, one after another, in the order given."""
    checked = check(req)
    requests = workload(req)
    ready: dict[str, tuple[str, bool]] = {}  # server engine -> (model, whether vLLM's extra keys are taken)
    for s in checked.specs:
        if s.kind == HF:
            if not any(x.kind == HF for x in checked.specs[:checked.specs.index(s)]):
                check_hf_python(_python(req), reporter)
            continue
        served = sweep.wait_ready(s.target, req.ready_timeout, req.api_key, reporter, model=req.model_name)
        model = sweep.choose_model(req.model_name, served, s.target, reporter)
        endpoint = s.endpoint or "completions"
        def say(message: str, name: str = s.name) -> None:
            reporter.say(f"{name}: {message}")

        extras = sweep.warm_up(s.target, model, _requests_for(s, requests[:1])[0][0], served, req.api_key, endpoint=endpoint, say=say,
                               request_timeout=req.request_timeout)
        ready[s.name] = (model, extras)
    runs = []
    for s in checked.specs:
        dtype = checked.dtypes[s.name]
        if s.kind == HF:
            runs.append(run_hf(s, requests, dtype, req, reporter))
        else:
            model, extras = ready[s.name]
            runs.append(run_server(s, model, extras, requests, checked.levels, dtype, req, reporter))
    column = req.model_name or next((m for m, _ in ready.values()), None) or runs[0].model
    return Comparison(req.site, column, req.output_len, req.num_prompts, checked.levels, tuple(runs),
                      None if req.dataset else req.input_len, req.dataset)
