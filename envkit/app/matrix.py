"""The `envkit matrix` use cases: check the matrix (with what rests on inference), refresh its derived tables
from data/sources (or check them), and export a project's targets for CI."""
from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from packaging.utils import canonicalize_name

from envkit.adapters.fetch import sha256_file
from envkit.config import matrix_file, project_file
from envkit.core import export as export_core
from envkit.core.export import FORMATS
from envkit.core.inferred import inferred_entries
from envkit.core.resolve import parse_query
from envkit.core.resolve import resolve as solve
from envkit.core.resolve.query import parse_machine
from envkit.errors import InputError, MatrixError, MatrixProblem
from envkit.matrixgen import refresh as derived
from envkit.model.flags import ResolveFlags
from envkit.model.matrix import Matrix
from envkit.model.project import DISTRIBUTION, EnvkitRequirement, Project, WheelInstall
from envkit.model.solution import Result


def load(path: Optional[str]) -> Matrix:
    return matrix_file.load(path)


@dataclass(frozen=True)
class Checked:
    matrix: Matrix
    rows: dict[str, int]
    inferred: dict[str, Any]
    derived: tuple[str, ...] = ()  # the tables `envkit matrix refresh` writes (their rows between region markers)
    hand_kept: tuple[str, ...] = ()
    derived_checked: bool = False  # the derived regions were compared with what data/sources derives (found beside the file)

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "ok": True, "path": self.matrix.path, "rows": self.rows, "inferred": self.inferred["total"],
                "inferred_kinds": self.inferred["kinds"], "inferred_that_can_name_an_artifact": self.inferred["can_name_artifact"],
                "tables": {"derived": list(self.derived), "hand_kept": list(self.hand_kept)},
                "derived_checked": self.derived_checked}


@dataclass(frozen=True)
class Rejected:
    """An invalid matrix: what `matrix check` lists, every problem on its own line with its line number."""

    error: MatrixError

    @property
    def exit_code(self) -> int:
        return self.error.exit_code

    @property
    def headline(self) -> str:
        n = len(self.error.problems)
        listed = "1 problem, below with its line" if n == 1 else f"{n} problems, each below with its line"
        return f"{self.error.path} is not a valid matrix: {listed} (fix: correct each line named)"

    @property
    def lines(self) -> list[str]:
        return self.error.lines

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "ok": False, "path": self.error.path,
                "problems": [{"line": p.line, "problem": p.text} for p in self.error.problems],
                "error": {"kind": "matrix", "exit_code": self.exit_code, "message": self.error.message,
                          "fix": "correct each line listed under problems, then check the file again"}}


def check(path: Optional[str]) -> Union[Checked, Rejected]:
    """The matrix's row counts and inferred facts, or every problem that makes it invalid (a file that cannot be
    read at all is bad input: InputError)."""
    try:
        m = matrix_file.load(path)
    except MatrixError as exc:
        return Rejected(exc)
    text = Path(m.path).read_text(encoding="utf-8")
    parts = derived.layout(text)
    if parts.problems:
        return Rejected(MatrixError([MatrixProblem(line, what) for line, what in parts.problems], m.path))
    sources = derived.default_sources(Path(m.path))
    regions = tuple(r for r in derived.REGIONS if r.name in parts.derived and (sources / r.directory).is_dir())
    edited = _edited_regions(text, sources, regions, dict(parts.begins))  # a maintainer's checkout: what the extracts derive
    if edited:
        return Rejected(MatrixError(edited, m.path))
    rows = {"cuda": len(m.cuda), "gpu": len(m.gpus), "torch": len(m.torch), "rocm": len(m.rocm), "dtk": len(m.dtk),
            "flash_attn": len(m.flash_attn), "vllm": len(m.vllm), "python": len(m.python)}
    return Checked(m, rows, inferred_entries(m), parts.derived, parts.hand_kept, bool(regions))


