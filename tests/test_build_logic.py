"""The build's pure parts: preflight judgement over plain facts, and the diagnosis of failed logs."""
from __future__ import annotations

import pytest

from envkit.core.preflight import GB, Facts, diagnose, judge
from envkit.core.wheels import platform_tags, find_in_simple_index


def _facts(**kw) -> Facts:
    base = dict(context="b", bundle_problems=(), engine_error=None, free_disk=100 * GB, engine_memory=64 * GB,
                need_disk=10 * GB, max_jobs=None, nvcc_threads=1, compiles=False)
    base.update(kw)
    return Facts(**base)


def test_a_ready_host_passes_every_check():
    assert all(c.ok for c in judge(_facts()))


def test_every_bundle_problem_is_named_and_the_fix_is_to_rebundle():
    checks = judge(_facts(bundle_problems=("missing: wheelhouse/a.whl", "altered: wheelhouse/b.whl (sha256 differs from the manifest)")))
    bundle = next(c for c in checks if c.name == "bundle")
    assert not bundle.ok and "wheelhouse/a.whl" in bundle.detail and "wheelhouse/b.whl" in bundle.detail
    assert "envkit bundle" in bundle.fix


def test_too_little_disk_and_memory_fail_with_numbers():
    checks = {c.name: c for c in judge(_facts(free_disk=1 * GB, compiles=True, max_jobs=16, engine_memory=32 * GB))}
    assert not checks["disk"].ok and "1.0 GB free" in checks["disk"].detail
    assert not checks["memory"].ok and "lower --max-jobs to 6" in checks["memory"].fix


def test_no_engine_is_a_failed_check_not_a_crash():
    c = next(c for c in judge(_facts(engine_error="no container engine answers at unix:///x")) if c.name == "engine")
    assert not c.ok and "DOCKER_HOST" in c.fix


@pytest.mark.parametrize("log,cause", [
    ("  layer_norm: compiled 12/57\ncc1plus: fatal error: Killed signal terminated program cc1plus\n", "OOM"),
    ("/bin/sh: 1: nvcc: not found\n", "nvcc is missing"),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_70'\n", "rejects an arch"),
    ("ImportError: /opt/venv/lib/python3.10/site-packages/flash_attn_2_cuda.so: undefined symbol: _ZN3c105ErrorC2E\n", "ABI"),
    ("ERROR: Could not find a version that satisfies the requirement einops==0.7.0\n", "needed the network"),
    ("W: Failed to fetch http://apt.example/debian/dists/bookworm/InRelease  Temporary failure resolving\n", "needed the network"),
])
def test_known_build_failures_are_recognised_with_a_fix(log, cause):
    found = diagnose("Step 7/20 : RUN something\n" + log)
    assert found is not None and cause in found[0] and found[1]
    assert found[2] in log


def test_an_unknown_failure_is_not_guessed():
    assert diagnose("Step 3/9 : RUN make\nmake: *** [all] Error 2\n") is None


def test_platform_tags_follow_the_target_glibc_not_the_host():
    tags = platform_tags((2, 31))
    assert tags[0] == "manylinux_2_31_x86_64" and "manylinux_2_28_x86_64" in tags
    assert "manylinux_2_35_x86_64" not in tags
    assert {"manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64"} <= set(tags)


def test_sdist_url_and_hash_from_a_pep503_page():
    html = '<a href="../../packages/ab/flash_attn-2.7.4.post1.tar.gz#sha256=' + "a" * 64 + '">flash_attn-2.7.4.post1.tar.gz</a>'
    url, sha = find_in_simple_index(html, "https://index.example/simple/flash-attn/", "flash_attn-2.7.4.post1.tar.gz")
    assert url == "https://index.example/packages/ab/flash_attn-2.7.4.post1.tar.gz" and sha == "a" * 64


def _deb(control: str, member: str = "control.tar.gz") -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = control.encode()
        info = tarfile.TarInfo("./control")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    payload = buf.getvalue()
    out = b"!<arch>\n"
    for name, body in (("debian-binary", b"2.0\n"), (member, payload)):
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body + (b"\n" if len(body) % 2 else b"")
    return out


