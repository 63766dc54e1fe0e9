"""`envkit lock`: resolve and plan, then pin what the image installs: every wheel of every pip step
(transitive, found by pip's dry run for the image's Python and platform tags, each with its sha256 and the step
that installs it) and every base image by its image ID and registry digest. Also what the other commands do
with such a lock: `bundle --lock` downloads exactly its wheels with pip's --require-hashes; `build --locked`
refuses a bundle, a matrix or an engine that no longer matches it."""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from envkit.adapters import pip
from envkit.adapters.bundle_dir import read_manifest
from envkit.adapters.engine import ContainerEngine, Engine
from envkit.adapters.fetch import sha256_file
from envkit.app.generate import Generated, generate_pip
from envkit.app.reporter import Reporter, Silent
from envkit.config import matrix_file
from envkit.config.lockfile import LOCK_NAME, check_lock, matrix_sha256, read_lock
from envkit.config.userfile import read_json
from envkit.core.resolve import parse_query, resolve
from envkit.core.wheels import (
    download_rounds,
    dry_run_args,
    image_problems,
    lock_differences,
    locked_download_args,
    mirrored_url,
    pip_groups,
    wheel_problems,
    wheels_from_report,
)
from envkit.errors import ExternalError, InputError, PreflightError
from envkit.model.flags import ResolveFlags
from envkit.model.lock import Lock, LockedImage, LockedWheel
from envkit.model.plan import BuildPlan, Options
from envkit.model.solution import Unsolved

Say = Callable[[str], None]
PipRunner = Callable[[list[str], Say, str], None]
MAX_NAMED = 6  # problems named in one refusal; the rest counted


@dataclass(frozen=True)
class Locked:
    lock: Lock
    out: str

    def to_json(self) -> dict[str, Any]:
        """The lock document itself (lock.schema.json)."""
        return self.lock.to_json()

    def summary(self) -> str:
        steps = ", ".join(f"{step} {len(self.lock.wheels_of(step))}" for step in self.lock.steps())
        return (f"wrote {self.out}: {len(self.lock.wheels)} wheels by sha256 ({steps}), "
                f"{len(self.lock.images)} base image(s) by digest")


def local_wheels(find_links: Sequence[str]) -> dict[str, str]:
    """The wheel files of the --find-links directories: file name -> path (the first directory named wins)."""
    found: dict[str, str] = {}
    for d in find_links:
        p = Path(d)
        if p.is_dir():
            for f in sorted(p.glob("*.whl")):
                found.setdefault(f.name, str(f))
    return found


def lock_wheels(plan: BuildPlan, find_links: Sequence[str], say: Say, runner: PipRunner = pip.run) -> tuple[LockedWheel, ...]:
    """Every wheel the plan's pip steps install, step by step: pip's dry run of this step's packages with every
    earlier step's (what the image holds after it), less what the earlier steps installed already."""
    groups = pip_groups(plan)
    local = local_wheels(find_links)
    osr = plan.stages[0].os
    wheels: list[LockedWheel] = []
    with tempfile.TemporaryDirectory(prefix="envkit-lock-") as tmp:
        for k, group in enumerate(groups):
            report = Path(tmp) / f"{group.step}.json"
            args = dry_run_args(plan, osr, groups[:k + 1], local, find_links, str(report), str(Path(tmp) / "target"))
            say(f"lock: what step {group.step} installs ({' '.join(group.packages)}), for cp{plan.solution.python.major}"
                f"{plan.solution.python.minor} on {osr.name}")
            runner(args, say, "check the versions and indexes named (a vendor's wheel: --find-links DIR)")
            try:
                doc = json.loads(report.read_text())
            except (OSError, ValueError):
                raise ExternalError("pip wrote no readable installation report", "upgrade pip in envkit's own environment") from None
            wheels += wheels_from_report(doc, group, wheels)
    return tuple(wheels)


def ensure_image(engine: ContainerEngine, ref: str, say: Say) -> None:
    if engine.has_image(ref):
        return
    say(f"pulling {ref}")
    try:
        engine.pull(ref)
    except Exception as exc:
        raise ExternalError(f"base image {ref} is not on this engine and cannot be pulled ({type(exc).__name__})",
                            f"docker pull or docker load {ref} first, or name the site's copy in the site file [images]") from None


def stage_images(plan: BuildPlan) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s.image for s in plan.stages))


def lock_images(engine: ContainerEngine, plan: BuildPlan, say: Say) -> tuple[LockedImage, ...]:
    images = []
    for ref in stage_images(plan):
        ensure_image(engine, ref, say)
        digests = sorted(engine.repo_digests(ref))
        image = LockedImage(ref, engine.image_id(ref), digests[0] if digests else None)
        say(f"lock: {ref} is {image.id}" + (f" ({image.digest})" if image.digest else " (made locally: no registry digest)"))
        images.append(image)
    return tuple(images)


