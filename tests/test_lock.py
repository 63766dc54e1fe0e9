"""A real lock (issue 14): `envkit lock` pins every wheel (transitive, by sha256, per pip step) and every base image
by digest; bundle and build install those wheels with pip's --require-hashes; `build --locked` refuses what no
longer matches. Plain data here: pip's installation report, a runner in place of pip, an engine of plain data.
The round trip against the real engine and pip is tests/integration/test_lock_roundtrip.py."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from envkit.adapters.bundle_dir import write_manifest
from envkit.adapters.pip import hash_mismatches
from envkit.app import lock as lock_app
from envkit.app.build import BuildRequest, build
from envkit.app.generate import generate
from envkit.config.lockfile import read_lock
from envkit.core.wheels import (
    PipGroup,
    download_rounds,
    dry_run_args,
    pinned_requirements,
    pip_groups,
    step_requirements,
    wheels_from_report,
)
from envkit.errors import ExternalError, InputError, PreflightError
from envkit.model.flags import ResolveFlags
from envkit.model.lock import Lock, LockedImage, LockedWheel
from envkit.model.plan import Options
from schema_check import errors, validate

ROOT = Path(__file__).resolve().parent.parent
CPU = ResolveFlags(platform="cpu", torch="2.13.0")
BASE = "docker.io/library/debian:bookworm-slim"
BASE_ID = "sha256:" + "b" * 64
TORCH = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
FILELOCK = "filelock-4.3.1-py3-none-any.whl"
CONTENT = {TORCH: b"a torch wheel, in a manner of speaking", FILELOCK: b"a small wheel"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wheel(filename: str, step: str = "build-torch", index: Optional[str] = "https://download.pytorch.org/whl/cpu",
          url: Optional[str] = None, digest: Optional[str] = None) -> LockedWheel:
    name, version = filename.split("-")[:2]
    return LockedWheel(name, version, filename, digest or sha(CONTENT.get(filename, filename.encode())), step, index, url)


def pinned_lock(tmp_path: Path, *, wheels: Optional[list[LockedWheel]] = None, image_id: str = BASE_ID, name: str = "lock.json",
                edit: Callable[[dict[str, Any]], None] = lambda doc: None) -> Path:
    """A pinned lock of the CPU stack: generate's lock with wheels and images added."""
    g = generate(CPU)
    doc = json.loads(g.files["envkit.lock.json"])
    doc["schema"] = 2
    doc["wheels"] = [w.to_json() for w in (wheels if wheels is not None else [wheel(TORCH), wheel(FILELOCK)])]
    doc["images"] = [{"ref": BASE, "id": image_id, "digest": None}]
    edit(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=2))
    return path


def make_bundle_dir(tmp_path: Path, lock: Path, *, content: Optional[dict[str, bytes]] = None, image_id: str = BASE_ID) -> Path:
    """What `envkit bundle --lock` leaves, without an engine or pip: the context, the wheelhouse, a manifest."""
    out = tmp_path / "bundle"
    g = generate(ResolveFlags(), lock=str(lock), opts=Options(offline=True), out=str(out))
    assert not isinstance(g, lock_app.Unsolved)
    (out / "wheelhouse").mkdir()
    for filename, data in (content or CONTENT).items():
        (out / "wheelhouse" / filename).write_bytes(data)
    for stage in ("build", "runtime"):
        (out / "debs" / stage).mkdir(parents=True)
        (out / "debs" / stage / "Packages").write_text("")
    image = out / "images" / "debian.tar"
    image.parent.mkdir()
    image.write_bytes(b"tar")
    write_manifest(out, [{"ref": BASE, "file": "images/debian.tar", "id": image_id}])
    return out


class FakeEngine:
    """The part of the ContainerEngine Protocol a lock asks: images by reference, their IDs and registry digests."""

    def __init__(self, images: dict[str, tuple[str, list[str]]]) -> None:
        self.images = images
        self.pulled: list[str] = []

    def has_image(self, ref: str) -> bool:
        return ref in self.images

    def pull(self, ref: str) -> None:
        self.pulled.append(ref)
        raise RuntimeError("no registry answers")

    def image_id(self, ref: str) -> str:
        return self.images[ref][0]

    def repo_digests(self, ref: str) -> list[str]:
        return self.images[ref][1]


