"""`envkit compare`'s pure parts: the engine specs (NAME=KIND:TARGET), the single-batch figures of a list of request
results, the comparison as a value (read back from its JSON document), and its two tables as rows of text:

1. single batch: site | dtype | engine | one column per model, each cell "tokens/s / characters/s" ("18.4/29.0");
2. a concurrency sweep per engine: Batch | Latency s | Request throughput/s | Input and Output token throughput/s |
   Mean and P99 TTFT ms | Mean and P99 TPOT ms; a level that ran out of memory is the row "Out of memory".

Single batch (docs/compare.md): the concurrency-1 level, one request at a time. tokens/s = the output tokens of its
completed requests / the sum of their latencies; characters/s = the characters of their generated text / the same
sum. A latency runs from sending the request (hf: calling generate()) to its last token, prefill included.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from envkit.core.sweep import RequestResult
from envkit.errors import InputError
from envkit.model.redact import printable, redact, safe_text
from envkit.model.results import LevelResult

# KIND of NAME=KIND:TARGET -> the OpenAI endpoint it streams (None: no server, transformers in a local process)
KINDS: dict[str, Optional[str]] = {"openai": "completions", "chat": "chat", "hf": None}
HF = "hf"
SPEC_FIX = ("write --engine NAME=KIND:TARGET: vllm=openai:http://127.0.0.1:8000, fastllm=chat:http://127.0.0.1:8080 or "
            "transformers=hf:MODEL_DIR")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,39}$")
DTYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,19}$")
HF_DTYPES = ("auto", "float32", "float16", "bfloat16")  # what hf: loads the weights as (auto: float32 on CPU, bfloat16 on CUDA)
OUT_OF_MEMORY = "Out of memory"
SINGLE_BATCH_ONLY = "single batch only"
SITE_HEADER = "环境/site"
SINGLE_HEADER = (SITE_HEADER, "dtype", "engine")
SWEEP_HEADER = ("Batch", "Latency s", "Request throughput/s", "Input token throughput/s", "Output token throughput/s",
                "Mean TTFT ms", "P99 TTFT ms", "Mean TPOT ms", "P99 TPOT ms")


@dataclass(frozen=True)
class EngineSpec:
    name: str  # what the tables call it: vllm, fastllm, transformers...
    kind: str  # openai (/v1/completions), chat (/v1/chat/completions) or hf (transformers, no server)
    target: str  # the server's URL, or the model directory

    @property
    def endpoint(self) -> Optional[str]:
        return KINDS[self.kind]

    @property
    def serving(self) -> bool:
        return self.kind != HF


def parse_engine(text: str) -> EngineSpec:
    """NAME=KIND:TARGET; InputError (exit 2) naming what is wrong."""
    name, eq, rest = text.partition("=")
    kind, colon, target = rest.partition(":")
    name, kind, target = name.strip(), kind.strip(), target.strip()
    if not eq or not colon or not name or not target:
        raise InputError(f"--engine {redact(text)!r} is not NAME=KIND:TARGET", SPEC_FIX)
    if not NAME_RE.match(name):
        raise InputError(f"--engine {text!r}: the name {name!r} is not 1-40 letters, digits or ._+-", SPEC_FIX)
    if kind not in KINDS:
        raise InputError(f"--engine {text!r}: unknown kind {kind!r} (known: {', '.join(KINDS)})", SPEC_FIX)
    if kind != HF:
        if not re.match(r"^https?://[^/\s]+", target):
            raise InputError(f"--engine {redact(text)!r}: {kind}: takes the server's URL (http://HOST:PORT)", SPEC_FIX)
        if "@" in target.split("://", 1)[1].split("/", 1)[0]:
            raise InputError(f"--engine {name}={kind}:URL carries a login (user@host): it would be printed and written into the report",
                             "give the URL without it and the key with --api-key (or OPENAI_API_KEY)")
        if "?" in target or "#" in target:  # ?token=... is never sent (the paths are envkit's) and would be written
            raise InputError(f"--engine {name}={kind}:URL carries a query string or fragment (?...#...): it is not sent, and would be "
                             "printed and written into the report",
                             "give the URL as http://HOST:PORT, and a key with --api-key (or OPENAI_API_KEY)")
        if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in target):
            raise InputError(f"--engine {name}={kind}:URL holds a control character", SPEC_FIX)
    return EngineSpec(name, kind, target)


def parse_engines(texts: Sequence[str]) -> tuple[EngineSpec, ...]:
    if not texts:
        raise InputError("envkit compare needs at least one --engine NAME=KIND:TARGET", SPEC_FIX)
    specs = tuple(parse_engine(t) for t in texts)
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"--engine names {', '.join(twice)} more than once: each row of the tables needs its own name",
                         "give each --engine its own NAME, e.g. fastllm-fp16=chat:URL and fastllm-int8=chat:URL2")
    return specs


def parse_dtypes(values: Sequence[str], specs: Sequence[EngineSpec]) -> dict[str, str]:
    """--dtype DTYPE (every engine) and --dtype NAME=DTYPE (one engine, wins): engine name -> dtype ("auto" where none
    was given). A server's dtype is a label (the server chose it when it started); hf: loads the weights as it."""
    names = {s.name for s in specs}
    every, one = "auto", {}
    for v in values:
        name, eq, dtype = v.rpartition("=") if "=" in v else ("", "", v)
        if eq and name not in names:
            raise InputError(f"--dtype {v!r} names no --engine ({', '.join(sorted(names))})",
                             "write --dtype NAME=DTYPE with an engine's NAME, or --dtype DTYPE for all")
        if not DTYPE_RE.match(dtype):
            raise InputError(f"--dtype {v!r}: {dtype!r} is not a dtype", "write --dtype float16, or --dtype NAME=int8")
        if eq:
            one[name] = dtype
        else:
            every = dtype
    out = {s.name: one.get(s.name, every) for s in specs}
    for s in specs:
        if s.kind == HF and out[s.name] not in HF_DTYPES:
            raise InputError(f"--dtype {out[s.name]!r} for {s.name} (hf:): transformers loads float32, float16 or bfloat16 here",
                             f"write --dtype {s.name}=float16 (or float32, bfloat16, auto)")
    return out


