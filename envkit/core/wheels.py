"""Pure wheel and index logic for bundles and locks: platform tags, pip's arguments (download, and the dry run
that finds every wheel a pip step installs), pip's installation report read into locked wheels, the
requirement lines of a pinned step, the comparison of a bundle with its lock, simple-index lookups."""
from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Mapping, Optional, Sequence
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import canonicalize_name

from envkit.errors import ExternalError, InputError
from envkit.model.lock import STEP, Lock, LockedWheel, url_problem
from envkit.model.matrix import OsRelease
from envkit.model.plan import WHEELHOUSE, BuildPlan, PipStep


def platform_tags(glibc: tuple[int, int], arch: str = "x86_64") -> list[str]:
    """Wheel platform tags a target with this glibc accepts, newest first (PEP 600 + legacy aliases)."""
    major, minor = glibc
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{legacy[m]}_{arch}" for m in (17, 12, 5) if m <= minor]
    return tags + [f"linux_{arch}"]


def _target_args(plan: BuildPlan, osr: OsRelease) -> list[str]:
    """pip's arguments for the image's Python and platform tags (wheels only) and the site's index."""
    py = plan.solution.python
    cp = f"cp{py.major}{py.minor}"
    args = ["--only-binary=:all:", "--python-version", f"{py.major}.{py.minor}",
            "--implementation", "cp", "--abi", cp, "--abi", "abi3", "--abi", "none", "--progress-bar", "off",
            "--retries", "2", "--timeout", "60"]
    for tag in platform_tags((osr.glibc.major, osr.glibc.minor), plan.solution.machine):
        args += ["--platform", tag]
    site = plan.site
    if site.pip_index:
        args += ["--index-url", site.pip_index]
    for host in site.trusted_hosts:
        args += ["--trusted-host", host]
    return args


def pip_download_args(plan: BuildPlan, osr: OsRelease, dest: Path, find_links: tuple[str, ...]) -> list[str]:
    site = plan.site
    args = ["download", "--dest", str(dest), *_target_args(plan, osr)]
    for index in dict.fromkeys(i for _, i in plan.wheel_sources if i):
        args += ["--extra-index-url", (site.rewrite(index) if site.given else None) or index]
    for fl in find_links:
        args += ["--find-links", fl]
    reqs = []
    for req, _ in plan.wheel_sources:
        if "://" in req and site.given:
            mirrored = site.rewrite(req)
            if mirrored is None:
                raise InputError(f"bundle: {req} is not mirrored by {site.path}", "add a [rewrite] for its host to the site file")
            req = mirrored
        reqs.append(req)
    return args + reqs


@dataclass(frozen=True)
class PipGroup:
    """One pip step of the build stage: what it asks for, and the extra index it reads."""
    step: str
    packages: tuple[str, ...]
    index: Optional[str]


def pip_groups(plan: BuildPlan) -> tuple[PipGroup, ...]:
    """The plan's pip steps in install order: what a lock pins wheels for."""
    return tuple(PipGroup(st.id, st.payload.packages, st.payload.extra_index_url)
                 for stage in plan.stages for st in stage.steps if isinstance(st.payload, PipStep))


def wheel_file(ref: str) -> Optional[str]:
    """The wheel file a path or URL names; None for a requirement by name."""
    if "/" not in ref:
        return None
    name = unquote(PurePosixPath(urlsplit(ref).path).name)
    return name if name.endswith(".whl") else None


def dry_run_args(plan: BuildPlan, osr: OsRelease, groups: Sequence[PipGroup], local: Mapping[str, str],
                 find_links: Sequence[str], report: str, target: str) -> list[str]:
    """`pip install --dry-run --report` of the packages of `groups` together, for the image's Python and platform
    tags: every wheel the last of these steps leaves installed. `local`: the carried wheels the steps name by
    path (a vendor's torch), file name -> where that file lies on this machine."""
    args = ["install", "--dry-run", "--ignore-installed", "--report", report, "--target", target, *_target_args(plan, osr)]
    for index in dict.fromkeys(g.index for g in groups if g.index):
        args += ["--extra-index-url", index]
    for fl in find_links:
        args += ["--find-links", fl]
    reqs = []
    for g in groups:
        for package in g.packages:
            if package.startswith(WHEELHOUSE + "/"):
                name = package.rsplit("/", 1)[1]
                if name not in local:
                    raise InputError(f"lock: {name} (step {g.step}) is on no public index",
                                     "pass --find-links DIR holding it (from the vendor's wheel site)")
                package = local[name]
            reqs.append(package)
    return args + reqs


_BAD_REPORT = "upgrade pip in envkit's own environment (its installation report, pip >= 22.2)"


def _report_item(item: Any) -> tuple[str, str, str, Optional[str], bool]:
    """(name, version, url, sha256, direct) of one `install` entry of pip's installation report."""
    meta, info = item["metadata"], item["download_info"]
    archive = info.get("archive_info") or {}
    hashes = archive.get("hashes") or {}
    sha = hashes.get("sha256")
    if sha is None and str(archive.get("hash", "")).startswith("sha256="):
        sha = str(archive["hash"]).partition("=")[2]
    return str(meta["name"]), str(meta["version"]), str(info["url"]), None if sha is None else str(sha), bool(item.get("is_direct"))


