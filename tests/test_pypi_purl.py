"""PyPI facts cited as purls (issue 30: no registry host name in the repository), and the bundle fetching a carried PyPI file
named by its purl: looked up on the site's pip index (a real PEP 503 index on loopback here) or on pip's own default one,
its sha256 checked against the purl's."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import subprocess
import sys
import zipfile
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import pytest

from envkit.adapters import pip
from envkit.app import bundle
from envkit.app.generate import generate
from envkit.errors import ExternalError
from envkit.model.flags import ResolveFlags
from envkit.model.plan import Carried, Options
from envkit.model.purl import PyPIRef, parse_pypi, pypi, pypi_file
from servers import serve, write_simple_index

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args, want", [
    (("torch",), "pkg:pypi/torch"),
    (("Flash_Attn", "2.7.4.post1"), "pkg:pypi/flash-attn@2.7.4.post1"),
    (("torch", "2.5.1+cu118"), "pkg:pypi/torch@2.5.1%2Bcu118"),
])
def test_a_release_purl_has_the_normalized_name_and_the_version_percent_encoded(args, want):
    assert pypi(*args) == want
    ref = parse_pypi(f"see {want} (its files)")
    assert ref is not None and ref.version == (args[1] if len(args) > 1 else None)


@pytest.mark.parametrize("file_name, name, version", [
    ("huggingface_hub-2.4.0-py3-none-any.whl", "huggingface-hub", "2.4.0"),
    ("flash_attn-2.8.3.post2.tar.gz", "flash-attn", "2.8.3.post2"),
    ("vllm-0.20.1-1-cp38-abi3-manylinux_2_35_aarch64.whl", "vllm", "0.20.1"),
])
def test_a_file_purl_carries_its_name_and_sha256_and_reads_back(file_name, name, version):
    sha = "ab" * 32
    text = pypi_file(file_name, sha)
    assert text == f"pkg:pypi/{name}@{version}?checksum=sha256:{sha}&file_name={file_name}"
    assert parse_pypi(text + " (METADATA)") == PyPIRef(name, version, file_name, sha)


def test_a_name_that_is_no_distribution_file_is_refused():
    with pytest.raises(ValueError, match="not a wheel's or an sdist's file name"):
        pypi_file("README.md")


def test_pips_default_index_is_what_pip_itself_says():
    p = subprocess.run([sys.executable, "-m", "pip", "download", "--help"], capture_output=True, text=True, timeout=120)
    assert pip.default_index() in p.stdout  # pip's help names its default --index-url


def _index_server(root: Path):
    """A PEP 503 index served from root (a project's page is its index.html), with the paths asked, in order."""
    seen: list[str] = []

    class Index(SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            seen.append(self.path)
            super().do_GET()

    return serve(functools.partial(Index, directory=str(root))), seen


def _stand_in_wheel(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    w = d / "ftllm-1.9.0-py3-none-manylinux_2_31_x86_64.whl"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr("ftllm/__init__.py", "")
    return w


def _offline_fastllm_plan(index: str):
    g = generate(ResolveFlags.from_mapping({"platform": "cpu", "torch": "2.13.0", "engine": "fastllm"}), opts=Options(offline=True))
    item = next(c for c in g.plan.carried if c.path.startswith("wheelhouse/ftllm-"))
    assert item.origin.startswith("pkg:pypi/ftllm@1.9.0?checksum=sha256:")  # the matrix's purl, no file URL
    site = dataclasses.replace(g.plan.site, path="site.toml", pip_index=index)
    return g.plan, item, site


def _fetch(plan, out: Path) -> bundle.BundleReport:
    report = bundle.BundleReport(out)
    bundle.fetch_pypi_files(plan, out, report, lambda _line: None, lambda _name: contextlib.nullcontext(lambda *_a: None))
    return report


def test_the_bundle_fetches_a_carried_pypi_file_from_the_sites_index_by_its_purl_and_checks_its_sha256(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    wheel = _stand_in_wheel(tmp_path / "wheels")
    write_simple_index(wheel.parent, tmp_path / "index")
    server_, seen = _index_server(tmp_path / "index")
    with server_ as server:
        index = f"http://127.0.0.1:{server.server_port}/simple"
        plan, item, site = _offline_fastllm_plan(index)
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        ours = Carried(item.path, item.what, pypi_file(wheel.name, sha))
        plan = dataclasses.replace(plan, site=site, carried=tuple(ours if c is item else c for c in plan.carried))
        out = tmp_path / "bundle"
        assert _fetch(plan, out).downloaded == [item.path]
        assert hashlib.sha256((out / item.path).read_bytes()).hexdigest() == sha
        assert _fetch(plan, out).reused == [item.path]  # a verified file: nothing asked again
    assert seen == ["/simple/ftllm/", f"/files/{wheel.name}"]


def test_an_index_listing_the_file_with_another_sha256_is_refused_before_the_download(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    write_simple_index(_stand_in_wheel(tmp_path / "wheels").parent, tmp_path / "index")
    server_, seen = _index_server(tmp_path / "index")
    with server_ as server:
        plan, item, site = _offline_fastllm_plan(f"http://127.0.0.1:{server.server_port}/simple")
        with pytest.raises(ExternalError, match="the index lists ftllm-1.9.0-py3-none-manylinux_2_31_x86_64.whl with sha256 .*, not the"):
            _fetch(dataclasses.replace(plan, site=site), tmp_path / "bundle")
    assert seen == ["/simple/ftllm/"] and not (tmp_path / "bundle" / item.path).exists()


def _stand_in_sdist(d: Path) -> Path:
    import io
    import tarfile

    d.mkdir(parents=True, exist_ok=True)
    sdist = d / "flash_attn-2.7.4.post1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        data = b"from setuptools import setup\n"
        info = tarfile.TarInfo("flash_attn-2.7.4.post1/setup.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return sdist


def _sdist_plan(index: str, sha: str):
    plan, _item, site = _offline_fastllm_plan(index)
    item = Carried("sources/flash_attn-2.7.4.post1.tar.gz", "flash-attn 2.7.4.post1 sdist",
                   pypi_file("flash_attn-2.7.4.post1.tar.gz", sha))
    return dataclasses.replace(plan, site=site, carried=(item,)), item


def _fetch_sources(plan, out: Path) -> bundle.BundleReport:
    report = bundle.BundleReport(out)
    bundle.fetch_sources(plan, out, report, lambda _line: None, lambda _name: contextlib.nullcontext(lambda *_a: None))
    return report


def test_the_flash_attn_sdist_is_checked_by_the_sha256_its_matrix_row_cites(tmp_path, monkeypatch):
    """The sdist's origin is the flash-attn row's purl with its sha256: the bundle refuses an index that lists another one,
    downloads the cited file, and asks nothing once it holds it."""
    monkeypatch.chdir(ROOT)
    sdist = _stand_in_sdist(tmp_path / "dists")
    index_root = tmp_path / "index"
    (index_root / "files").mkdir(parents=True)
    (index_root / "files" / sdist.name).write_bytes(sdist.read_bytes())
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    page = index_root / "simple" / "flash-attn"
    page.mkdir(parents=True)
    (page / "index.html").write_text(f'<a href="../../files/{sdist.name}#sha256={sha}">{sdist.name}</a>\n')
    server_, seen = _index_server(index_root)
    with server_ as server:
        index = f"http://127.0.0.1:{server.server_port}/simple"
        plan, item = _sdist_plan(index, "0" * 64)
        with pytest.raises(ExternalError, match=f"the index lists {sdist.name} with sha256 {sha}, not the 0{{64}}"):
            _fetch_sources(plan, tmp_path / "refused")
        assert not (tmp_path / "refused" / item.path).exists()
        plan, item = _sdist_plan(index, sha)
        out = tmp_path / "bundle"
        assert _fetch_sources(plan, out).downloaded == [item.path]
        asked = len(seen)
        assert _fetch_sources(plan, out).reused == [item.path] and len(seen) == asked
    assert hashlib.sha256((out / item.path).read_bytes()).hexdigest() == sha


def test_a_source_build_carries_the_sdist_by_the_purl_its_row_cites():
    g = generate(ResolveFlags.from_mapping({"gpu": "H200", "cuda": "12.8", "torch": "2.7.0", "flash_attn": "2.7.4.post1"}),
                 opts=Options(offline=True))
    (item,) = [c for c in g.plan.carried if c.path == "sources/flash_attn-2.7.4.post1.tar.gz"]
    ref = parse_pypi(item.origin)
    assert ref is not None and ref.file_name == "flash_attn-2.7.4.post1.tar.gz" and ref.sha256 and len(ref.sha256) == 64


def test_a_mirror_build_fetches_the_sdist_it_compiles_through_the_sites_index_and_a_dry_run_only_names_it(tmp_path, monkeypatch):
    """Newcomer review 3, D5: `build --mirror` has no bundle, so the sdist its build stage compiles comes through the
    site's pip index, checked by the sha256 its purl cites; a dry run fetches nothing and the preflight says what the
    build will fetch; a file already there that is not the cited one is named, never passed as a manifest check."""
    from envkit.app.build import carried_problem, prepare_carried
    from envkit.app.reporter import Silent
    from envkit.core.preflight import Facts, judge

    monkeypatch.chdir(ROOT)
    sdist = _stand_in_sdist(tmp_path / "dists")
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    index_root = tmp_path / "index"
    (index_root / "files").mkdir(parents=True)
    (index_root / "files" / sdist.name).write_bytes(sdist.read_bytes())
    (index_root / "simple" / "flash-attn").mkdir(parents=True)
    (index_root / "simple" / "flash-attn" / "index.html").write_text(f'<a href="../../files/{sdist.name}#sha256={sha}">{sdist.name}</a>\n')
    server_, seen = _index_server(index_root)
    context = tmp_path / "ctx"
    (context / "sources").mkdir(parents=True)
    with server_ as server:
        plan, item = _sdist_plan(f"http://127.0.0.1:{server.server_port}/simple", sha)
        (context / item.path).write_bytes(b"abcdef")  # a stand-in someone put there
        bad = carried_problem(context, item.path, item.what, item.origin)
        assert len(bad) == 1 and f"not the {sha} its origin" in bad[0]
        assert prepare_carried(plan, context, True, Silent()) == (item.path,) and seen == []  # the dry run asks nothing
        assert prepare_carried(plan, context, False, Silent()) == ()
    assert seen == ["/simple/flash-attn/", f"/files/{sdist.name}"]
    assert hashlib.sha256((context / item.path).read_bytes()).hexdigest() == sha
    assert carried_problem(context, item.path, item.what, item.origin) == ()
    facts = dict(context=str(context), engine_error=None, free_disk=None, engine_memory=None, need_disk=0, max_jobs=None,
                 nvcc_threads=1, compiles=False, offline=False)
    refused = judge(Facts(bundle_problems=bad, **facts))[0]
    assert (refused.name, refused.ok) == ("context", False) and "manifest" not in refused.detail + refused.fix
    assert "from your mirror" in refused.fix and "envkit bundle" not in refused.fix
    shown = judge(Facts(bundle_problems=(), to_fetch=(item.path,), **facts))[0]
    assert shown.ok and shown.detail == f"the build fetches through the site first (sha256 checked): {item.path}"
    offline = judge(Facts(bundle_problems=("missing: x",), **{**facts, "offline": True}))[0]
    assert offline.name == "bundle" and "re-run envkit bundle" in offline.fix