def levels_with_one(levels: Sequence[int]) -> tuple[int, ...]:
    """The concurrency levels to run: the asked ones, with 1 first where it was not asked (the single batch is level 1)."""
    return tuple(levels) if 1 in levels else (1, *levels)


@dataclass(frozen=True)
class SingleBatch:
    """One request at a time: the figures of its completed requests (latencies summed)."""
    requests: int
    completed: int
    output_tokens: int
    output_chars: int
    latency_s: float
    errors: tuple[str, ...] = ()
    out_of_memory: bool = False

    @classmethod
    def of(cls, results: Sequence[RequestResult]) -> "SingleBatch":
        ok = [r for r in results if r.ok]
        failed = [r.error for r in results if not r.ok]
        return cls(len(results), len(ok), sum(r.output_tokens for r in ok), sum(r.output_chars for r in ok),
                   round(math.fsum(r.latency for r in ok), 6), tuple(sorted(set(failed))[:3]),
                   any("out of memory" in e.lower() for e in failed))

    @property
    def tokens_per_s(self) -> Optional[float]:
        return round(self.output_tokens / self.latency_s, 2) if self.completed and self.latency_s > 0 else None

    @property
    def chars_per_s(self) -> Optional[float]:
        return round(self.output_chars / self.latency_s, 2) if self.completed and self.latency_s > 0 else None

    @property
    def failed(self) -> int:
        return self.requests - self.completed

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "completed": self.completed, "failed": self.failed, "output_tokens": self.output_tokens,
                "output_chars": self.output_chars, "latency_s": self.latency_s, "tokens_per_s": self.tokens_per_s,
                "chars_per_s": self.chars_per_s, "errors": list(self.errors), "out_of_memory": self.out_of_memory}

    @classmethod
    def from_json(cls, doc: Any) -> "SingleBatch":
        d = _need(doc, "a single batch", "requests", "completed", "output_tokens", "output_chars", "latency_s")
        return cls(int(d["requests"]), int(d["completed"]), int(d["output_tokens"]), int(d["output_chars"]), float(d["latency_s"]),
                   tuple(str(e) for e in d.get("errors", ())), bool(d.get("out_of_memory", False)))


