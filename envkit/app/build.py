"""`envkit build`: preflight (pure judgement over collected facts), then a build through the Docker
SDK with the network off (offline) or on the site's mirrors, a streamed log with progress, a
summary, and a diagnosis of known failures. Nothing is tagged unless the whole build succeeded."""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from envkit.adapters.bundle_dir import MANIFEST, verify
from envkit.adapters.engine import Engine, SecretFiles
from envkit.adapters.fetch import sha256_file, sha256sums
from envkit.adapters.image_build import BuildResult, check_build_secrets, engine_resources, load_images, stream_build
from envkit.app.attest import Attested, attest, now
from envkit.app.bundle import fetch_carried, fetchable, make_bundle
from envkit.app.generate import Generated, generate, generate_pip, write_context
from envkit.app.lock import check_bundle, check_mirror_build
from envkit.app.reporter import Reporter, Silent
from envkit.app.serving import ServeRequest, prepare
from envkit.config import project_file
from envkit.config.lockfile import LOCK_NAME
from envkit.config.userfile import read_json
from envkit.core.preflight import GB, Facts, judge
from envkit.errors import ExternalError, InputError, PreflightError
from envkit.model.flags import ResolveFlags
from envkit.model.plan import COMPILED_WHEELS, BuildPlan, Options, PlanDocument, ToolkitSource
from envkit.model.project import Project, Target
from envkit.model.purl import parse_pypi
from envkit.model.solution import SolutionRecord, Unsolved

NETWORKS = ("bridge", "host")
_IMAGE_REF = re.compile(r"[a-z0-9][a-z0-9._/:-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?")


@dataclass(frozen=True)
class BuildRequest:
    """One image: offline from a bundle, or against the site's mirrors (resolve flags or a lock)."""
    flags: ResolveFlags = ResolveFlags()
    offline: bool = False
    bundle_dir: Optional[str] = None
    lock: Optional[str] = None
    mirror: Optional[str] = None
    out: str = "envkit-build"
    tag: Optional[str] = None
    network: str = "bridge"
    no_cache: bool = False
    dry_run: bool = False
    matrix_path: Optional[str] = None
    secrets: tuple[str, ...] = ()  # `--secret ID=FILE` as given: the files the Dockerfile's secret mounts read
    locked: bool = False  # refuse unless the bundle (or the engine's base images) still match the pinned lock
    toolkit: Optional[ToolkitSource] = None  # --toolkit (mirror mode); None: the site file's [cuda] toolkit, else image
    export_wheels: Optional[str] = None  # a new or empty directory for the wheels the build stage compiled
    host_facts: Optional[str] = None  # --gpu auto: a facts file recorded on the GPU host
    sbom_dir: str = "envkit-sbom"  # where the image's SBOM and provenance are written
    no_sbom: bool = False

    def sbom_out(self) -> Optional[str]:
        return None if self.no_sbom else self.sbom_dir


@dataclass(frozen=True)
class ExportedWheel:
    file: str
    sha256: str
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256, "bytes": self.bytes}


@dataclass(frozen=True)
class Built:
    image: str
    image_id: str
    size: int
    seconds: float
    network: str
    offline: bool
    steps: int
    stages: tuple[tuple[str, float], ...] = field(default=())
    exported: Optional[tuple[str, tuple[ExportedWheel, ...]]] = None  # (directory, wheels) with --export-wheels
    attested: Optional[Attested] = None  # the SBOM and provenance written beside it (None: --no-sbom)
    left: tuple[tuple[str, str, int], ...] = ()  # (stage, image ID, bytes): untagged stage images the engine kept

    @property
    def left_bytes(self) -> int:
        return sum(b for _s, _i, b in self.left)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema": 1, "ok": True, "image": self.image, "id": self.image_id, "size": self.size,
                               "seconds": round(self.seconds, 1), "network": self.network,
                               "stages": [{"name": n, "seconds": round(s, 1)} for n, s in self.stages]}
        if self.exported is not None:
            doc["exported_wheels"] = {"dir": self.exported[0], "wheels": [w.to_json() for w in self.exported[1]]}
        if self.attested is not None:
            doc["sbom"] = self.attested.to_json()
        if self.left:
            doc["left_on_engine"] = [{"stage": st, "id": i, "size": b} for st, i, b in self.left]
        return doc