def report_item(name: str, version: str, url: str, digest: Optional[str], direct: bool = False) -> dict[str, Any]:
    info: dict[str, Any] = {"url": url, "archive_info": {"hashes": {"sha256": digest}} if digest else {}}
    return {"metadata": {"name": name, "version": version}, "download_info": info, "is_direct": direct, "requested": direct}


# ---------------------------------------------------------------- the lock document


def test_a_pinned_lock_reads_back_what_it_wrote_and_follows_its_schema(tmp_path):
    doc = json.loads(pinned_lock(tmp_path).read_text())
    lock = Lock.from_json(doc)
    assert lock.pinned and lock.to_json() == doc and validate(doc, "lock")
    assert lock.steps() == ("build-torch",) and [w.filename for w in lock.wheels_of("build-torch")] == [TORCH, FILELOCK]
    assert lock.image(BASE) == LockedImage(BASE, BASE_ID, None)


def test_generate_alone_still_writes_schema_1_with_no_wheels():
    """A plain generate keeps its bytes: the lock's sha256 is in every Dockerfile's label (the goldens hold it)."""
    doc = json.loads(generate(CPU).files["envkit.lock.json"])
    assert doc["schema"] == 1 and "wheels" not in doc and "images" not in doc
    assert not Lock.from_json(doc).pinned and Lock.from_json(doc).to_json() == doc


@pytest.mark.parametrize("edit, why", [
    (lambda d: d.update(schema=3), "schema 3 is newer than this envkit reads (1 or 2)"),
    (lambda d: d.update(schema="2"), "schema '2' is not 1 or 2"),
    (lambda d: d.pop("wheels"), "schema 2 without its wheels and images"),
    (lambda d: d.update(wheels=[]), "schema 2 without its wheels and images"),
    (lambda d: d["wheels"][0].update(sha256="abc"), f"wheel {TORCH}: sha256 is not 64 hex digits"),
    (lambda d: d["wheels"][0].update(filename="../x.whl"), "wheel ../x.whl: not a wheel file name"),
    (lambda d: d["wheels"][1].pop("step"), f"wheel {FILELOCK} has no step"),
    (lambda d: d["images"][0].update(id="latest"), f"image {BASE}: id is not sha256:<64 hex digits>"),
    (lambda d: d.update(wheels={"a": 1}), "schema 2 without its wheels and images"),
])
def test_a_lock_that_is_not_one_this_envkit_reads_is_refused_in_one_line(tmp_path, edit, why):
    path = pinned_lock(tmp_path, edit=edit)
    with pytest.raises(InputError) as exc:
        read_lock(str(path))
    assert exc.value.exit_code == 2 and why in exc.value.message and "\n" not in exc.value.message
    assert errors(json.loads(path.read_text()), "lock")  # the schema refuses it too


def test_an_old_schema_1_lock_with_wheels_is_refused_by_the_schema():
    doc = json.loads(generate(CPU).files["envkit.lock.json"])
    assert errors({**doc, "wheels": [wheel(TORCH).to_json()]}, "lock")


# ---------------------------------------------------------------- finding the wheels: pip's dry run and its report


def test_the_dry_run_of_a_step_asks_for_every_earlier_steps_packages_too():
    g = generate(ResolveFlags(gpu="H200", cuda="13.0", flash_attn="2.7.4.post1"))
    groups = pip_groups(g.plan)
    assert [x.step for x in groups] == ["build-tools", "build-torch"]  # flash-attn is compiled here: no pip step
    args = dry_run_args(g.plan, g.plan.stages[0].os, groups[:2], {}, ["/wheels"], "/tmp/r.json", "/tmp/t")
    assert args[:7] == ["install", "--dry-run", "--ignore-installed", "--report", "/tmp/r.json", "--target", "/tmp/t"]
    assert "--only-binary=:all:" in args and args[args.index("--python-version") + 1] == "3.12"
    assert args[args.index("--extra-index-url") + 1] == groups[1].index and args[args.index("--find-links") + 1] == "/wheels"
    assert args[-len(groups[0].packages) - 1:] == [*groups[0].packages, *groups[1].packages]