def wheels_from_report(report: Any, group: PipGroup, earlier: Sequence[LockedWheel]) -> tuple[LockedWheel, ...]:
    """The wheels pip's installation report (of this step and the ones before it) installs, less those the earlier
    steps install already: what `group`'s step adds, each with its sha256, sorted by name."""
    try:
        items = [_report_item(item) for item in report["install"]]
    except (KeyError, TypeError, AttributeError):
        raise ExternalError("pip's installation report is not the format envkit reads", _BAD_REPORT) from None
    seen = {(canonicalize_name(w.name), w.filename, w.sha256) for w in earlier}
    added: list[LockedWheel] = []
    for name, version, url, sha, direct in items:
        filename = unquote(PurePosixPath(urlsplit(url).path).name)
        if not filename.endswith(".whl"):
            raise ExternalError(f"lock: pip would install {filename} for step {group.step}, which is not a wheel",
                                "a locked image installs wheels only: find a wheel of it for the image's platform")
        if sha is None or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ExternalError(f"lock: pip's report gives no sha256 for {filename}", _BAD_REPORT)
        key = (canonicalize_name(name), filename, sha)
        if key in seen:
            continue
        seen.add(key)
        remote = urlsplit(url).scheme in ("http", "https")
        added.append(LockedWheel(name=name, version=version, filename=filename, sha256=sha, step=group.step, index=group.index,
                                 url=url.partition("#")[0] if direct and remote else None))
    return tuple(sorted(added, key=lambda w: (canonicalize_name(w.name), w.filename)))


def hash_line(ref: str, sha256: str) -> str:
    return f"{ref} --hash=sha256:{sha256}"


_REQUIREMENT_PATH = re.compile(r"/[A-Za-z0-9._+!/-]+")  # a wheel the step names by its path (a carried vendor wheel)
_LOCK_FIX = "make the lock again with envkit lock for this stack (and site)"


def _named_ref(ref: str) -> str:
    """A path or URL a pip step names a wheel by, checked before it is a requirement line: an absolute path of plain
    characters, or an http(s) URL without a login, query string or fragment (model/lock.py url_problem)."""
    if not (_REQUIREMENT_PATH.fullmatch(ref) and ".." not in ref.split("/")):
        url = re.sub(r"#sha256=[0-9a-f]{64}$", "", ref)  # a wheel's own sha256 may follow its URL (PEP 503); nothing else
        why = url_problem(url) if url.startswith(("http://", "https://")) else "is neither an absolute path nor an http(s) URL"
        if why:
            raise InputError(f"the plan names a wheel by a reference that {why}", "check the matrix row that names it")
    return ref


def step_requirements(step: str, wheels: Sequence[LockedWheel], packages: Sequence[str], offline: bool) -> str:
    """The requirements file a pinned pip step installs with --require-hashes --no-deps: offline each wheel by its
    path in the carried wheelhouse; against an index by name==version, or by the path or URL the step names it by.
    Every value of a line is checked for its grammar first (the step id, each wheel's name, version, file name and
    sha256: LockedWheel.problem, and the step's path or URL), so no line can carry a second requirement or an option."""
    if not STEP.fullmatch(step):
        raise InputError(f"the lock names a pip step {step!r} that is not a step id", _LOCK_FIX)
    for w in wheels:
        why = w.problem()
        if why:
            raise InputError(f"the lock's {why}", _LOCK_FIX)
        if w.step != step:
            raise InputError(f"the lock's wheel {w.filename} belongs to step {w.step}, not {step}", _LOCK_FIX)
    named = {f: _named_ref(p) for p in packages if (f := wheel_file(p))}
    lines = [f"# envkit lock: every wheel step `{step}` installs, each by its sha256 (pip install --require-hashes --no-deps)"]
    for w in wheels:
        ref = f"{WHEELHOUSE}/{w.filename}" if offline else named.get(w.filename) or f"{w.name}=={w.version}"
        lines.append(hash_line(ref, w.sha256))
    return "\n".join(lines) + "\n"


def download_rounds(wheels: Iterable[LockedWheel], local: Mapping[str, str]) -> list[list[str]]:
    """The requirement lines `pip download --require-hashes --no-deps` fetches a lock's wheels with, in as few
    rounds as pip takes them (a name pinned at two versions, by two steps, needs two)."""
    rounds: list[tuple[set[str], list[str]]] = []
    done: set[str] = set()
    for w in wheels:
        if w.filename in done:
            continue
        done.add(w.filename)
        ref = local.get(w.filename) or w.url or f"{w.name}=={w.version}"
        name = canonicalize_name(w.name)
        slot = next((r for r in rounds if name not in r[0]), None)
        if slot is None:
            slot = (set(), [])
            rounds.append(slot)
        slot[0].add(name)
        slot[1].append(hash_line(ref, w.sha256))
    return [lines for _, lines in rounds]