@dataclass(frozen=True)
class DryRun:
    """The preflight passed; nothing was built."""
    context: str

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "ok": True, "dry_run": True, "context": self.context}


Outcome = Union[Built, DryRun, Unsolved]


def read_plan(context: Path) -> PlanDocument:
    if not (context / "Dockerfile").is_file() or not (context / "envkit.plan.json").is_file():
        raise InputError(f"{context} is not an envkit build context (no Dockerfile / envkit.plan.json)",
                         "pass the directory written by envkit bundle (--bundle) or envkit generate (-o)")
    try:
        return BuildPlan.from_json(read_json(str(context / "envkit.plan.json"), "plan",
                                             "regenerate the context (envkit generate or envkit bundle)"))
    except (ValueError, TypeError, KeyError, AttributeError):
        raise InputError(f"{context}/envkit.plan.json is not an envkit plan",
                         "regenerate the context (envkit generate or envkit bundle)") from None


def read_solution(context: Path) -> SolutionRecord:
    """The solution of the context's lock (the image's tag and labels come from it)."""
    path = str(context / LOCK_NAME)
    try:
        return SolutionRecord.from_json(read_json(path, "lock file",
                                                  "regenerate the context (envkit generate or envkit bundle)")["solution"])
    except InputError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError):
        raise InputError(f"lock file {path} holds no envkit solution",
                         "regenerate the context (envkit generate or envkit bundle)") from None


def collect(context: Path, *, offline: bool, plan: Optional[PlanDocument] = None,
            to_fetch: tuple[str, ...] = ()) -> tuple[Facts, Optional[Engine], Optional[PlanDocument]]:
    """The preflight's facts, the engine (None when it does not answer) and the context's plan (`plan`: the one just
    written there; None only when a bundle's own Dockerfile or plan is missing or unreadable: then the bundle check
    names it and refuses). `to_fetch`: carried files a mirror build's dry run would fetch (not missing, then)."""
    bundle_problems = tuple(verify(context)) if offline and (context / MANIFEST).is_file() else None
    try:
        plan = plan or read_plan(context)
    except InputError:
        if not bundle_problems:  # not a bundle (no manifest), or one whose manifest vouches for what cannot be read
            raise
        plan = None
    if plan is None:
        problems = bundle_problems or ()
    elif offline:
        if not plan.offline and not bundle_problems:  # an edited plan of a bundle is the bundle check's refusal
            raise InputError(f"{context} was generated for network builds, not offline", "make it with envkit bundle")
        problems = bundle_problems if bundle_problems is not None else tuple(verify(context))
    else:
        problems = tuple(p for c in plan.context if c.path not in to_fetch for p in carried_problem(context, c.path, c.what, c.origin))
    size = sum(p.stat().st_size for p in context.rglob("*") if p.is_file())
    engine, engine_error = None, None
    try:
        engine = Engine.connect()
    except ExternalError as exc:
        engine_error = exc.message
    disk, mem = engine_resources(engine) if engine is not None else (None, None)
    facts = Facts(str(context), problems, engine_error, disk, mem, need_disk=3 * size + 2 * GB,
                  max_jobs=None if plan is None else plan.max_jobs, nvcc_threads=(None if plan is None else plan.nvcc_threads) or 1,
                  compiles=False if plan is None else plan.compiles_kernels, offline=offline, to_fetch=to_fetch)
    return facts, engine, plan


def carried_problem(context: Path, path: str, what: str, origin: str) -> tuple[str, ...]:
    """What is wrong with one file a mirror build's context carries: missing, or not the sha256 its purl cites."""
    f = context / path
    if not f.exists():
        return (f"missing: {path} ({what}; from {origin})",)
    ref = parse_pypi(origin) if origin.startswith("pkg:pypi/") else None
    if ref is not None and ref.sha256 and f.is_file():
        have = sha256_file(f)
        if have != ref.sha256:
            return (f"{path} has sha256 {have}, not the {ref.sha256} its origin {origin} cites",)
    return ()


def prepare_carried(plan: BuildPlan, context: Path, dry_run: bool, reporter: Reporter) -> tuple[str, ...]:
    """A mirror build's carried files: fetched through the site into the context (not on a dry run: then the paths it
    would fetch, for the preflight to show)."""
    if dry_run:
        return tuple(c.path for c in plan.carried if fetchable(c) and carried_problem(context, c.path, c.what, c.origin))
    fetch_carried(plan, context, reporter.say, reporter.transfer)
    return ()