def test_a_step_naming_a_carried_wheel_by_path_takes_it_from_find_links_or_is_refused():
    group = PipGroup("build-torch", ("/opt/envkit/wheelhouse/torch-2.1.0a0+gitabc-cp310-cp310-linux_x86_64.whl",), None)
    g = generate(CPU)
    args = dry_run_args(g.plan, g.plan.stages[0].os, [group], {group.packages[0].rsplit("/", 1)[1]: "/vendor/t.whl"}, [], "r", "t")
    assert args[-1] == "/vendor/t.whl"
    with pytest.raises(InputError, match="is on no public index") as exc:
        dry_run_args(g.plan, g.plan.stages[0].os, [group], {}, [], "r", "t")
    assert "--find-links" in exc.value.fix


def test_the_report_gives_each_wheel_its_sha256_and_step_less_what_earlier_steps_install():
    torch_group = PipGroup("build-torch", ("torch==2.13.0+cpu",), "https://download.pytorch.org/whl/cpu")
    report = {"version": "1", "install": [
        report_item("torch", "2.13.0+cpu", f"file:///opt/wheels/{TORCH.replace('+', '%2B')}", "1" * 64, direct=False),
        report_item("filelock", "4.3.1", f"https://files.example/{FILELOCK}#sha256={'2' * 64}", "2" * 64),
        report_item("einops", "0.7.0", "https://files.example/einops-0.7.0-py3-none-any.whl", "3" * 64),
    ]}
    earlier = [wheel("einops-0.7.0-py3-none-any.whl", step="build-tools", index=None, digest="3" * 64)]
    got = wheels_from_report(report, torch_group, earlier)
    assert [(w.name, w.filename, w.sha256, w.step, w.index, w.url) for w in got] == [
        ("filelock", FILELOCK, "2" * 64, "build-torch", torch_group.index, None),
        ("torch", TORCH, "1" * 64, "build-torch", torch_group.index, None)]


def test_a_wheel_named_by_url_keeps_its_url_and_an_upgraded_one_is_pinned_again():
    group = PipGroup("build-vllm", ("https://github.com/vllm/releases/vllm-0.4.0+cu118-cp310-cp310-manylinux1_x86_64.whl",), None)
    report = {"install": [report_item("vllm", "0.4.0+cu118", group.packages[0] + "#sha256=" + "4" * 64, "4" * 64, direct=True),
                          report_item("einops", "0.8.0", "https://files.example/einops-0.8.0-py3-none-any.whl", "5" * 64)]}
    earlier = [wheel("einops-0.7.0-py3-none-any.whl", step="build-tools", index=None, digest="3" * 64)]
    got = wheels_from_report(report, group, earlier)
    assert [(w.name, w.version, w.url) for w in got] == [("einops", "0.8.0", None), ("vllm", "0.4.0+cu118", group.packages[0])]


@pytest.mark.parametrize("report, why", [
    ({"install": [report_item("x", "1", "https://f/x-1.tar.gz", "1" * 64)]}, "pip would install x-1.tar.gz for step s, which is not a wheel"),
    ({"install": [report_item("x", "1", "https://f/x-1-py3-none-any.whl", None)]}, "pip's report gives no sha256 for x-1-py3-none-any.whl"),
    ({"install": [{"metadata": {}}]}, "pip's installation report is not the format envkit reads"),
    ({"nothing": []}, "pip's installation report is not the format envkit reads"),
])
def test_a_report_envkit_cannot_pin_from_is_refused(report, why):
    with pytest.raises(ExternalError, match=why):
        wheels_from_report(report, PipGroup("s", ("x",), None), [])


# ---------------------------------------------------------------- what a pinned step installs


def test_a_pinned_step_installs_each_wheel_by_path_offline_and_by_pin_or_url_against_an_index():
    wheels = [wheel(TORCH), wheel("vllm-0.4.0-cp310-cp310-manylinux1_x86_64.whl", url="https://x/vllm-0.4.0-cp310-cp310-manylinux1_x86_64.whl")]
    offline = step_requirements("build-torch", wheels, ("torch==2.13.0+cpu",), offline=True).splitlines()
    assert offline[1:] == [f"/opt/envkit/wheelhouse/{TORCH} --hash=sha256:{wheels[0].sha256}",
                           f"/opt/envkit/wheelhouse/{wheels[1].filename} --hash=sha256:{wheels[1].sha256}"]
    mirror = step_requirements("build-torch", wheels, ("torch==2.13.0+cpu", "http://mirror/vllm-0.4.0-cp310-cp310-manylinux1_x86_64.whl"),
                               offline=False).splitlines()
    assert offline[0].startswith("# ") and mirror[1:] == [f"torch==2.13.0+cpu --hash=sha256:{wheels[0].sha256}",
                                                         f"http://mirror/{wheels[1].filename} --hash=sha256:{wheels[1].sha256}"]


