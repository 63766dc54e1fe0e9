"""`envkit doctor`: collect the host's facts once (probe), optionally an image's (probe inside a
container), then judge them; `--for` asks whether a planned stack would work on this host."""
from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Optional

from envkit import data
from envkit.errors import ExternalError, InputError
from envkit.model.host import Finding, Host
from envkit.core.judge import judge
from envkit.model.matrix import Matrix
from envkit.core.judge_for import for_findings

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


def probe_image(image: str, deep: bool) -> dict:
    """Run the probe inside an image (its own Python; GPUs passed through when the engine can)."""
    from envkit.adapters.engine import Engine

    engine = Engine.connect()
    engine.require_image(image)
    script = (data.INIMAGE / "probe.py").read_text()
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