def check_options(network: str, tag: Optional[str]) -> None:
    if network not in NETWORKS:
        raise InputError(f"--network {network!r} is not bridge or host", "use --network bridge (default) or host")
    if tag is not None and not _IMAGE_REF.fullmatch(tag):
        raise InputError(f"--tag {tag!r} is not an image reference", "write name:tag in lower case, e.g. envkit/cpu:demo")


def build(req: BuildRequest, reporter: Reporter = Silent()) -> Outcome:
    check_options(req.network, req.tag)
    if req.offline:
        if not req.bundle_dir:
            raise InputError("--offline builds a bundle: --bundle DIR is missing", "pass --bundle DIR (made by envkit bundle)")
        if req.flags.any() or (req.lock and not req.locked) or req.mirror or req.toolkit:
            raise InputError("--offline --bundle builds what the bundle holds; resolve flags, --lock (but with --locked), --mirror "
                             "and --toolkit do not apply", "drop them, or make a new bundle (envkit bundle --toolkit pip)")
        if req.secrets:
            raise InputError("--offline builds reach no mirror, so they take no --secret",
                             "drop --secret: the bundle was made where the mirrors' logins are (envkit bundle reads that machine's netrc)")
        context = Path(req.bundle_dir)
        if not context.is_dir():
            raise InputError(f"bundle directory {req.bundle_dir} does not exist", "pass the directory written by envkit bundle")
        if req.locked:
            check_bundle(context, req.lock, req.matrix_path)
    else:
        if req.bundle_dir:
            raise InputError("--bundle is for offline builds", "add --offline, or drop --bundle to build against --mirror")
        if not req.mirror:
            raise InputError("a build needs --offline --bundle DIR or --mirror SITE.toml", "choose one (see envkit build --help)")
        g = generate_pip(req.flags, command="build", matrix_path=req.matrix_path, lock=req.lock, mirror=req.mirror,
                         opts=Options(toolkit=req.toolkit), host_facts=req.host_facts)
        if isinstance(g, Unsolved):
            return g
        if req.locked:  # checked before the context is written
            check_mirror_build(g.plan, req.lock, reporter.say)
        made = write_context(g, req.out)
        to_fetch = prepare_carried(g.plan, Path(req.out), req.dry_run, reporter)
        return build_context(Path(req.out), offline=False, tag=req.tag, network=req.network, no_cache=req.no_cache,
                             dry_run=req.dry_run, reporter=reporter, secrets=req.secrets, export_wheels=req.export_wheels, made=made,
                             sbom_dir=req.sbom_out(), to_fetch=to_fetch)
    return build_context(context, offline=req.offline, tag=req.tag, network=req.network, no_cache=req.no_cache,
                         dry_run=req.dry_run, reporter=reporter, secrets=req.secrets, export_wheels=req.export_wheels,
                         sbom_dir=req.sbom_out())


def load_project(project: Optional[str], target: Optional[str], all_targets: bool, req: BuildRequest) -> Project:
    """A project build's options, checked: the targets carry their own resolve flags and modes."""
    check_options(req.network, req.tag)
    if not project:
        raise InputError("--target and --all build targets of a project file: --project is missing", "pass --project envkit.toml")
    if req.flags.any() or req.lock or req.mirror or req.offline or req.bundle_dir:
        raise InputError("--project targets carry their own flags; resolve flags, --lock, --mirror, --offline and --bundle do not apply",
                         "put them in the target in the project file")
    if all_targets and req.export_wheels:
        raise InputError("--all does not take --export-wheels (one directory for many targets' wheels)",
                         "export each target's wheels on its own: --target NAME --export-wheels DIR")
    if all_targets and req.secrets:
        raise InputError("--all does not pass --secret to its targets",
                         "build each target whose site asks for a login on its own: --target NAME --secret ID=FILE")
    proj = project_file.load(project)
    if all_targets == bool(target):
        raise InputError("give exactly one of --target NAME and --all", f"targets: {', '.join(t.name for t in proj.targets)}")
    return proj