def test_packages_index_reads_gz_control_and_uses_a_dpkg_sidecar_for_zstd(tmp_path):
    from envkit.adapters.debrepo import write_index

    (tmp_path / "a_1_amd64.deb").write_bytes(_deb("Package: a\nVersion: 1\nArchitecture: amd64"))
    (tmp_path / "b_2_amd64.deb").write_bytes(_deb("unreadable", member="control.tar.zst"))
    (tmp_path / "b_2_amd64.deb.control").write_text("Package: b\nVersion: 2\nArchitecture: amd64\n")
    assert write_index(tmp_path) == 2
    text = (tmp_path / "Packages").read_text()
    assert "Package: a\nVersion: 1" in text and "Package: b\nVersion: 2" in text
    assert "Filename: ./b_2_amd64.deb" in text and "SHA256: " in text
    assert not list(tmp_path.glob("*.control"))


def test_verify_names_missing_altered_and_unexpected_files_anywhere_in_the_bundle(tmp_path):
    import json as _json

    from envkit.adapters.bundle_dir import verify, write_manifest

    (tmp_path / "envkit.lock.json").write_text("{}")
    (tmp_path / "envkit.plan.json").write_text(_json.dumps({"offline": True, "context": [{"path": "wheelhouse/"}, {"path": "sources/a.tar.gz"}]}))
    (tmp_path / "wheelhouse").mkdir()
    (tmp_path / "wheelhouse" / "a.whl").write_bytes(b"a")
    (tmp_path / "wheelhouse" / "b.whl").write_bytes(b"b")
    (tmp_path / "sources").mkdir()
    (tmp_path / "sources" / "a.tar.gz").write_bytes(b"s")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "base.tar").write_bytes(b"i")
    write_manifest(tmp_path, [{"ref": "base:1", "file": "images/base.tar", "id": "sha256:x"}])
    assert verify(tmp_path) == []
    (tmp_path / "wheelhouse" / "a.whl").unlink()
    (tmp_path / "wheelhouse" / "b.whl").write_bytes(b"B")
    (tmp_path / "Dockerfile.evil").write_text("FROM x")
    assert verify(tmp_path) == ["missing: wheelhouse/a.whl", "altered: wheelhouse/b.whl (sha256 differs from the manifest)",
                                "unexpected: Dockerfile.evil (not in the manifest)"]


@pytest.mark.parametrize("manifest", ['{"files": []}', '{"files": {"a": {"sha256": "x"}}}', "[]", "{not json"])
def test_a_malformed_manifest_is_one_problem_not_a_crash(tmp_path, manifest):
    from envkit.adapters.bundle_dir import verify

    (tmp_path / "manifest.json").write_text(manifest)
    assert verify(tmp_path) == ["manifest.json is not a readable envkit manifest"]


def test_an_empty_manifest_beside_an_offline_plan_is_not_a_bundle(tmp_path):
    import json as _json

    from envkit.adapters.bundle_dir import verify

    (tmp_path / "envkit.plan.json").write_text(_json.dumps({"offline": True, "context": [{"path": "wheelhouse/"}]}))
    (tmp_path / "manifest.json").write_text('{"files": {}}')
    problems = verify(tmp_path)
    assert "missing: wheelhouse/ (the plan needs it; the manifest lists nothing under it)" in problems
    assert "missing: images/ (the manifest lists no base image)" in problems


# ---------------------------------------------------------------- issue 15: --export-wheels

def _plan_doc(compiles: bool):
    import types

    return types.SimpleNamespace(compiles_kernels=compiles)


def test_export_wheels_takes_a_new_or_empty_directory(tmp_path):
    from envkit.app.build import check_export_dir

    assert check_export_dir(None, _plan_doc(True)) is None
    assert check_export_dir(str(tmp_path / "new"), _plan_doc(True)) == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    assert check_export_dir(str(tmp_path / "empty"), _plan_doc(True)) == tmp_path / "empty"


@pytest.mark.parametrize("what, says", [("full", "the directory is not empty"), ("file", "not a directory")])
def test_export_wheels_never_overwrites_files(tmp_path, what, says):
    from envkit.app.build import check_export_dir
    from envkit.errors import InputError

    target = tmp_path / "out"
    if what == "full":
        target.mkdir()
        (target / "keep.whl").write_bytes(b"mine")
    else:
        target.write_text("mine")
    with pytest.raises(InputError) as exc:
        check_export_dir(str(target), _plan_doc(True))
    assert says in str(exc.value) and "new or empty directory" in exc.value.fix
    assert (target / "keep.whl").read_bytes() == b"mine" if what == "full" else target.read_text() == "mine"


