"""`envkit doctor`: collect the host's facts once (probe), optionally an image's (probe inside a
container), then judge them; `--for` asks whether a planned stack would work on this host."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from envkit import data
from envkit.adapters.engine import ContainerEngine, Engine
from envkit.app import containers
from envkit.app.reporter import Reporter, Silent
from envkit.config import matrix_file
from envkit.config.userfile import parse_json, read_json
from envkit.core.judge import healthy, judge
from envkit.core.judge_for import for_findings
from envkit.core.judge_image import image_gpu_findings
from envkit.core.resolve import parse_query
from envkit.errors import ExternalError, InputError
from envkit.inimage import probe
from envkit.model.container import ContainerSpec
from envkit.model.flags import ResolveFlags, parse_flag_string
from envkit.model.host import Finding, Host
from envkit.model.matrix import Matrix


def probe_spec(image: str, deep: bool, engine: ContainerEngine) -> ContainerSpec:
    engine.require_image(image)
    script = (data.INIMAGE / "probe.py").read_text()
    deep_arg = ["--deep"] if deep else []
    return containers.plan(engine, image, ["python3", "-c", script, *deep_arg], shown=("python3", "-c", "<envkit's probe.py>", *deep_arg))


def plan_image(image: str, deep: bool, engine: Optional[ContainerEngine] = None) -> containers.PlannedRun:
    engine = engine or Engine.connect()
    return containers.PlannedRun("envkit doctor --image", probe_spec(image, deep, engine), containers.expects(engine, image))


def probe_image(image: str, deep: bool, engine: Optional[ContainerEngine] = None) -> dict[str, Any]:
    """Run the probe inside an image (its own Python), with the GPUs its solution names passed in (core/devices.py)."""
    engine = engine or Engine.connect()
    spec = probe_spec(image, deep, engine)
    _, out, _, gpus, refusal = engine.run_container(spec)
    try:
        rec = parse_json(out[out.find("{"):], "the probe's output in", image)
        if not isinstance(rec, dict):
            raise ValueError("not a JSON object")
    except ValueError:
        raise ExternalError(f"the probe printed no facts inside {image}: {out.strip()[-200:]}", "the image needs python3") from None
    rec["gpus_passed"] = gpus
    rec["gpu_access"] = {**spec.gpu.to_json(), "refusal": refusal or None, "expects": containers.expects(engine, image)}
    return rec


def host_of(record: dict, image_record: Optional[dict], flags: Optional[ResolveFlags]) -> Host:
    """The host the checks judge; a fact of the wrong type is an InputError naming its key."""
    host = Host.from_json(record)
    if image_record is not None:
        inner = Host.from_json(image_record)
        # the image brings its Python stack and toolkit; the GPUs and the driver are this host's
        host = replace(inner, driver=host.driver, cuda_driver=host.cuda_driver, nvml_error=host.nvml_error, gpus=host.gpus,
                       dcu_name=host.dcu_name, dtk=host.dtk,
                       # without the GPUs passed in, torch inside could not have seen them: that is not the image's fault
                       cuda_available=inner.cuda_available if image_record.get("gpus_passed") else None)
    if flags is not None and flags.kernels:
        host = replace(host, wants_kernels=True)
    return host


def doctor(m: Matrix, record: dict, image_record: Optional[dict], flags: Optional[ResolveFlags]) -> tuple[Host, list[Finding]]:
    host = host_of(record, image_record, flags)
    findings = judge(m, host)
    if flags is not None and flags.any():
        findings += for_findings(m, host, flags)
    return host, findings


@dataclass(frozen=True)
class DoctorOutcome:
    host: Host
    findings: tuple[Finding, ...]
    facts: dict[str, Any]
    image_facts: Optional[dict[str, Any]]
    image: Optional[str]

    @property
    def ok(self) -> bool:
        return healthy(list(self.findings))

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "ok": self.ok, "findings": [f.to_json() for f in self.findings], "facts": self.facts,
                "image_facts": self.image_facts}


_FACTS_FIX = "give a JSON file written by envkit doctor --json"
_FOR_FIX = 'give resolve flags that envkit resolve accepts, e.g. --for "--gpu H100 --torch 2.4"'


def read_record(path: str) -> dict[str, Any]:
    """A recorded facts file as written: doctor --json's whole document, or the probe's facts alone."""
    record = read_json(path, "facts file", _FACTS_FIX)
    if not isinstance(record, dict):
        raise InputError(f"cannot read facts file {path}: not a JSON object", _FACTS_FIX)
    return record


def read_facts(path: str) -> dict[str, Any]:
    """A recorded facts file: doctor --json's whole document, or its `facts`."""
    record = read_record(path)
    facts = record.get("facts", record)
    if not isinstance(facts, dict):
        raise InputError(f"cannot read facts file {path}: its facts are not a JSON object", _FACTS_FIX)
    return facts


def for_flags(m: Matrix, for_: Optional[str]) -> Optional[ResolveFlags]:
    """--for's flags, checked on their own before any fact is read, so that a bad flag is blamed on --for
    (fuzz report, area 3: it was blamed on the --facts file)."""
    if not for_:
        return None
    flags = parse_flag_string(for_)
    try:
        parse_query(m, flags)
    except InputError as exc:
        raise InputError(f"--for {for_!r}: {exc.message}", exc.fix or _FOR_FIX) from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"--for {for_!r}: {exc}", _FOR_FIX) from None
    return flags


def run(*, matrix_path: Optional[str] = None, deep: bool = False, image: Optional[str] = None, for_: Optional[str] = None,
        facts_file: Optional[str] = None, reporter: Reporter = Silent()) -> DoctorOutcome:
    m = matrix_file.load(matrix_path)
    flags = for_flags(m, for_)
    if deep and not facts_file:  # newcomer review 1.7: nothing was shown while the subprocess ran
        reporter.say(f"doctor --deep: importing torch and the compiled modules in a subprocess{' inside ' + image if image else ''}"
                     f" (at most {probe.DEEP_TIMEOUT:.0f} s) ...")
    record = read_facts(facts_file) if facts_file else probe.collect(deep_mode=deep and not image)
    image_record = probe_image(image, deep) if image else None
    whose = f"facts file {facts_file}" if facts_file else "this host's probed facts"
    try:
        host = host_of(record, image_record, flags)
    except InputError as exc:  # a key of the wrong type, named by Host.from_json
        if image_record is not None and facts_file is None:
            whose = f"the probed facts (this host's or image {image}'s)"
        raise InputError(f"{whose}: {exc.message}", exc.fix) from None
    try:
        findings = judge(m, host) + image_gpu_findings(image or "", image_record)
    except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError) as exc:
        if not facts_file:
            raise
        raise InputError(f"facts file {facts_file} holds a value of an unexpected type ({type(exc).__name__}: {exc})",
                         "give a JSON file written by envkit doctor --json, unedited") from None
    if flags is not None and flags.any():
        try:
            findings += for_findings(m, host, flags)
        except InputError as exc:
            raise InputError(f"--for {for_!r} on {whose}: {exc.message}", exc.fix or _FOR_FIX) from None
        except (ValueError, TypeError) as exc:
            raise InputError(f"--for {for_!r} on {whose}: {exc}", _FOR_FIX) from None
    return DoctorOutcome(host, tuple(findings), record, image_record, image)