def run(req: BuildRequest, reporter: Reporter = Silent(), project: Optional[str] = None, target: Optional[str] = None) -> Outcome:
    """One image: a project's target (--project --target), or the request's own (--offline --bundle, or --mirror)."""
    if project or target:
        return build_project_target(project, target, req, reporter)
    return build(req, reporter)


def build_project_target(project: Optional[str], target: Optional[str], req: BuildRequest, reporter: Reporter = Silent()) -> Outcome:
    t = load_project(project, target, False, req).target(target or "")
    return build_target(t, network=req.network, no_cache=req.no_cache, dry_run=req.dry_run, matrix_path=req.matrix_path,
                        reporter=reporter, secrets=req.secrets, export_wheels=req.export_wheels, sbom_dir=req.sbom_out())


def build_target(t: Target, *, network: str, no_cache: bool, dry_run: bool, matrix_path: Optional[str],
                 reporter: Reporter = Silent(), secrets: tuple[str, ...] = (), export_wheels: Optional[str] = None,
                 sbom_dir: Optional[str] = "envkit-sbom") -> Outcome:
    """One project target; the options were checked where the request came in (load_project)."""
    flags = ResolveFlags.from_mapping(t.flag_dict())
    serving = None if t.serve is None else prepare(ServeRequest(t.serve.model, t.serve.name, t.serve.args, t.serve.mount), reporter.say)
    to_fetch: tuple[str, ...] = ()
    made: Optional[Generated] = None
    if t.offline:
        bundled = make_bundle(flags, out=f"envkit-bundles/{t.name}", matrix_path=matrix_path, reporter=reporter, serving=serving)
        if isinstance(bundled, Unsolved):
            return bundled
        context, made = Path(f"envkit-bundles/{t.name}"), bundled.generated
    else:
        g = generate(flags, matrix_path=matrix_path, mirror=t.mirror, opts=Options(), out=f"envkit-build/{t.name}", serving=serving,
                     say=reporter.say)
        if isinstance(g, Unsolved):
            return g
        context = Path(f"envkit-build/{t.name}")
        if isinstance(g, Generated):  # a pip stack (a container engine's context carries nothing to fetch)
            to_fetch, made = prepare_carried(g.plan, context, dry_run, reporter), g
    return build_context(context, offline=t.offline, tag=t.image, network=network, no_cache=no_cache, dry_run=dry_run,
                         reporter=reporter, secrets=secrets, export_wheels=export_wheels, sbom_dir=sbom_dir, to_fetch=to_fetch,
                         made=made)


def check_export_dir(export_wheels: Optional[str], plan: Optional[PlanDocument]) -> Optional[Path]:
    """--export-wheels: a new or empty directory, and a plan that compiles something; refused before any build step."""
    if export_wheels is None:
        return None
    dest = Path(export_wheels)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InputError(f"--export-wheels {export_wheels}: {'not a directory' if not dest.is_dir() else 'the directory is not empty'}",
                         "pass a new or empty directory: exported wheels never overwrite files")
    if plan is not None and not plan.compiles_kernels:
        raise InputError("--export-wheels: this plan compiles nothing (its wheels are all carried or downloaded as they are)",
                         "drop --export-wheels, or build a stack that compiles flash-attn or --kernels")
    return dest


def build_stage_image(engine: Engine, context: Path, built: BuildResult, *, network: str, buildargs: dict[str, str],
                      secrets: SecretFiles, reporter: Reporter) -> str:
    """The image the build stage ended with: the one the image's build just streamed where the engine kept it, else the
    build stage again (every step from the layer cache that build left)."""
    kept = built.stage_images.get("build")
    if kept and engine.has_image(kept):
        reporter.say(f"export: the build stage's {COMPILED_WHEELS} from its image {kept}, made by this build")
        return kept
    reporter.say(f"export: the build stage's {COMPILED_WHEELS} (the layer cache answers every step)")
    stage = stream_build(engine, context, network, buildargs, reporter.build_line, secrets=secrets, target="build")
    if not stage.image_id:
        raise ExternalError("the engine finished the build stage without naming its image", "run the build again")
    return stage.image_id