def _writable(out: str) -> Path:
    path = Path(out)
    if path.is_dir():
        raise InputError(f"-o {out} is a directory", "name the lock file, e.g. -o envkit.lock.json")
    if not path.parent.is_dir():
        raise InputError(f"-o {out}: the directory {path.parent} does not exist", "create it, or write the lock elsewhere")
    return path


def write_lock(path: Path, lock: Lock) -> None:
    """Whole or not at all: written beside, then renamed over the old lock."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(lock.to_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def make_lock_file(flags: ResolveFlags, *, out: str = LOCK_NAME, matrix_path: Optional[str] = None, mirror: Optional[str] = None,
                   find_links: tuple[str, ...] = (), reporter: Reporter = Silent(), engine: Optional[ContainerEngine] = None,
                   runner: PipRunner = pip.run, host_facts: Optional[str] = None) -> Union[Locked, Unsolved]:
    """Resolve, plan (against the site's mirrors when given), pin every wheel and base image, write the lock."""
    path = _writable(out)
    g = generate_pip(flags, command="lock", matrix_path=matrix_path, mirror=mirror, opts=Options(), host_facts=host_facts)
    if isinstance(g, Unsolved):
        return g
    base = Lock.from_json(json.loads(g.files[LOCK_NAME]))
    engine = engine or Engine.connect()
    wheels = lock_wheels(g.plan, find_links, reporter.say, runner)
    images = lock_images(engine, g.plan, reporter.say)
    lock = replace(base, wheels=wheels, images=images)
    write_lock(path, lock)
    return Locked(lock, str(path))


# ---- bundle --lock


def context_lock(g: Generated) -> Lock:
    """The lock a generated context carries (pinned when it replays a pinned lock)."""
    return Lock.from_json(json.loads(g.files[LOCK_NAME]))


def require_pinned(lock: Lock, path: Optional[str], command: str) -> None:
    """--locked: the lock must pin wheels and images, not only the solution."""
    if path is None:
        raise InputError(f"{command} --locked holds the build to a lock: --lock is missing",
                         "pass --lock envkit.lock.json (made by envkit lock)")
    if not lock.pinned:
        raise InputError(f"{command} --locked: {path} pins no wheels (a lock written by envkit generate)",
                         "make a pinned one with envkit lock (same resolve flags) and pass it")


def fetch_locked_wheels(plan: BuildPlan, lock: Lock, out: Path, find_links: tuple[str, ...], say: Say,
                        runner: PipRunner = pip.run) -> tuple[list[str], list[str]]:
    """Exactly the lock's wheels into out/wheelhouse, each checked against its sha256 by pip (--require-hashes)
    and again here: (downloaded, reused) paths. A wheel whose file differs is refused, named."""
    dest = out / "wheelhouse"
    dest.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in dest.glob("*")}
    local = local_wheels(find_links)
    wheels = [replace(w, url=mirrored_url(plan, w.url)) if w.url else w for w in lock.wheels]
    indexes = [w.index for w in wheels if w.index]
    osr = plan.stages[0].os
    with tempfile.TemporaryDirectory(prefix="envkit-bundle-") as tmp:
        for n, lines in enumerate(download_rounds(wheels, local)):
            requirements = Path(tmp) / f"requirements-{n}.txt"
            requirements.write_text("\n".join(lines) + "\n")
            say(f"pip download --require-hashes: {len(lines)} locked wheel(s)")
            runner(locked_download_args(plan, osr, dest, find_links, str(requirements), indexes), say,
                   "check the indexes named (a vendor's wheel: --find-links DIR); run again (downloaded wheels are kept)")
    have = {w.filename: sha256_file(dest / w.filename) if (dest / w.filename).is_file() else None for w in lock.wheels}
    problems = wheel_problems(lock, have)
    if problems:
        raise ExternalError(f"bundle: the wheelhouse does not hold the lock's wheels: {'; '.join(problems[:MAX_NAMED])}",
                            "find out where the other file came from; make the lock again (envkit lock) only if it is trusted")
    names = sorted({w.filename for w in lock.wheels})
    return [f"wheelhouse/{n}" for n in names if n not in before], [f"wheelhouse/{n}" for n in names if n in before]


def holds_lock(root: Path, lock: Lock) -> bool:
    """Whether a bundle holds every wheel of a pinned lock with its sha256 and its base images by image ID (True for
    an unpinned lock)."""
    if not lock.pinned:
        return True
    d = root / "wheelhouse"
    ids: dict[str, Optional[str]] = {i["ref"]: i.get("id") or None for i in read_manifest(root).images}
    return not wheel_problems(lock, {w.filename: sha256_file(d / w.filename) if (d / w.filename).is_file() else None
                                     for w in lock.wheels}) \
        and not image_problems(lock, [i.ref for i in lock.images], ids, "the bundle's manifest")


