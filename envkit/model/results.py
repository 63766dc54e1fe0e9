"""Measured results as values: the self-test's document (written by inimage/selftest.py, here or inside an
image) and the serving sweep's. Each reads its JSON document through from_json, which names what is wrong
with a document of another shape, and writes the same document back through to_json."""
from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, Optional


def _need(doc: Any, what: str, *keys: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise ValueError(f"{what} is not a JSON object")
    missing = [k for k in keys if k not in doc]
    if missing:
        raise ValueError(f"{what} lacks {', '.join(missing)}")
    return doc


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str

    @classmethod
    def from_json(cls, doc: Any) -> "CheckResult":
        d = _need(doc, "a check", "name", "ok")
        return cls(str(d["name"]), bool(d["ok"]), str(d.get("detail", "")))


@dataclass(frozen=True)
class SelftestResult:
    """The self-test's verdict and checks, typed; the decode, model and LAMBADA rows stay in `doc` as written."""
    ok: bool
    checks: tuple[CheckResult, ...]
    doc: dict[str, Any]

    @classmethod
    def from_json(cls, doc: Any) -> "SelftestResult":
        d = _need(doc, "a self-test result", "schema", "checks", "ok")
        if d["schema"] != 1 or not isinstance(d["checks"], list):
            raise ValueError("a self-test result has schema 1 and a list of checks")
        return cls(bool(d["ok"]), tuple(CheckResult.from_json(c) for c in d["checks"]), d)

    def with_check(self, check: CheckResult) -> "SelftestResult":
        doc = {**self.doc, "checks": [*self.doc["checks"], asdict(check)], "ok": self.ok and check.ok}
        return SelftestResult(self.ok and check.ok, (*self.checks, check), doc)

    def to_json(self) -> dict[str, Any]:
        return self.doc


@dataclass(frozen=True)
class LevelResult:
    """One concurrency level of a serving sweep, with vLLM's metric definitions (milliseconds, per second)."""
    concurrency: int
    requests: int
    completed: int
    failed: int
    errors: tuple[str, ...]
    out_of_memory: bool
    duration_s: float
    request_throughput: float
    input_throughput: float
    output_throughput: float
    mean_ttft_ms: Optional[float]
    p99_ttft_ms: Optional[float]
    mean_tpot_ms: Optional[float]
    p99_tpot_ms: Optional[float]
    mean_itl_ms: Optional[float]
    mean_latency_ms: Optional[float]
    # vllm bench serve's medians and the rest of its P99s; None in documents written before they were recorded
    median_ttft_ms: Optional[float] = None
    median_tpot_ms: Optional[float] = None
    median_itl_ms: Optional[float] = None
    p99_itl_ms: Optional[float] = None
    median_latency_ms: Optional[float] = None
    p99_latency_ms: Optional[float] = None

    @classmethod
    def from_json(cls, doc: Any) -> "LevelResult":
        needed = [f.name for f in fields(cls) if f.default is MISSING]
        d = _need(doc, "a sweep level", *needed)
        optional = {f.name: d[f.name] for f in fields(cls) if f.default is not MISSING and f.name in d}
        return cls(**{**{k: d[k] for k in needed}, **optional, "errors": tuple(d["errors"])})

    def to_json(self) -> dict[str, Any]:
        optional = {f.name for f in fields(self) if f.default is not MISSING}
        return {**{k: v for k, v in asdict(self).items() if k not in optional or v is not None}, "errors": list(self.errors)}


SWEEP_DEFINITIONS = (  # what each figure of a level means: vLLM's definitions (benchmarks/serve.py), as envkit measures them
    ("ttft_ms", "time to first token: from sending the request to the first streamed chunk with text, per request"),
    ("tpot_ms", "time per output token after the first: (latency - TTFT) / (output tokens - 1), per request of 2 or more tokens"),
    ("itl_ms", "inter-token latency: the time between consecutive streamed chunks, over every chunk of every request"),
    ("latency_ms", "end-to-end latency: from sending the request to its last chunk, per request"),
    ("request_throughput", "completed requests / the level's wall time"),
    ("input_throughput", "prompt tokens of completed requests / the level's wall time"),
    ("output_throughput", "output tokens of completed requests / the level's wall time"),
    ("mean / median / p99", "over the level's completed requests; p99 interpolates linearly between the closest ranks "
                            "(numpy's default), so with fewer than 100 requests it lies between the two slowest"),
)
SWEEP_ENDPOINTS = ("completions", "chat", "generate_stream")  # what a sweep's requests went to: sweep.schema.json's enum


@dataclass(frozen=True)
class SweepResult:
    engine: str
    model: str
    dataset: Optional[str]
    input_len: Optional[int]
    output_len: int
    levels: tuple[LevelResult, ...]
    request_rate: Optional[float] = None  # requests per second, inf: all at once; None: not recorded (documents before it was)
    endpoint: Optional[str] = None  # completions or chat (OpenAI), generate_stream (Triton); None: not recorded (documents before it was)
    num_prompts: Optional[int] = None  # requests per level; None: not recorded (documents before it was)
    envkit_version: Optional[str] = None  # the envkit that ran the sweep; None: not recorded
    created: Optional[str] = None  # when the sweep ended, UTC, RFC 3339; None: not recorded

    @property
    def ok(self) -> bool:
        return all(lv.failed == 0 for lv in self.levels)

    @classmethod
    def from_json(cls, doc: Any) -> "SweepResult":
        d = _need(doc, "a sweep result", "schema", "engine", "model", "levels", "output_len")
        rate = d.get("request_rate")
        if rate is not None and not (rate == "inf" or (isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0)):
            raise ValueError('a sweep result\'s request_rate is a positive number or "inf"')
        endpoint = d.get("endpoint")
        if endpoint is not None and endpoint not in SWEEP_ENDPOINTS:
            raise ValueError(f"a sweep result's endpoint is one of {', '.join(SWEEP_ENDPOINTS)}")
        return cls(d["engine"], d["model"], d.get("dataset"), d.get("input_len"), d["output_len"],
                   tuple(LevelResult.from_json(lv) for lv in d["levels"]), None if rate is None else float(rate), endpoint,
                   d.get("num_prompts"), d.get("envkit_version"), d.get("created"))

    def to_json(self) -> dict[str, Any]:
        doc = {"schema": 1, "engine": self.engine, "model": self.model, "dataset": self.dataset, "input_len": self.input_len,
               "output_len": self.output_len, "levels": [lv.to_json() for lv in self.levels], "ok": self.ok}
        if self.request_rate is not None:  # JSON has no infinity: "inf", as vllm bench serve writes it
            doc["request_rate"] = "inf" if math.isinf(self.request_rate) else self.request_rate
        if self.endpoint is not None:
            doc["endpoint"] = self.endpoint
        for key in ("num_prompts", "envkit_version", "created"):
            if getattr(self, key) is not None:
                doc[key] = getattr(self, key)
        if self.envkit_version is not None:
            doc["definitions"] = dict(SWEEP_DEFINITIONS)
        return doc