def test_a_lock_for_other_pip_steps_than_the_plans_is_refused():
    plan = generate(CPU).plan
    with pytest.raises(InputError, match="pins no wheels for step build-torch; pins wheels for step build-vllm, which this plan lacks"):
        pinned_requirements(plan, [wheel(TORCH, step="build-vllm")])
    assert pinned_requirements(plan, []) == {}


def test_generate_with_a_pinned_lock_installs_with_require_hashes_offline_and_against_an_index(tmp_path):
    lock = pinned_lock(tmp_path)
    for offline, source in ((True, "--no-index --find-links /opt/envkit/wheelhouse "), (False, "--extra-index-url https://download.pytorch.org/whl/cpu ")):
        g = generate(ResolveFlags(), lock=str(lock), opts=Options(offline=offline))
        assert not isinstance(g, lock_app.Unsolved)
        text = g.files["Dockerfile"].decode()
        assert ("COPY envkit/requirements/build-torch.txt /opt/envkit/requirements/\n"
                f"RUN pip install --no-cache-dir --require-hashes --no-deps {source}-r /opt/envkit/requirements/build-torch.txt\n") in text
        requirements = g.files["envkit/requirements/build-torch.txt"].decode()
        assert f"--hash=sha256:{sha(CONTENT[FILELOCK])}" in requirements and len(requirements.splitlines()) == 3
        carried = Lock.from_json(json.loads(g.files["envkit.lock.json"]))
        assert carried.wheels == read_lock(str(lock)).wheels and carried.images == read_lock(str(lock)).images and carried.offline is offline


# ---------------------------------------------------------------- envkit lock, with a runner in place of pip


def fake_pip(reports: dict[str, dict[str, Any]], calls: list[list[str]]) -> Callable[[list[str], Callable[[str], None], str], None]:
    def run(args: list[str], say: Callable[[str], None], fix: str) -> None:
        calls.append(args)
        out = args[args.index("--report") + 1]
        Path(out).write_text(json.dumps(reports[Path(out).stem]))
    return run


def test_envkit_lock_pins_every_wheel_and_the_base_image_and_writes_the_lock_whole(tmp_path):
    reports = {"build-torch": {"install": [report_item("torch", "2.13.0+cpu", f"file:///w/{TORCH}", "1" * 64, direct=True),
                                           report_item("filelock", "4.3.1", f"https://f/{FILELOCK}", "2" * 64)]}}
    calls: list[list[str]] = []
    engine = FakeEngine({BASE: (BASE_ID, [f"debian@sha256:{'c' * 64}"])})
    out = tmp_path / "envkit.lock.json"
    done = lock_app.make_lock_file(CPU, out=str(out), engine=engine, runner=fake_pip(reports, calls))
    assert isinstance(done, lock_app.Locked)
    doc = validate(json.loads(out.read_text()), "lock")
    assert doc["schema"] == 2 and doc["query"] == {"platform": "cpu", "python": "3.11", "torch": "2.13.0"}
    assert [(w["filename"], w["sha256"], w["step"], w["url"]) for w in doc["wheels"]] == [
        (FILELOCK, "2" * 64, "build-torch", None), (TORCH, "1" * 64, "build-torch", None)]
    assert doc["images"] == [{"ref": BASE, "id": BASE_ID, "digest": f"debian@sha256:{'c' * 64}"}]
    assert len(calls) == 1 and calls[0][-1] == "torch==2.13.0+cpu"
    assert done.summary() == f"wrote {out}: 2 wheels by sha256 (build-torch 2), 1 base image(s) by digest"
    assert [p.name for p in tmp_path.iterdir()] == ["envkit.lock.json"]  # no temporary file left beside it


