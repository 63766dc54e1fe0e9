"""`envkit doctor`: collect the host's facts once (probe), optionally an image's (probe inside a
container), then judge them; `--for` asks whether a planned stack would work on this host."""
from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Optional

from .errors import ExternalError, InputError
from .judge import Finding, Host, judge
from .matrix import Matrix

FOR_FLAGS = {"--gpu": "gpu", "--driver": "driver", "--platform": "platform", "--cuda": "cuda", "--rocm": "rocm", "--dtk": "dtk",
             "--python": "python", "--torch": "torch", "--flash-attn": "flash_attn", "--vllm": "vllm", "--kernels": "kernels"}


def parse_for(text: str) -> dict[str, str]:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"--for {text!r}: {exc}", "quote it as one string: --for \"--torch 2.4 --flash-attn 2.6\"") from None
    flags: dict[str, str] = {}
    i = 0
    while i < len(words):
        w = words[i]
        key, _, value = w.partition("=")
        if key not in FOR_FLAGS:
            raise InputError(f"--for: unknown resolve flag {key!r}", f"use resolve flags: {', '.join(FOR_FLAGS)}")
        if not value:
            if i + 1 >= len(words):
                raise InputError(f"--for: {key} needs a value", f"write {key} VALUE")
            value = words[i + 1]
            i += 1
        flags[FOR_FLAGS[key]] = value
        i += 1
    return flags


def for_findings(m: Matrix, host: Host, flags: dict[str, str]) -> list[Finding]:
    """Would the asked stack work on this host's GPU and driver? The resolver answers."""
    from .resolve import parse_query, resolve

    asked = dict(flags)
    if "gpu" not in asked and host.gpus and host.gpus[0].cc:
        asked["gpu"] = f"sm_{host.gpus[0].cc.replace('.', '')}"
    if "driver" not in asked and host.driver:
        asked["driver"] = host.driver
    result = resolve(m, parse_query(m, **asked))
    shown = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in asked.items())
    if result.solution is None:
        return [Finding("error", c.rule, f"asked: {shown}", c.message, c.fix, c.source) for c in result.conflicts]
    s = result.solution.flat()
    extra = []
    nv = host.nvcc
    if flags.get("kernels") and nv and result.solution.platform == "cuda" and result.solution.toolkit is not None \
            and int(nv.split(".")[0]) != result.solution.toolkit.major:
        extra.append(Finding("warning", "kernels.nvcc-torch-cuda", f"this host's nvcc {nv}; the stack's torch is built with CUDA {result.solution.toolkit}",
                             "extensions must be compiled with the CUDA major torch was built with",
                             f"build the kernels in the CUDA {result.solution.toolkit} devel image (envkit generate {shown})",
                             "https://github.com/pytorch/pytorch/issues/136845"))
    return extra + [Finding("info", "for.works", f"asked: {shown}", "this stack resolves on this host: " + ", ".join(f"{k} {v}" for k, v in s.items()),
                    "envkit generate " + shown, result.solution.sources[0] if result.solution.sources else "doc:matrix.toml")]


def probe_image(image: str, deep: bool) -> dict:
    """Run the probe inside an image (its own Python; GPUs passed through when the engine can)."""
    from .engine import Engine

    engine = Engine.connect()
    engine.require_image(image)
    script = (Path(__file__).resolve().parent / "probe.py").read_text()
    cmd = ["python3", "-c", script] + (["--deep"] if deep else [])
    _, out, _, gpus = engine.run_with_gpus(image, cmd)
    try:
        rec = json.loads(out[out.find("{"):])
    except ValueError:
        raise ExternalError(f"the probe printed no facts inside {image}: {out.strip()[-200:]}", "the image needs python3") from None
    rec["gpus_passed"] = gpus
    return rec


def doctor(m: Matrix, record: dict, image_record: Optional[dict], flags: Optional[dict[str, str]], wants_kernels: bool) -> tuple[Host, list[Finding]]:
    host = Host.from_probe(record)
    if image_record is not None:
        inner = Host.from_probe(image_record)
        # the image brings its Python stack and toolkit; the GPUs and the driver are this host's
        host = replace(inner, driver=host.driver, cuda_driver=host.cuda_driver, nvml_error=host.nvml_error, gpus=host.gpus,
                       dcu_name=host.dcu_name, dtk=host.dtk,
                       # without the GPUs passed in, torch inside could not have seen them: that is not the image's fault
                       cuda_available=inner.cuda_available if image_record.get("gpus_passed") else None)
    if wants_kernels:
        host = replace(host, wants_kernels=True)
    findings = judge(m, host)
    if flags:
        findings += for_findings(m, host, flags)
    return host, findings