def check_engine_images(engine: ContainerEngine, plan: BuildPlan, lock: Lock, say: Say) -> None:
    """The engine's base images must be the lock's (bundle --lock saves them; build --mirror --locked builds on them)."""
    if not lock.images:
        return
    refs = stage_images(plan)
    ids: dict[str, Optional[str]] = {}
    for ref in refs:
        ensure_image(engine, ref, say)
        ids[ref] = engine.image_id(ref)
    problems = image_problems(lock, refs, ids, "this engine")
    if problems:
        raise ExternalError(f"the engine's base images are not the lock's: {'; '.join(problems[:MAX_NAMED])}",
                            "docker pull the locked digest (or load the locked image), or make the lock again (envkit lock)")


# ---- build --locked


def matrix_problems(lock: Lock, lock_path: str, matrix_path: Optional[str]) -> list[str]:
    """A changed matrix is a problem only when it resolves the lock's query to another solution."""
    m = matrix_file.load(matrix_path)
    if matrix_sha256(m) == lock.matrix_sha256:
        return []
    try:
        check_lock(lock_path, lock, resolve(m, parse_query(m, lock.query)))
    except InputError as exc:
        return [exc.message]
    except ValueError as exc:
        return [f"lock file {lock_path}: its query does not parse ({exc})"]
    return []


def _refuse(what: str, problems: list[str], fix: str) -> PreflightError:
    more = f"; and {len(problems) - MAX_NAMED} more" if len(problems) > MAX_NAMED else ""
    return PreflightError(f"{what}: {'; '.join(problems[:MAX_NAMED])}{more}", fix)


def check_bundle(context: Path, lock_path: Optional[str], matrix_path: Optional[str]) -> Lock:
    """build --offline --locked: the bundle must hold the lock's wheels (by sha256) and base images (by image ID),
    carry a lock that pins the same, and today's matrix must resolve the lock's query the same. Refused: exit 5."""
    own = context / LOCK_NAME
    name = lock_path or str(own)
    fix = (f"make the bundle again from the lock on the connected machine (envkit bundle --lock {lock_path or 'LOCK'}) and carry "
           "it whole; if the change is intended, make the lock again (envkit lock)")
    try:
        lock = read_lock(name)
    except InputError as exc:
        raise PreflightError(f"build --locked: {exc.message}", exc.fix) from None
    if not lock.pinned:
        raise PreflightError(f"build --locked: {name} pins no wheels (a lock written by envkit generate or an unpinned bundle)",
                             "make a lock with envkit lock, the bundle with envkit bundle --lock LOCK, and build that")
    problems: list[str] = []
    if lock_path:
        try:
            problems += lock_differences(lock, read_lock(str(own)))
        except InputError as exc:
            problems.append(exc.message)
    problems += matrix_problems(lock, name, matrix_path)
    d = context / "wheelhouse"
    problems += wheel_problems(lock, {w.filename: sha256_file(d / w.filename) if (d / w.filename).is_file() else None
                                      for w in lock.wheels})
    manifest = read_manifest(context)
    ids: dict[str, Optional[str]] = {i["ref"]: i.get("id") or None for i in manifest.images}
    try:
        plan = read_json(str(context / "envkit.plan.json"), "plan", "make the bundle again with envkit bundle")
        refs = [str(s["image"]) for s in plan["stages"]]
    except (InputError, ValueError, KeyError, TypeError):  # the preflight names a plan it cannot read
        refs = list(ids)
    problems += image_problems(lock, refs, ids, "the bundle's manifest")
    if problems:
        raise _refuse(f"build --locked: the bundle {context} no longer matches the lock {name}", problems, fix)
    return lock


def check_mirror_build(plan: BuildPlan, lock_path: Optional[str], say: Say, engine: Optional[ContainerEngine] = None) -> None:
    """build --mirror --locked: a pinned lock (its solution was checked when it was replayed; pip checks each wheel's
    sha256 in the build), and the engine's base images by image ID. Refused: exit 2."""
    lock = read_lock(lock_path) if lock_path else None
    if lock is None:
        raise InputError("build --locked holds the build to a lock: --lock is missing",
                         "pass --lock envkit.lock.json (made by envkit lock)")
    require_pinned(lock, lock_path, "build")
    try:
        check_engine_images(engine or Engine.connect(), plan, lock, say)
    except ExternalError as exc:
        if exc.message.startswith("the engine's base images are not the lock's"):
            raise InputError(f"build --locked: {exc.message}", exc.fix) from None
        raise