def export_compiled_wheels(engine: Engine, stage_image: str, dest: Path, reporter: Reporter) -> tuple[ExportedWheel, ...]:
    """The build stage's compiled wheels copied out of its image: written beside `dest` first and renamed into place whole,
    with a SHA256SUMS file."""
    staging = dest.parent / f".{dest.name}.part-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        names = engine.copy_out(stage_image, COMPILED_WHEELS, staging)
        wheels = tuple(ExportedWheel(n, sha256_file(staging / n), (staging / n).stat().st_size) for n in names if n.endswith(".whl"))
        for n in names:
            if not n.endswith(".whl"):
                (staging / n).unlink()
        (staging / "SHA256SUMS").write_text(sha256sums((w.sha256, w.file) for w in wheels))
        if dest.is_dir():
            dest.rmdir()  # empty (checked before the build)
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for w in wheels:
        reporter.say(f"export: {dest / w.file} sha256 {w.sha256}")
    return wheels


def build_context(context: Path, *, offline: bool, tag: Optional[str], network: str, no_cache: bool, dry_run: bool,
                  reporter: Reporter = Silent(), secrets: tuple[str, ...] = (),
                  export_wheels: Optional[str] = None, made: Optional[Generated] = None,
                  sbom_dir: Optional[str] = None, to_fetch: tuple[str, ...] = ()) -> Union[Built, DryRun]:
    """Preflight, then build and tag; a refused preflight raises PreflightError after reporting its checks. `made`: the
    context generate just wrote, whose plan and solution are taken as they are instead of read back from the files."""
    reporter.phase("build")
    facts, engine, plan = collect(context, offline=offline, plan=None if made is None else made.plan.document(), to_fetch=to_fetch)
    dest = check_export_dir(export_wheels, plan)
    checks = judge(facts)
    reporter.preflight(checks)
    failed = [c for c in checks if not c.ok]
    if failed:
        raise PreflightError(f"preflight refused the build: {'; '.join(c.name + ': ' + c.detail for c in failed)}",
                             failed[0].fix)
    assert engine is not None  # the preflight refuses a build without an engine
    secret_files = check_build_secrets(engine, context, secrets)  # before anything is built: the mounts, the engine, the files
    if dry_run:
        return DryRun(str(context))
    assert engine is not None and plan is not None  # the preflight refuses a build without an engine or a readable plan
    record = read_solution(context) if made is None else SolutionRecord.from_json(json.loads(made.files[LOCK_NAME])["solution"])
    ref = tag or record.default_tag()
    load_images(engine, context, reporter.say)
    buildargs = {} if offline else dict(plan.build_args)
    network_used = "none" if offline else network
    started = now()
    result = stream_build(engine, context, network_used, buildargs, reporter.build_line, nocache=no_cache, secrets=secret_files)
    if not result.image_id:
        raise ExternalError("the engine finished the build without naming the image it made", "run the build again with --no-cache")
    exported = None
    if dest is not None:
        stage_image = build_stage_image(engine, context, result, network=network_used, buildargs=buildargs, secrets=secret_files,
                                        reporter=reporter)
        exported = (str(dest), export_compiled_wheels(engine, stage_image, dest, reporter))
    attested = None
    if sbom_dir is not None:
        compiled = tuple((w.file, w.sha256) for w in exported[1]) if exported else ()
        attested = attest(engine, context, ref=ref, image_id=result.image_id, plan=plan, record=record, offline=offline,
                          network=network_used, started=started, out_dir=Path(sbom_dir), say=reporter.say, compiled=compiled)
    image_id = attested.image_id if attested else result.image_id
    engine.tag(image_id, ref)
    return Built(image=ref, image_id=image_id, size=engine.size(ref), seconds=result.seconds, network=network_used,
                 offline=offline, steps=result.steps, stages=tuple((n, s) for n, s in result.stages), exported=exported, attested=attested,
                 left=left_stage_images(engine, result, {image_id, result.image_id}))


def left_stage_images(engine: Engine, result: BuildResult, final: set[str]) -> tuple[tuple[str, str, int], ...]:
    """The earlier stages' images the engine kept untagged (Docker's legacy builder keeps each stage of a multi-stage build:
    the next build's layer cache, and disk until `docker image prune`; newcomer review 3, D19)."""
    left = []
    for stage, image in result.stage_images.items():
        if not image or any(f.startswith((image, "sha256:" + image)) for f in final) or not engine.has_image(image):
            continue
        attrs = engine.image_attrs(image)
        if not attrs.get("RepoTags"):
            left.append((stage, str(attrs.get("Id", image)), int(attrs.get("Size", 0))))
    return tuple(left)
