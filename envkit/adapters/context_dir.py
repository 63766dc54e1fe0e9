"""The build context on disk: the Dockerfile fragments read, and a generated tree written whole
(staged, checked, then renamed with the old files kept aside until every rename succeeded; files envkit
did not write are never removed)."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Iterator, Optional

from envkit import data
from envkit.config.lockfile import LOCK_NAME
from envkit.core.render import Templates
from envkit.errors import InputError

IN_IMAGE_SCRIPTS = ("selftest.py", "build_flash_attn.py", "apply-site.sh")


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


def load_engine_templates(folder: str, root: Optional[Path] = None) -> dict[str, str]:
    """The files of dockerfiles/triton/FOLDER (a backend's model repository, its LICENSE and SOURCE), by relative path."""
    base = (root or templates_dir()) / "triton" / folder
    return {p.relative_to(base).as_posix(): p.read_text(encoding="utf-8") for p in sorted(base.rglob("*")) if p.is_file()}


GENERATED_LIST = "envkit/.generated"
STAGING_PREFIX = ".envkit-staging-"


def is_staging(name: str) -> bool:
    """A staging directory of a run of write_tree (this one's, another's, or a killed one's)."""
    return name.startswith(STAGING_PREFIX)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True


def remove_dead_staging(target: Path) -> None:
    """Staging directories a killed run left (SIGKILL cannot be caught) are envkit's own: removed. One whose
    process still runs (named .envkit-staging-PID-...) is left to it."""
    for p in target.glob(STAGING_PREFIX + "*"):
        pid = p.name[len(STAGING_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and _pid_alive(int(pid)):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink()


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


def _refuse_unreplaceable(target: Path, out: str, files: list[str]) -> None:
    """Before anything is renamed: every file's place must take a file (no directory there, no file where
    a directory goes, a writable directory), so a run fails before the first change, not half-way."""
    for rel in files:
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
        if dest.is_dir() and not dest.is_symlink():
            raise InputError(f"cannot write to {out}: {rel} is a directory where envkit writes a file",
                             "move it away, or choose another -o DIR (nothing was changed)")


def _keep_aside(path: Path, backup: Path) -> None:
    backup.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, backup, follow_symlinks=False)  # the old file stays in place until the new one replaces it
    except OSError:
        shutil.copy2(path, backup, follow_symlinks=False)


def _commit(target: Path, tmp: Path, files: list[str], stale: list[str], guard: SignalGuard) -> None:
    """Rename every staged file into place and remove the stale ones; on any failure or signal, put every
    old file back (kept aside under tmp/old) and remove the new ones and the directories made for them."""
    old, new = tmp / "old", tmp / "new"
    done: list[tuple[Path, Optional[Path]]] = []
    made: list[Path] = []
    try:
        for rel in files:
            dest = target / rel
            for d in reversed(dest.parents):
                if d != target and target in d.parents and not d.exists():
                    d.mkdir()
                    made.append(d)
            backup = None
            if dest.exists() or dest.is_symlink():
                backup = old / rel
                _keep_aside(dest, backup)
            done.append((dest, backup))
            os.replace(new / rel, dest)
        for rel in stale:
            dest = target / rel
            backup = old / rel
            backup.parent.mkdir(parents=True, exist_ok=True)
            os.replace(dest, backup)
            done.append((dest, backup))
    except BaseException:
        guard.cleaning = True
        for dest, backup in reversed(done):
            with contextlib.suppress(OSError):
                if backup is not None and (backup.exists() or backup.is_symlink()):
                    os.replace(backup, dest)
                else:
                    dest.unlink(missing_ok=True)
        for d in reversed(made):
            with contextlib.suppress(OSError):
                d.rmdir()
        raise


def write_tree(out: str, files: dict[str, bytes], force: bool) -> None:
    """Write the generated files into `out`, all or nothing, without ever deleting what envkit did not write.

    Everything is rendered before this runs. Every place is checked first (a directory where a file goes is
    refused before any change); files are staged in a temp dir inside `out` (same filesystem), then renamed
    into place, each old file kept aside until every rename succeeded: a failure, SIGTERM or Ctrl-C puts the
    old set back and removes the staging. Files a previous generation wrote and this one does not are removed
    (listed in envkit/.generated); carried artifacts and user files are never touched. A staging directory a
    killed run left behind is envkit's own: removed, never a reason to refuse.
    """
    target = Path(out).resolve()
    try:
        with signal_guard() as guard:
            _write_tree(target, out, files, force, guard)
    except OSError as exc:
        raise InputError(f"cannot write to {out}: {exc.strerror or exc}", "choose a writable -o DIR") from None


def _write_tree(target: Path, out: str, files: dict[str, bytes], force: bool, guard: SignalGuard) -> None:
    if target.exists() and not target.is_dir():
        raise InputError(f"output {out} exists and is not a directory", "choose another -o DIR")
    previous: set[str] = set()
    if target.exists():
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
    _refuse_unreplaceable(target, out, sorted(files))
    made = [d for d in (target, *target.parents) if not d.exists()]  # innermost first
    committed = False
    try:
        target.mkdir(parents=True, exist_ok=True)
        remove_dead_staging(target)
        tmp = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=target))
        try:
            for rel, content in files.items():
                p = tmp / "new" / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(content)
                p.chmod(0o755 if rel.endswith((".sh", ".py")) else 0o644)
            _commit(target, tmp, sorted(files), stale, guard)
            committed = True
        finally:
            guard.cleaning = True
            shutil.rmtree(tmp, ignore_errors=True)
        target.chmod(0o755)
    finally:
        guard.cleaning = True
        if not committed:
            for d in made:  # the directories this run made, when nothing stayed in them
                with contextlib.suppress(OSError):
                    d.rmdir()