@dataclass(frozen=True)
class EngineRun:
    """One engine's part of a comparison: its single batch and (servers) its concurrency levels."""
    name: str
    kind: str
    target: str
    dtype: str
    model: str  # the served model (servers) or the model directory's name (hf:)
    single: SingleBatch
    levels: tuple[LevelResult, ...] = ()
    endpoint: Optional[str] = None
    device: Optional[str] = None  # hf: where transformers ran (cpu, cuda)

    @property
    def ok(self) -> bool:
        """Every request completed, or failed for want of memory (a finding of the sweep, not an error of the run)."""
        return (self.single.failed == 0 or self.single.out_of_memory) and all(lv.failed == 0 or lv.out_of_memory for lv in self.levels)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "target": self.target, "endpoint": self.endpoint, "dtype": self.dtype,
                "model": self.model, "device": self.device, "single_batch": self.single.to_json(),
                "levels": [lv.to_json() for lv in self.levels], "ok": self.ok}

    @classmethod
    def from_json(cls, doc: Any) -> "EngineRun":
        d = _need(doc, "a compared engine", "name", "kind", "target", "dtype", "model", "single_batch", "levels")
        if d["kind"] not in KINDS:
            raise ValueError(f"a compared engine's kind is one of {', '.join(KINDS)}")
        return cls(str(d["name"]), str(d["kind"]), str(d["target"]), str(d["dtype"]), str(d["model"]),
                   SingleBatch.from_json(d["single_batch"]),
                   tuple(LevelResult.from_json(lv) for lv in d["levels"]), d.get("endpoint"), d.get("device"))


@dataclass(frozen=True)
class Comparison:
    """Several engines on one model and the same prompts."""
    site: str
    model: str  # the model column's name
    output_len: int
    num_prompts: int
    concurrency: tuple[int, ...]
    engines: tuple[EngineRun, ...]
    input_len: Optional[int] = None  # the random workload's prompt tokens; None with a dataset
    dataset: Optional[str] = None

    @property
    def ok(self) -> bool:
        return all(e.ok for e in self.engines)

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "site": self.site, "model": self.model, "dataset": self.dataset, "input_len": self.input_len,
                "output_len": self.output_len, "num_prompts": self.num_prompts, "concurrency": list(self.concurrency),
                "engines": [e.to_json() for e in self.engines], "ok": self.ok}

    @classmethod
    def from_json(cls, doc: Any) -> "Comparison":
        d = _need(doc, "a comparison", "schema", "site", "model", "output_len", "num_prompts", "concurrency", "engines")
        if d["schema"] != 1 or not isinstance(d["engines"], list) or not isinstance(d["concurrency"], list):
            raise ValueError("a comparison has schema 1, a list of concurrency levels and a list of engines")
        return cls(str(d["site"]), str(d["model"]), int(d["output_len"]), int(d["num_prompts"]), tuple(int(c) for c in d["concurrency"]),
                   tuple(EngineRun.from_json(e) for e in d["engines"]), d.get("input_len"), d.get("dataset"))