def _edited_regions(text: str, sources: Path, regions: tuple[Any, ...], begins: dict[str, int]) -> list[MatrixProblem]:
    """Each derived region (with its extracts under `sources`) whose rows differ from what they derive, at its marker."""
    out = []
    for region in regions:
        begin = begins[region.name]
        try:
            differs = derived.check(text, sources, (region,))
        except InputError as exc:  # a marker line refresh cannot find as it writes it
            out.append(MatrixProblem(begin, f"{exc.message}: {exc.fix}"))
            continue
        out.extend(MatrixProblem(begin, f"the derived [[{name}]] rows differ from what data/sources/ derives ({n} row(s)): a hand "
                                        "edit is overwritten by `envkit matrix refresh`; put the fact in its extract, then refresh")
                   for name, n, _diff in differs)
    return out


@dataclass(frozen=True)
class Refreshed:
    path: Path
    sources: Path
    regions: tuple[str, ...]
    differs: tuple[tuple[str, int, str], ...]  # (region, rows, unified diff)
    rewritten: bool  # False: --check, or nothing differed

    @property
    def ok(self) -> bool:
        return self.rewritten or not self.differs

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema": 1, "ok": self.ok, "path": str(self.path), "sources": str(self.sources),
                               "regions": list(self.regions)}
        if self.rewritten:
            doc["rewritten"] = [{"region": name, "rows": n} for name, n, _d in self.differs]
        else:
            doc["differs"] = [{"region": name, "rows": n, "diff": d} for name, n, d in self.differs]
        return doc


def refresh(matrix_path: Optional[str], sources: Optional[str], check_only: bool) -> Refreshed:
    """Derive the generated tables of matrix.toml; rewrite them unless check_only (a matrix that does not load is never written)."""
    path = Path(matrix_path) if matrix_path else matrix_file.default_path()
    src = Path(sources) if sources else derived.default_sources(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}",
                         "pass --matrix with a readable matrix.toml") from None
    diffs = tuple(derived.check(text, src))
    regions = tuple(r.name for r in derived.REGIONS)
    if check_only or not diffs:
        return Refreshed(path, src, regions, diffs, rewritten=False)
    new = derived.apply(text, src)
    matrix_file.parse(new, str(path))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)
    return Refreshed(path, src, regions, diffs, rewritten=True)


@dataclass(frozen=True)
class Exported:
    """The export's text; `out`: the file it was written to (None: the caller prints it)."""
    text: str
    out: Optional[str]


@dataclass(frozen=True)
class ExportUnsolved:
    """Targets of the project without a solution: nothing was exported."""
    unsolved: tuple[tuple[str, Result], ...]

    def lines(self) -> list[str]:
        """One line per conflict, each naming its target."""
        out = []
        for name, result in self.unsolved:
            for c in result.conflicts:
                out.append(f"target {name} has no solution: {c.rule}: {c.message}" + (f" (fix: {c.fix})" if c.fix else ""))
        return out