def test_envkit_lock_refuses_a_directory_as_output_before_any_work(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        lock_app.make_lock_file(CPU, out=str(tmp_path), engine=FakeEngine({}), runner=fake_pip({}, []))
    with pytest.raises(InputError, match="does not exist"):
        lock_app.make_lock_file(CPU, out=str(tmp_path / "no" / "lock.json"), engine=FakeEngine({}), runner=fake_pip({}, []))


def test_envkit_lock_names_a_base_image_the_engine_lacks_and_cannot_pull(tmp_path):
    reports = {"build-torch": {"install": [report_item("torch", "2.13.0+cpu", f"file:///w/{TORCH}", "1" * 64)]}}
    with pytest.raises(ExternalError, match=f"base image {BASE} is not on this engine and cannot be pulled"):
        lock_app.make_lock_file(CPU, out=str(tmp_path / "l.json"), engine=FakeEngine({}), runner=fake_pip(reports, []))
    assert not (tmp_path / "l.json").exists()


# ---------------------------------------------------------------- bundle --lock: exactly the lock's wheels


def test_bundle_downloads_the_locked_wheels_with_require_hashes_and_refuses_one_that_differs(tmp_path):
    lock = read_lock(str(pinned_lock(tmp_path)))
    plan = generate(ResolveFlags(), lock=str(pinned_lock(tmp_path)), opts=Options(offline=True)).plan  # type: ignore[union-attr]
    calls: list[list[str]] = []

    def downloads(content: dict[str, bytes]) -> Callable[[list[str], Callable[[str], None], str], None]:
        def run(args: list[str], say: Callable[[str], None], fix: str) -> None:
            calls.append(args)
            dest = Path(args[args.index("--dest") + 1])
            for filename, data in content.items():
                (dest / filename).write_bytes(data)
        return run

    out = tmp_path / "b"
    downloaded, reused = lock_app.fetch_locked_wheels(plan, lock, out, (), lambda s: None, downloads(CONTENT))
    assert downloaded == [f"wheelhouse/{FILELOCK}", f"wheelhouse/{TORCH}"] and reused == []
    args = calls[0]
    assert {"--require-hashes", "--no-deps"} <= set(args) and args[args.index("--extra-index-url") + 1] == "https://download.pytorch.org/whl/cpu"
    with pytest.raises(ExternalError) as exc:
        lock_app.fetch_locked_wheels(plan, lock, out, (), lambda s: None, downloads({**CONTENT, FILELOCK: b"another file"}))
    assert exc.value.exit_code == 4 and f"wheelhouse/{FILELOCK} has sha256 {sha(b'another file')[:16]}" in exc.value.message


def test_download_rounds_pin_a_name_twice_in_two_rounds_and_prefer_a_local_file():
    a = wheel("einops-0.7.0-py3-none-any.whl", step="build-tools", index=None)
    b = wheel("einops-0.8.0-py3-none-any.whl", step="build-vllm", index=None)
    t = wheel(TORCH)
    rounds = download_rounds([a, t, b, a], {TORCH: "/vendor/" + TORCH})
    assert rounds == [[f"einops==0.7.0 --hash=sha256:{a.sha256}", f"/vendor/{TORCH} --hash=sha256:{t.sha256}"],
                      [f"einops==0.8.0 --hash=sha256:{b.sha256}"]]


PIP_MISMATCH = """ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package versions, please update the hashes. Otherwise, examine the package contents carefully; someone may have tampered with them.
    mpmath==1.3.0 from file:///opt/pypi/files/mpmath-1.3.0-py3-none-any.whl#sha256=a0b2b9fe80bbcd81a6647ff13108738cfb482d481d826cc0e02f5b35e5c88d2c (from -r r.txt (line 1)):
        Expected sha256 0000000000000000000000000000000000000000000000000000000000000000
             Got        a0b2b9fe80bbcd81a6647ff13108738cfb482d481d826cc0e02f5b35e5c88d2c
"""


def test_pips_hash_refusal_is_read_into_the_wheel_it_names():
    (m,) = hash_mismatches(PIP_MISMATCH.splitlines())
    assert m.requirement == "mpmath==1.3.0" and m.filename == "mpmath-1.3.0-py3-none-any.whl"
    assert m.expected == "0" * 64 and m.got.startswith("a0b2b9fe")


def test_pip_run_names_the_refused_wheel(monkeypatch):
    from envkit.adapters import pip

    class Proc:
        stdout = iter(line + "\n" for line in PIP_MISMATCH.splitlines())

        def wait(self) -> int:
            return 1

        def __enter__(self) -> "Proc":
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr(pip.subprocess, "Popen", lambda *a, **k: Proc())
    with pytest.raises(ExternalError) as exc:
        pip.run(["download", "-r", "x"], lambda s: None, "fix")
    assert "mpmath==1.3.0 (mpmath-1.3.0-py3-none-any.whl) has sha256 a0b2b9fe80bbcd81..., the lock pins 0000000000000000..." \
        in exc.value.message


def test_bundle_locked_without_a_pinned_lock_is_refused_before_anything_is_written(tmp_path):
    from envkit.app.bundle import make_bundle

    with pytest.raises(InputError, match="bundle --locked holds the build to a lock: --lock is missing"):
        make_bundle(CPU, out=str(tmp_path / "b"), locked=True, engine=FakeEngine({}))  # type: ignore[arg-type]
    unpinned = tmp_path / "plain.json"
    unpinned.write_bytes(generate(CPU).files["envkit.lock.json"])
    with pytest.raises(InputError, match="pins no wheels"):
        make_bundle(ResolveFlags(), lock=str(unpinned), out=str(tmp_path / "b"), locked=True, engine=FakeEngine({}))  # type: ignore[arg-type]
    assert not (tmp_path / "b").exists()


# ---------------------------------------------------------------- build --locked


def test_a_bundle_that_matches_its_lock_passes(tmp_path):
    lock = pinned_lock(tmp_path)
    bundle = make_bundle_dir(tmp_path, lock)
    assert lock_app.check_bundle(bundle, None, None).pinned
    assert lock_app.check_bundle(bundle, str(lock), None).pinned


def test_a_changed_wheel_whose_manifest_entry_was_changed_too_is_caught_by_the_lock(tmp_path):
    """The lock, not the manifest: the wheel and its manifest entry both rewritten, only the lock catches it (exit 5)."""
    bundle = make_bundle_dir(tmp_path, pinned_lock(tmp_path), content={**CONTENT, FILELOCK: b"a small wheeL"})
    with pytest.raises(PreflightError) as exc:
        lock_app.check_bundle(bundle, None, None)
    assert exc.value.exit_code == 5
    assert f"wheelhouse/{FILELOCK} has sha256 {sha(b'a small wheeL')[:16]}..., the lock pins {sha(CONTENT[FILELOCK])[:16]}..." \
        in exc.value.message and "envkit bundle --lock" in exc.value.fix


@pytest.mark.parametrize("change, why", [
    (dict(content={TORCH: CONTENT[TORCH]}), f"missing: wheelhouse/{FILELOCK} (filelock 4.3.1, locked for step build-torch)"),
    (dict(image_id="sha256:" + "d" * 64), f"base image {BASE} is sha256:dddddddddddddddd... in the bundle's manifest, the lock pins sha256:bbbbbbbbbbbbbbbb..."),
])
def test_a_bundle_missing_a_wheel_or_holding_another_base_image_is_refused(tmp_path, change, why):
    bundle = make_bundle_dir(tmp_path, pinned_lock(tmp_path), **change)
    with pytest.raises(PreflightError, match="no longer matches the lock") as exc:
        lock_app.check_bundle(bundle, None, None)
    assert why in exc.value.message


def test_a_bundle_made_from_another_lock_is_refused_against_the_lock_given(tmp_path):
    bundle = make_bundle_dir(tmp_path, pinned_lock(tmp_path))
    other = pinned_lock(tmp_path, name="other.json", wheels=[wheel(TORCH), wheel(FILELOCK, digest="e" * 64)])
    with pytest.raises(PreflightError) as exc:
        lock_app.check_bundle(bundle, str(other), None)
    assert "its envkit.lock.json pins other wheels" in exc.value.message and f"wheelhouse/{FILELOCK} has sha256" in exc.value.message


def test_a_changed_matrix_is_refused_only_when_it_resolves_the_lock_differently(tmp_path):
    same = pinned_lock(tmp_path, name="same.json", edit=lambda d: d.update(matrix_sha256="0" * 64))
    bundle = make_bundle_dir(tmp_path, same)
    assert lock_app.check_bundle(bundle, None, None).pinned  # another matrix, the same solution
    lock = read_lock(str(same))
    changed = Lock.from_json({**lock.to_json(), "solution": {**lock.solution.to_json(), "python": "3.12"}})
    assert lock_app.matrix_problems(changed, "x.json", None) == [
        "lock file x.json resolves differently with this matrix (changed: python)"]


def test_an_unpinned_bundle_is_refused_by_build_locked(tmp_path):
    plain = tmp_path / "plain.json"
    plain.write_bytes(generate(CPU).files["envkit.lock.json"])
    bundle = make_bundle_dir(tmp_path, plain)
    with pytest.raises(PreflightError, match="pins no wheels"):
        lock_app.check_bundle(bundle, None, None)


def test_build_request_takes_lock_offline_only_with_locked(tmp_path):
    lock = pinned_lock(tmp_path)
    bundle = make_bundle_dir(tmp_path, lock, content={TORCH: b"x"})
    with pytest.raises(InputError, match="--lock \\(but with --locked\\)"):
        build(BuildRequest(offline=True, bundle_dir=str(bundle), lock=str(lock)))
    with pytest.raises(PreflightError, match=re.escape(f"wheelhouse/{TORCH} has sha256")):
        build(BuildRequest(offline=True, bundle_dir=str(bundle), lock=str(lock), locked=True, dry_run=True))


def test_mirror_build_locked_needs_a_pinned_lock_and_the_locked_base_image():
    plan = generate(CPU).plan  # type: ignore[union-attr]
    with pytest.raises(InputError, match="--lock is missing"):
        lock_app.check_mirror_build(plan, None, lambda s: None, FakeEngine({}))  # type: ignore[arg-type]


def test_mirror_build_locked_refuses_another_base_image_with_exit_2(tmp_path):
    plan = generate(CPU).plan  # type: ignore[union-attr]
    lock = pinned_lock(tmp_path)
    lock_app.check_mirror_build(plan, str(lock), lambda s: None, FakeEngine({BASE: (BASE_ID, [])}))  # type: ignore[arg-type]
    with pytest.raises(InputError) as exc:
        lock_app.check_mirror_build(plan, str(lock), lambda s: None, FakeEngine({BASE: ("sha256:" + "f" * 64, [])}))  # type: ignore[arg-type]
    assert exc.value.exit_code == 2 and f"base image {BASE} is sha256:ffffffffffffffff... in this engine" in exc.value.message


# ---------------------------------------------------------------- the command line


def envkit(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock"}
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


def test_the_lock_command_is_listed_with_its_examples():
    p = envkit("lock", "--help")
    assert p.returncode == 0 and "--find-links" in p.stdout and "envkit lock --platform cpu" in p.stdout
    assert "--locked" in envkit("build", "--help").stdout and "--locked" in envkit("bundle", "--help").stdout


def test_the_lock_command_without_an_engine_fails_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "l.json"
    p = envkit("lock", "--platform", "cpu", "--torch", "2.13.0", "-o", str(out))
    assert p.returncode == 4 and p.stderr.startswith("envkit: error: no container engine answers") and "Traceback" not in p.stderr
    assert not out.exists()


def test_build_offline_locked_with_an_unpinned_bundle_exits_5(tmp_path):
    plain = tmp_path / "plain.json"
    plain.write_bytes(generate(CPU).files["envkit.lock.json"])
    bundle = make_bundle_dir(tmp_path, plain)
    p = envkit("build", "--offline", "--bundle", str(bundle), "--locked", "--json")
    assert p.returncode == 5 and "pins no wheels" in p.stderr and json.loads(p.stdout)["error"]["exit_code"] == 5


def test_a_bundle_whose_plan_is_nested_100000_deep_is_checked_without_a_recursion_error(tmp_path):
    """The independent review: check_bundle read envkit.plan.json with a bare json.loads (RecursionError, exit 70)."""
    bundle = make_bundle_dir(tmp_path, pinned_lock(tmp_path))
    (bundle / "envkit.plan.json").write_text("[" * 100_000)
    assert lock_app.check_bundle(bundle, None, None).pinned  # the images come from the manifest; the preflight names the plan


# ---------------------------------------------------------------- issue 15: the lock records --toolkit pip

def test_a_lock_made_with_toolkit_pip_replays_with_it_and_older_locks_read_as_image(tmp_path):
    from envkit.model.plan import Options

    flags = ResolveFlags(gpu="H200", cuda="13.0", torch="2.11.0", kernels="rotary", kernels_from="2.7.4.post1")
    first = generate(flags, opts=Options(offline=True, toolkit="pip"), out=str(tmp_path / "a"))
    doc = json.loads((tmp_path / "a" / "envkit.lock.json").read_text())
    assert doc["generate"]["toolkit"] == "pip"
    again = generate(ResolveFlags(), lock=str(tmp_path / "a" / "envkit.lock.json"), opts=Options(offline=True), out=str(tmp_path / "b"))
    assert again.plan.toolkit == "pip" and again.plan.stages == first.plan.stages
    assert (tmp_path / "b" / "Dockerfile").read_text().split("\n", 3)[3] == (tmp_path / "a" / "Dockerfile").read_text().split("\n", 3)[3]
    overridden = generate(ResolveFlags(), lock=str(tmp_path / "a" / "envkit.lock.json"), opts=Options(offline=True, toolkit="image"))
    assert overridden.plan.toolkit == "image"
    image = generate(flags, opts=Options(offline=True), out=str(tmp_path / "c"))
    assert "toolkit" not in json.loads((tmp_path / "c" / "envkit.lock.json").read_text())["generate"]  # old locks stay as they were
    assert image.plan.toolkit == "image"
    doc["generate"]["toolkit"] = "conda"
    with pytest.raises(ValueError, match="generate.toolkit 'conda'"):
        Lock.from_json(doc)


def test_the_hosts_pip_sources_are_said_with_where_they_are_set_and_credentials_redacted():
    """Newcomer review 3, D14: bundle ran pip download with this host's pip.conf and PIP_FIND_LINKS and said nothing."""
    from envkit.adapters.pip import where_from

    listed = "\n".join([":env:.cert='/etc/ssl/certs/ca-certificates.crt'", ":env:.find-links='/opt/wheels'",
                        "global.extra-index-url='file:///opt/pypi/simple https://bob:s3cr3t-token@mirror.corp.example/simple'",
                        "user.index-url='https://mirror.corp.example/simple'", "global.timeout='60'"])
    lines = where_from(listed)
    assert lines[0] == "find-links = /opt/wheels (PIP_FIND_LINKS)"
    assert lines[1].startswith("extra-index-url = file:///opt/pypi/simple https://") and lines[1].endswith("(pip.conf [global])")
    assert "s3cr3t-token" not in lines[1] and "***" in lines[1]
    assert lines[2] == "index-url = https://mirror.corp.example/simple (pip.conf [user])" and len(lines) == 3


def test_a_mirror_build_locked_generates_once_and_builds_the_context_it_just_wrote(tmp_path, monkeypatch):
    """build --mirror --locked: one generate, checked against the lock before anything is written, then written whole;
    the build takes that plan and solution as they are (nothing read back from the files it just wrote)."""
    from envkit.app import build as build_app

    site = Path(__file__).parent / "golden" / "sites" / "intranet.toml"
    generated: list[Any] = []
    real = build_app.generate_pip
    monkeypatch.setattr(build_app, "generate_pip", lambda *a, **k: generated.append(k.get("out")) or real(*a, **k))
    checked: list[bool] = []
    monkeypatch.setattr(build_app, "check_mirror_build", lambda plan, lock, say: checked.append(not (tmp_path / "ctx").exists()))
    seen: dict[str, Any] = {}
    monkeypatch.setattr(build_app, "build_context", lambda context, **k: seen.update(context=context, **k) or "built")
    req = build_app.BuildRequest(lock=str(pinned_lock(tmp_path)), mirror=str(site), out=str(tmp_path / "ctx"), locked=True)
    assert build_app.build(req) == "built"
    assert generated == [None] and checked == [True]
    made = seen["made"]
    assert seen["context"] == tmp_path / "ctx" and made.out == str(tmp_path / "ctx")
    assert {p: (tmp_path / "ctx" / p).read_bytes() for p in made.files} == made.files


def test_the_preflight_takes_the_plan_it_is_given_and_reads_none_back(tmp_path, monkeypatch):
    from envkit.app import build as build_app

    g = generate(CPU, out=str(tmp_path / "ctx"))
    monkeypatch.setattr(build_app, "read_plan", lambda context: pytest.fail("the plan just written was read back"))
    monkeypatch.setattr(build_app.Engine, "connect", classmethod(lambda cls: (_ for _ in ()).throw(ExternalError("no engine", ""))))
    facts, engine, plan = build_app.collect(tmp_path / "ctx", offline=False, plan=g.plan.document())  # type: ignore[union-attr]
    assert engine is None and facts.engine_error == "no engine"
    assert plan == g.plan.document() and facts.bundle_problems == ()  # type: ignore[union-attr]