def test_export_wheels_of_a_plan_that_compiles_nothing_is_refused(tmp_path):
    from envkit.app.build import check_export_dir
    from envkit.errors import InputError

    with pytest.raises(InputError) as exc:
        check_export_dir(str(tmp_path / "out"), _plan_doc(False))
    assert "compiles nothing" in str(exc.value) and not (tmp_path / "out").exists()


class _StreamingEngine:
    """An engine of plain data: the build stream it answers, the images it holds, and the builds it was asked for."""

    def __init__(self, lines: list[str], images: set[str]) -> None:
        self.lines, self.images, self.builds = lines, images, []

    def build(self, context, *, network, buildargs, nocache=False, dockerfile="Dockerfile", **extra):
        self.builds.append(extra.get("target"))
        yield from ({"stream": line + "\n"} for line in self.lines)
        yield {"aux": {"ID": "sha256:" + "f" * 64}}

    def has_image(self, ref: str) -> bool:
        return ref in self.images


DOCKER_STREAM = ["Step 1/5 : FROM docker.io/library/ubuntu:24.04 AS build", " ---> 6d4b3c2a1f00",
                 "Step 2/5 : RUN make", " ---> Running in 0a1b2c3d4e5f", "Removing intermediate container 0a1b2c3d4e5f",
                 " ---> 1a2b3c4d5e6f", "Step 3/5 : FROM docker.io/library/ubuntu:24.04 AS runtime", " ---> 6d4b3c2a1f00",
                 "Step 4/5 : COPY --from=build /opt/venv /opt/venv", " ---> Using cache", " ---> 9f8e7d6c5b4a",
                 "Step 5/5 : CMD [\"python\"]", " ---> 0f0e0d0c0b0a", "Successfully built 0f0e0d0c0b0a"]
PODMAN_STREAM = ["[1/2] STEP 1/2: FROM docker.io/library/ubuntu:24.04 AS build", "[1/2] STEP 2/2: RUN make",
                 "--> 1a2b3c4d5e6", "[2/2] STEP 1/2: FROM docker.io/library/ubuntu:24.04 AS runtime",
                 "[2/2] STEP 2/2: CMD [\"python\"]", "--> Using cache 0f0e0d0c0b0", "--> 0f0e0d0c0b0"]


@pytest.mark.parametrize("stream, build, runtime", [(DOCKER_STREAM, "1a2b3c4d5e6f", "0f0e0d0c0b0a"),
                                                    (PODMAN_STREAM, "1a2b3c4d5e6", "0f0e0d0c0b0")])
def test_a_build_stream_names_the_image_each_stage_ended_with(tmp_path, stream, build, runtime):
    from envkit.adapters.image_build import stream_build

    res = stream_build(_StreamingEngine(stream, set()), tmp_path, "none", {}, lambda line: None)
    assert res.stage_images == {"build": build, "runtime": runtime}
    assert [name for name, _ in res.stages] == ["build", "runtime"]


def test_export_takes_the_build_stage_this_build_left_and_builds_again_only_where_the_engine_dropped_it(tmp_path):
    from envkit.adapters.image_build import stream_build
    from envkit.app.build import build_stage_image
    from envkit.app.reporter import Silent

    kept = _StreamingEngine(DOCKER_STREAM, {"1a2b3c4d5e6f"})
    built = stream_build(kept, tmp_path, "none", {}, lambda line: None)
    assert build_stage_image(kept, tmp_path, built, network="none", buildargs={}, secrets=(), reporter=Silent()) == "1a2b3c4d5e6f"
    assert kept.builds == [None]  # no second pass
    dropped = _StreamingEngine(DOCKER_STREAM, set())
    built = stream_build(dropped, tmp_path, "none", {}, lambda line: None)
    assert build_stage_image(dropped, tmp_path, built, network="none", buildargs={}, secrets=(), reporter=Silent()) == "sha256:" + "f" * 64
    assert dropped.builds == [None, "build"]  # the build stage again, from the layer cache