def _wheel(project: Project, req: EnvkitRequirement) -> WheelInstall:
    """[ci] envkit's wheel, checked now: it is there, it is a wheel of envkit's distribution, and its sha256 goes
    into the install step, which refuses any other file."""
    path = export_core.wheel_path(project.path, req.text)
    fix = "build it from envkit's repository (python -m pip wheel --no-deps . -w DIR), commit it, and name it in [ci] envkit"
    try:
        with zipfile.ZipFile(path) as whl:
            meta = [n for n in whl.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            text = whl.read(meta[0]).decode("utf-8", "replace") if len(meta) == 1 else ""
    except FileNotFoundError:
        raise InputError(f"[ci] envkit: no wheel at {path}", fix) from None
    except (OSError, zipfile.BadZipFile) as exc:
        raise InputError(f"[ci] envkit: cannot read the wheel {path}: {getattr(exc, 'strerror', None) or exc}", fix) from None
    names = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Name:")]
    if not names or canonicalize_name(names[0]) != canonicalize_name(DISTRIBUTION):
        raise InputError(f"[ci] envkit: {path} is not a wheel of {DISTRIBUTION} (its metadata names {names[0] if names else 'nothing'!r})",
                         fix)
    return WheelInstall(path, sha256_file(Path(path)))


def _solve_targets(project: Project, matrix_path: Optional[str], fmt: str = "json") -> tuple[dict[str, str], list[tuple[str, Result]]]:
    """Every target resolved: the platform of each that needs a GPU (by name), and those without a solution. Bad flags
    of any target are one InputError naming every such target. A container engine's target (--engine trtllm,
    triton-*) is a CUDA target that only the k8s and json exports take: envkit builds no image for it."""
    m = matrix_file.load(matrix_path)
    gpu: dict[str, str] = {}
    unsolved: list[tuple[str, Result]] = []
    bad: list[InputError] = []
    for t in project.targets:
        try:
            result = solve(m, parse_query(m, ResolveFlags.from_mapping(t.flag_dict())))
        except InputError as exc:
            bad.append(InputError(f"target {t.name}: {exc.message}", exc.fix))
            continue
        if result.engine is not None:
            if fmt not in ("k8s", "json"):
                bad.append(InputError(f"target {t.name}: engine {result.engine.engine} is NVIDIA's container, which "
                                      f"{fmt} jobs cannot build with envkit build",
                                      "export it with --format k8s (its server or self-test job), or generate its context with envkit "
                                      "generate"))
                continue
            gpu[t.name] = "cuda"
        elif result.solution is None:
            unsolved.append((t.name, result))
        elif result.solution.platform != "cpu":
            gpu[t.name] = result.solution.platform
    if bad:
        raise InputError(f"{project.path}: " + "; ".join(e.message for e in bad), "; ".join(dict.fromkeys(e.fix for e in bad if e.fix)))
    return gpu, unsolved


def _solves(m: Matrix, flags: dict[str, str]) -> bool:
    try:
        return solve(m, parse_query(m, ResolveFlags.from_mapping(flags))).ok
    except InputError:  # e.g. a Grace GPU asked for x86_64
        return False


def _machines(project: Project, matrix_path: Optional[str]) -> dict[str, tuple[str, ...]]:
    """The CPU architectures each target's stack resolves for: its --platform-arch where it names one, else every
    architecture that gives a solution (x86_64 first)."""
    m = matrix_file.load(matrix_path)
    out: dict[str, tuple[str, ...]] = {}
    for t in project.targets:
        flags = t.flag_dict()
        if "platform_arch" in flags:
            out[t.name] = (parse_machine(flags["platform_arch"]),)
            continue
        ok = [machine for machine in ("x86_64", "aarch64") if _solves(m, {**flags, "platform_arch": machine})]
        out[t.name] = tuple(ok) or ("x86_64",)
    return out


def export_project(project: str, fmt: str, contexts: str, out: Optional[str],
                   matrix_path: Optional[str] = None) -> Union[Exported, ExportUnsolved]:
    """Every target is resolved and every input checked before anything is written; the text is written whole
    (a temporary file renamed) to `out`, or returned for the caller to print."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}", "pick one of them")
    export_core.check_text("--project", project)
    if out is not None:
        export_core.check_text("-o", out)
    p = project_file.load(project)
    install: Optional[export_core.Install] = None
    if fmt in export_core.INSTALLING:
        req = p.ci.envkit
        if req is None:
            raise export_core.missing_install(p)
        export_core.check_text("[ci] envkit", req.text)
        install = _wheel(p, req) if req.kind == "wheel" else req
    gpu, unsolved = _solve_targets(p, matrix_path, fmt)
    if unsolved:
        return ExportUnsolved(tuple(unsolved))
    text = export_core.export(p, fmt, contexts, install, gpu, _machines(p, matrix_path) if fmt == "bake" else None)
    if out:
        target = Path(out)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise InputError(f"cannot write {out}: {exc.strerror}", "choose a writable -o path") from None
    return Exported(text, out)