def _need(doc: Any, what: str, *keys: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise ValueError(f"{what} is not a JSON object")
    missing = [k for k in keys if k not in doc]
    if missing:
        raise ValueError(f"{what} lacks {', '.join(missing)}")
    return doc


# ---------------------------------------------------------------- the tables

@dataclass(frozen=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def _short(error: str, limit: int = 80) -> str:
    """An error for a table cell: redacted, controls escaped, one line, then cut (model/redact.py's order)."""
    return safe_text(error, (), limit)


def single_cell(single: SingleBatch) -> str:
    """"tokens/s / characters/s" with one decimal each ("18.4/29.0"); "Out of memory", or "failed", with no figure."""
    tps, cps = single.tokens_per_s, single.chars_per_s
    if tps is None or cps is None:
        return OUT_OF_MEMORY if single.out_of_memory else "failed"
    return f"{tps:.1f}/{cps:.1f}"


def single_batch_table(comparisons: Sequence[Comparison]) -> Table:
    """One row per (site, dtype, engine), one column per model, in the order they first appear."""
    models: list[str] = []
    keys: list[tuple[str, str, str]] = []
    cells: dict[tuple[tuple[str, str, str], str], str] = {}
    for c in comparisons:
        if c.model not in models:
            models.append(c.model)
        for e in c.engines:
            key = (c.site, e.dtype, e.name)
            if key not in keys:
                keys.append(key)
            cells[(key, c.model)] = single_cell(e.single)
    rows = tuple((*key, *(cells.get((key, m), "-") for m in models)) for key in keys)
    return Table("Single batch (tokens/s / characters/s)", (*SINGLE_HEADER, *models), rows)


def _ms(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.1f}"


def level_row(lv: LevelResult) -> tuple[str, ...]:
    blank = ("",) * (len(SWEEP_HEADER) - 2)
    if lv.out_of_memory:
        return (str(lv.concurrency), OUT_OF_MEMORY, *blank)
    if not lv.completed:
        return (str(lv.concurrency), f"failed: {_short(lv.errors[0]) if lv.errors else 'every request'}", *blank)
    batch = str(lv.concurrency) + (f" ({lv.failed} of {lv.requests} failed)" if lv.failed else "")
    return (batch, f"{lv.duration_s:.2f}", f"{lv.request_throughput:.2f}", f"{lv.input_throughput:.1f}", f"{lv.output_throughput:.1f}",
            _ms(lv.mean_ttft_ms), _ms(lv.p99_ttft_ms), _ms(lv.mean_tpot_ms), _ms(lv.p99_tpot_ms))


def engine_title(e: EngineRun, model: str) -> str:
    where = f"{e.endpoint} at {e.target}" if e.kind != HF else f"transformers on {e.device or 'this host'}"
    return f"Concurrency sweep: {e.name} ({model}, {e.dtype}, {where})"


def sweep_table(e: EngineRun, model: str = "") -> Table:
    """The engine's levels, one row each; hf: one row, "single batch only"."""
    if e.kind == HF:
        rows: tuple[tuple[str, ...], ...] = (("1", SINGLE_BATCH_ONLY, *("",) * (len(SWEEP_HEADER) - 2)),)
    else:
        rows = tuple(level_row(lv) for lv in e.levels)
    return Table(engine_title(e, model or e.model), SWEEP_HEADER, rows)


def tables(comparisons: Sequence[Comparison]) -> list[Table]:
    """The single-batch table over every comparison, then each comparison's sweep table per engine."""
    return [single_batch_table(comparisons)] + [sweep_table(e, c.model) for c in comparisons for e in c.engines]


def failures(c: Comparison) -> list[str]:
    """One line per engine and failure that is not out of memory: what the tables cannot say in a cell (controls
    escaped, whatever document the errors came from)."""
    out = []
    for e in c.engines:
        if e.single.failed and not e.single.out_of_memory:
            out.append(f"{e.name}: {e.single.failed} of {e.single.requests} single-batch requests failed: "
                       f"{printable('; '.join(e.single.errors)) or 'no reason given'}")
        for lv in e.levels:
            if lv.failed and not lv.out_of_memory:
                out.append(f"{e.name}: {lv.failed} of {lv.requests} requests failed at concurrency {lv.concurrency}: "
                           f"{printable('; '.join(lv.errors)) or 'no reason given'}")
    return out