def _short(digest: str) -> str:
    return digest[:23] if digest.startswith("sha256:") else digest[:16]


def wheel_problems(lock: Lock, wheelhouse: Mapping[str, Optional[str]]) -> list[str]:
    """Each locked wheel the carried wheelhouse lacks or holds with another sha256 (file name -> its sha256, None:
    missing)."""
    problems = []
    for w in lock.wheels:
        have = wheelhouse.get(w.filename)
        if have is None:
            problems.append(f"missing: wheelhouse/{w.filename} ({w.name} {w.version}, locked for step {w.step})")
        elif have != w.sha256:
            problems.append(f"wheelhouse/{w.filename} has sha256 {_short(have)}..., the lock pins {_short(w.sha256)}...")
    return problems


def image_problems(lock: Lock, refs: Sequence[str], ids: Mapping[str, Optional[str]], where: str) -> list[str]:
    """Each base image of the plan (`refs`) the lock does not pin, or whose image ID (`ids`, None: absent) is not
    the lock's; `where` names what the IDs came from (the bundle's manifest, this engine)."""
    problems = []
    for ref in dict.fromkeys(refs):
        locked = lock.image(ref)
        have = ids.get(ref)
        if locked is None:
            problems.append(f"base image {ref} is not in the lock (made for other images or another site)")
        elif have is None:
            problems.append(f"base image {ref} is not in {where}")
        elif have != locked.id:
            problems.append(f"base image {ref} is {_short(have)}... in {where}, the lock pins {_short(locked.id)}..."
                            + (f" ({locked.digest})" if locked.digest else ""))
    return problems


def lock_differences(lock: Lock, carried: Lock) -> list[str]:
    """How a context's own lock differs from the lock it is held to: solution, wheels, images."""
    problems = []
    if carried.solution.to_json() != lock.solution.to_json():
        problems.append("its envkit.lock.json holds another solution")
    ours, theirs = {(w.filename, w.sha256) for w in lock.wheels}, {(w.filename, w.sha256) for w in carried.wheels}
    if ours != theirs:
        extra = sorted(f for f, _ in theirs - ours)
        lacking = sorted(f for f, _ in ours - theirs)
        problems.append("its envkit.lock.json pins other wheels" + (f" (not in the lock: {', '.join(extra[:3])})" if extra else "")
                        + (f" (lacks: {', '.join(lacking[:3])})" if lacking else ""))
    return problems


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: Optional[str] = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self.links.append((data.strip(), self._href))
            self._href = None


def find_in_simple_index(html: str, base: str, filename: str) -> tuple[str, Optional[str]]:
    """(url, sha256) of a file in a PEP 503 project page."""
    p = _Links()
    p.feed(html)
    for name, href in p.links:
        if name == filename:
            url, _, frag = urljoin(base, href).partition("#")
            m = re.match(r"sha256=([0-9a-f]{64})", frag)
            return url, m.group(1) if m else None
    raise ExternalError(f"{filename} is not on the index page {base}", "check the version, or mirror the file on the site index")


def pinned_requirements(plan: BuildPlan, wheels: Sequence[LockedWheel]) -> dict[str, str]:
    """A pinned lock's requirements file for each pip step of the plan (step id -> text); {} for an unpinned lock.
    A lock that pins wheels for other steps than the plan's was made for another plan: refused."""
    if not wheels:
        return {}
    groups = pip_groups(plan)
    steps = {g.step for g in groups}
    locked = {w.step for w in wheels}
    lacking, foreign = [g.step for g in groups if g.step not in locked], sorted(locked - steps)
    if lacking or foreign:
        what = (f"pins no wheels for step {', '.join(lacking)}" if lacking else "") + ("; " if lacking and foreign else "") \
            + (f"pins wheels for step {', '.join(foreign)}, which this plan lacks" if foreign else "")
        raise InputError(f"the lock {what}", "make the lock again with envkit lock for this stack (and site)")
    return {g.step: step_requirements(g.step, [w for w in wheels if w.step == g.step], g.packages, plan.options.offline)
            for g in groups}


def locked_download_args(plan: BuildPlan, osr: OsRelease, dest: Path, find_links: Sequence[str], requirements: str,
                         indexes: Sequence[str]) -> list[str]:
    """`pip download --require-hashes --no-deps -r FILE`: a pinned lock's wheels, exactly, each checked by pip."""
    site = plan.site
    args = ["download", "--dest", str(dest), *_target_args(plan, osr), "--require-hashes", "--no-deps"]
    for index in dict.fromkeys(indexes):
        args += ["--extra-index-url", (site.rewrite(index) if site.given else None) or index]
    for fl in find_links:
        args += ["--find-links", fl]
    return args + ["-r", requirements]


def mirrored_url(plan: BuildPlan, url: str) -> str:
    """A locked wheel's URL through the site's [rewrite] when a site is given (refused when it mirrors no such host)."""
    site = plan.site
    if not site.given:
        return url
    mirrored = site.rewrite(url)
    if mirrored is None:
        raise InputError(f"bundle: {url} is not mirrored by {site.path}", "add a [rewrite] for its host to the site file")
    return mirrored
