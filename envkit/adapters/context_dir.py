"""The build context on disk: the Dockerfile fragments read, and a generated tree written whole
(staged, checked, then renamed with the old files kept aside until every rename succeeded, the Dockerfile last, and a
journal a killed run's successor finishes the commit from; files envkit did not write are never removed)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Sequence

from envkit import data
from envkit.config.lockfile import LOCK_NAME
from envkit.core.render import Templates
from envkit.errors import InputError

IN_IMAGE_SCRIPTS = ("selftest.py", "build_flash_attn.py", "apply-site.sh", "fill_triton_repo.py")


def templates_dir() -> Path:
    root = data.dockerfiles()
    if not (root / "fragments").is_dir():
        raise InputError("envkit's Dockerfile templates are missing from this install", "reinstall envkit")
    return root


def load_templates(root: Optional[Path] = None) -> Templates:
    root = root or templates_dir()
    fragments = {p.stem: p.read_text(encoding="utf-8") for p in sorted((root / "fragments").glob("*.Dockerfile"))}
    scripts = {name: (data.INIMAGE / name).read_bytes() for name in IN_IMAGE_SCRIPTS}
    return Templates(fragments, scripts)


GENERATED_LIST = "envkit/.generated"
STAGING_PREFIX = ".envkit-staging-"
JOURNAL = "commit.json"  # in a staging directory: the commit has begun (what it renames, what existed before)
ROLLING_BACK = "rolling-back"  # beside it: the commit failed and its renames are being undone
COMMIT_LAST = "Dockerfile"  # moved aside first and renamed in last: nothing builds a half-committed context

Populate = Callable[[Path, Optional[Path]], None]
"""Fills a staged directory (first argument, not yet made) of a tree; the second is the directory as the context
holds it now (to reuse its files), or None."""


def is_staging(name: str) -> bool:
    """A staging directory of a run of write_tree (this one's, another's, or a killed one's)."""
    return name.startswith(STAGING_PREFIX)


def _proc_stat(pid: int) -> Optional[tuple[str, int]]:
    """(state, start time in clock ticks since boot) of a process from /proc/PID/stat; ("", 0) when there is no such
    process; None where /proc cannot say (another OS)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return ("", 0) if Path("/proc/self/stat").exists() else None
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return fields[0], int(fields[19])  # fields 3 (state) and 22 (starttime) of proc(5)


def _start_time(pid: int) -> Optional[int]:
    st = _proc_stat(pid)
    return st[1] if st else None


def _pid_alive(pid: int, start: Optional[int] = None) -> bool:
    """Whether the process that made a staging directory still runs: not a zombie (killed, not yet reaped), and, where
    its start time was recorded, not another process that was given the same PID since."""
    st = _proc_stat(pid)
    if st is not None:
        state, started = st
        return state not in ("", "Z", "X", "x") and (start is None or started == start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True


def _staging_prefix() -> str:
    """.envkit-staging-PID-tSTART- (START: the process's start time, so a reused PID is not taken for this run)."""
    start = _start_time(os.getpid())
    return f"{STAGING_PREFIX}{os.getpid()}-" + (f"t{start}-" if start is not None else "")


def _owner(name: str) -> tuple[Optional[int], Optional[int]]:
    parts = name[len(STAGING_PREFIX):].split("-")
    pid = int(parts[0]) if parts[0].isdigit() else None
    start = int(parts[1][1:]) if len(parts) > 2 and parts[1][:1] == "t" and parts[1][1:].isdigit() else None
    return pid, start


def _mine(p: Path) -> bool:
    pid, start = _owner(p.name)
    return pid == os.getpid() and start == _start_time(os.getpid())


def recover_dead_staging(target: Path) -> None:
    """Staging directories a killed run left (SIGKILL cannot be caught) are envkit's own. One whose commit had begun
    is finished first (its journal says what it renamed; one that was rolling back is rolled back), so the context is
    the old generation or the new one, whole; then it is removed. One whose process still runs is left to it."""
    for p in sorted(target.glob(STAGING_PREFIX + "*")):
        pid, start = _owner(p.name)
        if pid is not None and not _mine(p) and _pid_alive(pid, start):
            continue
        if p.is_dir() and not p.is_symlink():
            _finish(target, p)
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink()


remove_dead_staging = recover_dead_staging


def _safe(rel: object) -> bool:
    return isinstance(rel, str) and bool(rel) and not rel.startswith("/") and all(x not in ("", ".", "..") for x in rel.split("/"))


def _read_journal(tmp: Path) -> Optional[dict]:
    try:
        doc = json.loads((tmp / JOURNAL).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none (the commit had not begun), or cut short while written (it had not either)
        return None
    if not isinstance(doc, dict):
        return None
    return {k: [r for r in doc[k] if _safe(r)] if isinstance(doc.get(k), list) else [] for k in ("files", "dirs", "stale", "existed")}


def _lexists(p: Path) -> bool:
    return p.exists() or p.is_symlink()


def _finish(target: Path, tmp: Path) -> None:
    """A dead run's commit, completed from its journal (or, where it was rolling back, undone): the context is then one
    generation, whole. Each step looks at what is where, so a run killed while finishing is finished by the next."""
    journal = _read_journal(tmp)
    if journal is None:  # the commit had not begun: the context is the old one
        return
    old, new = tmp / "old", tmp / "new"
    files, existed = journal["files"], set(journal["existed"])
    if (tmp / ROLLING_BACK).exists():
        for rel in files + journal["stale"]:
            if _lexists(old / rel):
                os.replace(old / rel, target / rel)
            elif rel in files and rel not in existed and not _lexists(new / rel):  # its new file was renamed in
                (target / rel).unlink(missing_ok=True)
        for d in journal["dirs"]:
            if _lexists(target / d) and not _lexists(new / d):  # the new directory was renamed in
                os.replace(target / d, new / d)
            if _lexists(old / d):
                os.replace(old / d, target / d)
    else:
        for rel in files:
            if rel != COMMIT_LAST and _lexists(new / rel):
                (target / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(new / rel, target / rel)
        for d in journal["dirs"]:
            if _lexists(new / d):
                if _lexists(target / d):
                    (old / d).parent.mkdir(parents=True, exist_ok=True)
                    if _lexists(old / d):
                        shutil.rmtree(old / d)
                    os.replace(target / d, old / d)
                os.replace(new / d, target / d)
        for rel in journal["stale"]:
            if _lexists(target / rel) and not (target / rel).is_dir():
                (target / rel).unlink()
        if COMMIT_LAST in files and _lexists(new / COMMIT_LAST):
            os.replace(new / COMMIT_LAST, target / COMMIT_LAST)
    (tmp / JOURNAL).unlink(missing_ok=True)


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived while a tree was being written (raised there, so its cleanup runs)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class SignalGuard:
    """While active, SIGTERM and SIGINT raise Interrupted, so `finally` blocks clean up; once `cleaning` is
    set, a signal is held instead and delivered when the guard ends (the previous handler's turn: by default
    SIGTERM ends the process, SIGINT raises KeyboardInterrupt)."""

    def __init__(self) -> None:
        self.cleaning = False
        self.held: list[int] = []

    def handler(self, signum: int, frame: object) -> None:
        if self.cleaning:
            self.held.append(signum)
            return
        raise Interrupted(signum)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Signals held while something is made that the caller's cleanup must know of (a directory made but
        not yet named); resume() then raises the one held, inside that cleanup's reach."""
        was, self.cleaning = self.cleaning, True
        try:
            yield
        finally:
            self.cleaning = was

    def resume(self) -> None:
        if self.held and not self.cleaning:
            raise Interrupted(self.held.pop(0))


@contextlib.contextmanager
def signal_guard() -> Iterator[SignalGuard]:
    guard = SignalGuard()
    if threading.current_thread() is not threading.main_thread():  # build --all's workers: signals go to the main thread
        yield guard
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    previous = {s: h for s, h in previous.items() if h is not None and h is not signal.SIG_IGN}  # None: not Python's to restore
    for s in previous:
        signal.signal(s, guard.handler)
    signum: Optional[int] = None
    try:
        yield guard
    except Interrupted as exc:
        signum = exc.signum
    finally:
        guard.cleaning = True
        for s, h in previous.items():
            signal.signal(s, h)
        pending = signum if signum is not None else (guard.held[0] if guard.held else None)
        if pending == signal.SIGTERM:
            os.kill(os.getpid(), pending)  # the previous handler's turn: by default the process ends here
        if pending is not None:
            raise KeyboardInterrupt  # also over an error the body raised: the user asked to stop


def _refuse_unreplaceable(target: Path, out: str, files: Sequence[str], dirs: Sequence[str] = ()) -> None:
    """Before anything is renamed: every file's place must take a file (no directory there, no file where
    a directory goes, a writable directory), so a run fails before the first change, not half-way."""
    for rel in [*files, *dirs]:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            d = target.joinpath(*parts[:i])
            if d.exists() and not d.is_dir():
                raise InputError(f"cannot write to {out}: {'/'.join(parts[:i])} is a file where envkit writes a directory",
                                 "move it away, or choose another -o DIR (nothing was changed)")
            if d.is_dir() and not os.access(d, os.W_OK | os.X_OK):
                raise InputError(f"cannot write to {out}: {'/'.join(parts[:i])} is not writable",
                                 "make it writable, or choose another -o DIR (nothing was changed)")
        dest = target / rel
        if rel in dirs:
            if _lexists(dest) and (dest.is_symlink() or not dest.is_dir()):
                raise InputError(f"cannot write to {out}: {rel} is not a directory where envkit writes one",
                                 "move it away, or choose another -o DIR (nothing was changed)")
        elif dest.is_dir() and not dest.is_symlink():
            raise InputError(f"cannot write to {out}: {rel} is a directory where envkit writes a file",
                             "move it away, or choose another -o DIR (nothing was changed)")


def _keep_aside(path: Path, backup: Path) -> None:
    backup.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, backup, follow_symlinks=False)  # the old file stays in place until the new one replaces it
    except OSError:
        shutil.copy2(path, backup, follow_symlinks=False)


def _commit(target: Path, tmp: Path, files: list[str], dirs: list[str], stale: list[str], guard: SignalGuard) -> None:
    """Rename every staged file and directory into place and remove the stale files, the Dockerfile moved aside first
    and renamed in last (while the others move, the context has none: nothing builds a half-renamed one). The journal,
    written first, lets the next run finish a commit a kill cut short. On any failure or signal here, every old file is
    put back (kept aside under tmp/old) and the new ones and the directories made for them are removed."""
    existed = [rel for rel in [*files, *dirs] if _lexists(target / rel)]
    (tmp / JOURNAL).write_bytes(json.dumps({"files": files, "dirs": dirs, "stale": stale, "existed": existed}).encode())
    c = _Commit(target, tmp / "old", tmp / "new")
    last = [rel for rel in files if rel == COMMIT_LAST]
    try:
        c.aside(last)
        c.files([rel for rel in files if rel not in last])
        c.dirs(dirs)
        c.remove(stale)
        c.last(last)
    except BaseException:
        guard.cleaning = True
        with contextlib.suppress(OSError):
            (tmp / ROLLING_BACK).touch()
        c.roll_back()
        raise


@dataclass
class _Commit:
    """One commit's renames, each recorded as it is done so that roll_back undoes exactly those."""
    target: Path
    old: Path  # where the files a rename replaces are kept aside
    new: Path  # the staged tree
    done: list[tuple[Path, Optional[Path]]] = field(default_factory=list)  # (place, its old file kept aside)
    moved: list[tuple[Path, Optional[Path], Path]] = field(default_factory=list)  # (place, its old directory, the new one staged)
    made: list[Path] = field(default_factory=list)

    def _parents(self, dest: Path) -> None:
        for d in reversed(dest.parents):
            if d != self.target and self.target in d.parents and not d.exists():
                d.mkdir()
                self.made.append(d)

    def aside(self, last: list[str]) -> None:
        """The files renamed in last: linked into old/, then removed from their place."""
        for rel in last:
            dest = self.target / rel
            if _lexists(dest):
                _keep_aside(dest, self.old / rel)
                self.done.append((dest, self.old / rel))
                dest.unlink()

    def files(self, rels: list[str]) -> None:
        for rel in rels:
            dest = self.target / rel
            self._parents(dest)
            backup = None
            if _lexists(dest):
                backup = self.old / rel
                _keep_aside(dest, backup)
            self.done.append((dest, backup))
            os.replace(self.new / rel, dest)

    def dirs(self, names: list[str]) -> None:
        for name in names:
            dest = self.target / name
            self._parents(dest)
            backup = self.old / name if _lexists(dest) else None
            self.moved.append((dest, backup, self.new / name))
            if backup is not None:
                backup.parent.mkdir(parents=True, exist_ok=True)
                os.replace(dest, backup)
            os.replace(self.new / name, dest)

    def remove(self, stale: list[str]) -> None:
        for rel in stale:
            dest, backup = self.target / rel, self.old / rel
            backup.parent.mkdir(parents=True, exist_ok=True)
            os.replace(dest, backup)
            self.done.append((dest, backup))

    def last(self, last: list[str]) -> None:
        for rel in last:
            dest = self.target / rel
            if not any(place == dest for place, _ in self.done):
                self.done.append((dest, None))
            os.replace(self.new / rel, dest)

    def roll_back(self) -> None:
        for dest, backup in reversed(self.done):
            with contextlib.suppress(OSError):
                if backup is not None and _lexists(backup):
                    os.replace(backup, dest)
                else:
                    dest.unlink(missing_ok=True)
        for dest, backup, staged in reversed(self.moved):
            with contextlib.suppress(OSError):
                if _lexists(dest) and not _lexists(staged):  # the new one was renamed in
                    os.replace(dest, staged)
                if backup is not None and _lexists(backup):
                    os.replace(backup, dest)
        for d in reversed(self.made):
            with contextlib.suppress(OSError):
                d.rmdir()


def write_tree(out: str, files: dict[str, bytes], force: bool, dirs: Optional[Mapping[str, Populate]] = None) -> None:
    """Write the generated files (and `dirs`, whole trees such as a serving image's model/) into `out`, all or nothing,
    without ever deleting what envkit did not write.

    Everything is rendered before this runs. Every place is checked first (a directory where a file goes is
    refused before any change); files and trees are staged in a temp dir inside `out` (same filesystem), then renamed
    into place, each old file kept aside until every rename succeeded: a failure, SIGTERM or Ctrl-C puts the
    old set back and removes the staging (SIGTERM then ends the process as its default does). A SIGKILL cannot be
    caught: the Dockerfile is renamed in last, so a cut-short commit leaves no Dockerfile beside the others, and the
    next run finishes it from the staging's journal before anything else. Files a previous generation wrote and
    this one does not are removed (listed in envkit/.generated); carried artifacts and user files are never touched.
    A staging directory a killed run left behind is envkit's own: finished and removed, never a reason to refuse.
    """
    target = Path(out).resolve()
    try:
        with signal_guard() as guard:
            _write_tree(target, out, files, force, guard, dict(dirs or {}))
    except OSError as exc:
        raise InputError(f"cannot write to {out}: {exc.strerror or exc}", "choose a writable -o DIR") from None


def _write_tree(target: Path, out: str, files: dict[str, bytes], force: bool, guard: SignalGuard,
                dirs: dict[str, Populate]) -> None:
    if target.exists() and not target.is_dir():
        raise InputError(f"output {out} exists and is not a directory", "choose another -o DIR")
    previous: set[str] = set()
    if target.exists():
        recover_dead_staging(target)  # first: a killed run's half-renamed commit is finished before anything is judged
        ours = (target / LOCK_NAME).is_file()
        keep = {"wheelhouse", "sources", "debs", "images", "manifest.json", "model"}
        foreign = sorted(p.name for p in target.iterdir() if p.name not in keep and not is_staging(p.name))
        if foreign and not ours and not force:
            raise InputError(f"output {out} holds files envkit did not write ({', '.join(foreign[:3])})",
                             "choose an empty -o DIR, or pass --force to write beside them")
        listing = target / GENERATED_LIST
        if listing.is_file():
            previous = {line for line in listing.read_text().splitlines()
                        if line and not line.startswith("/") and ".." not in line.split("/")}
    files = {**files, GENERATED_LIST: ("\n".join(sorted(files)) + "\n").encode()}
    stale = [rel for rel in sorted(previous - set(files)) if (target / rel).is_file()]
    _refuse_unreplaceable(target, out, sorted(files), sorted(dirs))
    _stage_and_commit(target, files, dirs, stale, guard)


def _stage_and_commit(target: Path, files: dict[str, bytes], dirs: dict[str, Populate], stale: list[str],
                      guard: SignalGuard) -> None:
    made = [d for d in (target, *target.parents) if not d.exists()]  # innermost first
    committed = False
    try:
        target.mkdir(parents=True, exist_ok=True)
        with guard.holding():
            tmp = Path(tempfile.mkdtemp(prefix=_staging_prefix(), dir=target))
        try:
            guard.resume()
            for rel, content in files.items():
                p = tmp / "new" / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(content)
                p.chmod(0o755 if rel.endswith((".sh", ".py")) else 0o644)
            for name, populate in sorted(dirs.items()):
                current = target / name
                (tmp / "new" / name).parent.mkdir(parents=True, exist_ok=True)
                populate(tmp / "new" / name, current if current.is_dir() and not current.is_symlink() else None)
            _commit(target, tmp, sorted(files), sorted(dirs), stale, guard)
            committed = True
        finally:
            guard.cleaning = True
            with contextlib.suppress(OSError):
                (tmp / JOURNAL).unlink(missing_ok=True)  # first: a staging without its journal is only removed
            shutil.rmtree(tmp, ignore_errors=True)
        target.chmod(0o755)
    finally:
        guard.cleaning = True
        if not committed:
            for d in made:  # the directories this run made, when nothing stayed in them
                with contextlib.suppress(OSError):
                    d.rmdir()


def replace_dir(dest: Path, populate: Populate) -> None:
    """The directory `dest` replaced whole by the tree `populate` fills: staged beside it (in its parent, a staging
    directory of write_tree's kind), then renamed into place under the same signal guard and journal as write_tree."""
    target = dest.parent.resolve()
    out = str(dest)
    try:
        with signal_guard() as guard:
            if target.exists():
                recover_dead_staging(target)
            _refuse_unreplaceable(target, out, [], [dest.name])
            _stage_and_commit(target, {}, {dest.name: populate}, [], guard)
    except OSError as exc:
        raise InputError(f"cannot write to {out}: {exc.strerror or exc}", "choose a writable -o DIR") from None
