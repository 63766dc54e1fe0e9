"""The SBOM and provenance documents from plain facts (core/sbom.py, core/provenance.py): valid CycloneDX 1.6 (the
published schema cyclonedx-python-lib carries), every installed package listed once with its purl, a hash exactly where
a carried file or a pinned wheel vouches for it, the compiled kernels with what they were built from, the same bytes for
the same facts. The real image's SBOM against pip and dpkg inside it: tests/integration (sbom_check.py)."""
from __future__ import annotations

import json

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from envkit.core import provenance, sbom
from envkit.inimage.probe import parse_dpkg_status

STATUS = """Package: adduser
Status: install ok installed
Priority: important
Architecture: all
Version: 3.134
Description: add and remove users
 and groups

Package: libpython3.11-stdlib
Status: install ok installed
Architecture: amd64
Source: python3.11
Version: 3.11.2-6+deb12u8

Package: oldthing
Status: deinstall ok config-files
Architecture: amd64
Version: 1:2.0-1
"""

SHA = {name: name[0] * 64 for name in ("a", "b", "c", "d", "e", "f")}


def inventory(debs=None) -> sbom.Inventory:
    return sbom.Inventory.from_probe({
        "python": {"version": "3.11.2", "distributions": [
            {"name": "torch", "version": "2.13.0+cpu", "installer": "pip"},
            {"name": "pip", "version": "23.0.1", "installer": "pip"},
            {"name": "rotary_emb", "version": "0.1", "installer": "pip"}]},
        "os": {"id": "debian", "version_id": "12"},
        "dpkg": parse_dpkg_status(STATUS) if debs is None else debs})


def facts(**kw) -> sbom.SbomInput:
    base = dict(
        image="envkit/cpu:default", envkit="0.1.0", inventory=inventory(),
        carried=(sbom.CarriedFile("wheelhouse/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", SHA["a"]),
                 sbom.CarriedFile("debs/build/libpython3.11-stdlib_3.11.2-6+deb12u8_amd64.deb", SHA["b"]),
                 sbom.CarriedFile("debs/runtime/libpython3.11-stdlib_3.11.2-6+deb12u8_amd64.deb", SHA["b"]),
                 sbom.CarriedFile("sources/flash_attn-2.7.4.post1.tar.gz", SHA["c"])),
        bases=(sbom.BaseImage("docker.io/library/debian:bookworm-slim", "sha256:" + SHA["d"], frozenset({("adduser", "3.134", "all")})),),
        kernels=(sbom.KernelBuild("rotary_emb", "pkg:pypi/flash-attn@2.7.4.post1?checksum=sha256:" + SHA["c"]
                                  + "&file_name=flash_attn-2.7.4.post1.tar.gz", (("arch-list", "9.0"), ("cxx11abi", "true"))),),
        sources=(("sources/flash_attn-2.7.4.post1.tar.gz",
                  "pkg:pypi/flash-attn@2.7.4.post1?checksum=sha256:" + SHA["c"] + "&file_name=flash_attn-2.7.4.post1.tar.gz"),),
        pinned=(("rotary_emb-0.1-cp312-cp312-linux_x86_64.whl", SHA["e"]),),
        properties=(("envkit:lock.sha256", SHA["f"]),))
    base.update(kw)
    return sbom.SbomInput(**base)


def by_name(doc: dict) -> dict:
    return {c["name"]: c for c in doc["components"]}


def prop(c: dict, name: str):
    return next((p["value"] for p in c["properties"] if p["name"] == name), None)


def test_dpkg_status_gives_every_package_with_its_state_and_source():
    rows = parse_dpkg_status(STATUS)
    assert [(r["name"], r["version"], r["arch"], r["source"], r["state"]) for r in rows] == [
        ("adduser", "3.134", "all", None, "installed"),
        ("libpython3.11-stdlib", "3.11.2-6+deb12u8", "amd64", "python3.11", "installed"),
        ("oldthing", "1:2.0-1", "amd64", None, "config-files")]


def test_only_installed_debs_are_in_the_inventory():
    assert [d.name for d in inventory().debs] == ["adduser", "libpython3.11-stdlib"]


def test_the_document_is_valid_cyclonedx_1_6():
    text = sbom.canonical(sbom.sbom(facts())).decode()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None


def test_a_package_has_a_hash_only_where_a_carried_file_or_pinned_wheel_vouches_for_it():
    c = by_name(sbom.sbom(facts()))
    assert c["torch"]["hashes"] == [{"alg": "SHA-256", "content": SHA["a"]}]
    assert c["torch"]["purl"] == "pkg:pypi/torch@2.13.0%2Bcpu"
    assert prop(c["torch"], "envkit:carried") == "wheelhouse/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert "hashes" not in c["pip"] and prop(c["pip"], "envkit:carried") is None
    assert c["rotary_emb"]["hashes"] == [{"alg": "SHA-256", "content": SHA["e"]}]  # the exported wheel's


def test_a_carried_deb_names_the_final_stages_copy_and_a_base_images_deb_its_image():
    c = by_name(sbom.sbom(facts()))
    lib = c["libpython3.11-stdlib"]
    assert prop(lib, "envkit:carried") == "debs/runtime/libpython3.11-stdlib_3.11.2-6+deb12u8_amd64.deb"
    assert lib["purl"] == "pkg:deb/debian/libpython3.11-stdlib@3.11.2-6+deb12u8?arch=amd64&distro=debian-12&upstream=python3.11"
    assert prop(c["adduser"], "envkit:base-image") == "docker.io/library/debian:bookworm-slim" and "hashes" not in c["adduser"]


def test_an_epoch_in_a_carried_debs_file_name_is_matched():
    inv = inventory([{"name": "libx", "version": "1:2.0-1", "arch": "amd64", "state": "installed"}])
    doc = sbom.sbom(facts(inventory=inv, carried=(sbom.CarriedFile("debs/runtime/libx_1%3a2.0-1_amd64.deb", SHA["b"]),)))
    assert by_name(doc)["libx"]["hashes"][0]["content"] == SHA["b"]


def test_a_compiled_kernel_names_its_sdist_and_settings_and_depends_on_it():
    doc = sbom.sbom(facts())
    c = by_name(doc)
    kernel = c["rotary_emb"]
    assert prop(kernel, "envkit:kind") == "kernel"
    assert prop(kernel, "envkit:build.arch-list") == "9.0" and prop(kernel, "envkit:build.cxx11abi") == "true"
    source = c["flash-attn"]
    assert prop(source, "envkit:kind") == "source" and source["hashes"][0]["content"] == SHA["c"]
    assert {"ref": kernel["bom-ref"], "dependsOn": [source["bom-ref"]]} in doc["dependencies"]
    image = next(d for d in doc["dependencies"] if d["ref"] == "image")
    assert source["bom-ref"] not in image["dependsOn"] and kernel["bom-ref"] in image["dependsOn"]


def test_the_same_facts_give_the_same_bytes_and_other_facts_another_serial():
    one, two = sbom.canonical(sbom.sbom(facts())), sbom.canonical(sbom.sbom(facts()))
    assert one == two and "timestamp" not in one.decode()
    other = sbom.sbom(facts(image="envkit/cpu:other"))
    assert other["serialNumber"] != json.loads(one)["serialNumber"]


@pytest.mark.parametrize("ref, purl", [
    ("docker.io/library/debian:bookworm-slim", "pkg:docker/library/debian@sha256:X"),
    ("debian:12", "pkg:docker/debian@sha256:X"),
    ("nvcr.io/nvidia/tritonserver:24.08-trtllm-python-py3", "pkg:docker/nvidia/tritonserver@sha256:X?repository_url=nvcr.io"),
    ("localhost:5000/envkit/cpu:1", "pkg:docker/envkit/cpu@sha256:X?repository_url=localhost:5000"),
    ("docker.io/nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04", "pkg:docker/nvidia/cuda@sha256:X"),
])
def test_a_base_images_purl_is_the_docker_type_with_its_registry(ref, purl):
    assert sbom.docker_purl(ref, "sha256:X") == purl


@pytest.mark.parametrize("doc", [None, {}, {"python": {}, "os": {}},
                                 {"python": {"distributions": [{"version": "1"}]}, "os": {}},
                                 {"python": {"distributions": []}, "os": {}, "dpkg": "x"},
                                 {"python": {"distributions": [{"name": "a", "version": "1"}]}, "os": {},
                                  "dpkg": [{"state": "installed"}]}])
def test_a_broken_inventory_is_a_value_error(doc):
    with pytest.raises(ValueError):
        sbom.Inventory.from_probe(doc)


def test_an_image_without_dpkg_lists_its_python_packages_only():
    doc = sbom.sbom(facts(inventory=inventory(debs=[]).__class__(os_id=None, os_version=None, python="3.11", dists=(), debs=None)))
    assert [c["name"] for c in doc["components"]] == ["docker.io/library/debian:bookworm-slim", "flash-attn"]


def test_the_provenance_names_the_image_by_id_and_every_material_by_sha256():
    run = provenance.BuildRun(image="envkit/cpu:default", image_id="sha256:" + SHA["a"], envkit="0.1.0", engine="docker-20.10.24",
                              query={"platform": "cpu"}, offline=True, network="none", lock_sha256=SHA["b"], matrix_sha256=None,
                              materials=(provenance.Material("Dockerfile", "file:Dockerfile", SHA["c"]),),
                              started="2026-12-04T00:00:00Z", finished="2026-12-04T00:01:00Z", sbom=("x.cdx.json", SHA["d"]))
    doc = provenance.statement(run)
    assert doc["subject"] == [{"name": "envkit/cpu:default", "digest": {"sha256": SHA["a"]}}]
    build = doc["predicate"]["buildDefinition"]
    assert build["resolvedDependencies"] == [{"name": "Dockerfile", "uri": "file:Dockerfile", "digest": {"sha256": SHA["c"]}}]
    assert build["internalParameters"] == {"envkit": "0.1.0", "lock_sha256": SHA["b"]}  # no null values
    assert doc["predicate"]["runDetails"]["byproducts"][0]["digest"] == {"sha256": SHA["d"]}


class _Registry:
    """An engine stand-in that records tags and pushes, and answers what a registry holds."""
    def __init__(self, held=None):
        self.held, self.calls = dict(held or {}), []

    def registry_digest(self, ref, auth):
        return self.held.get(ref)

    def tag(self, image_id, ref):
        self.calls.append(("tag", ref))

    def push(self, ref, auth, say):
        self.calls.append(("push", ref))
        self.held[ref] = "sha256:" + "9" * 64
        return self.held[ref]

    def untag(self, ref):
        self.calls.append(("untag", ref))


def test_the_lock_tag_is_the_repository_and_12_hex_of_the_images_lock():
    from envkit.app.serving import lock_tag_ref
    ref = lock_tag_ref("127.0.0.1:5000/envkit/cpu:v1", {"io.envkit.lock.sha256": "ab" * 32})
    assert ref == "127.0.0.1:5000/envkit/cpu:lock-abababababab"


def test_an_image_without_a_lock_label_gets_no_lock_tag():
    from envkit.app.serving import lock_tag_ref
    from envkit.errors import InputError
    with pytest.raises(InputError, match="io.envkit.lock.sha256"):
        lock_tag_ref("127.0.0.1:5000/envkit/cpu:v1", {})


def test_the_lock_tag_is_pushed_once_and_then_stays():
    from envkit.app.serving import _push_lock_tag
    engine = _Registry()
    first = _push_lock_tag(engine, "sha256:" + "1" * 64, "r:5000/a:lock-x", None, lambda _: None)
    assert first.pushed and engine.calls == [("tag", "r:5000/a:lock-x"), ("push", "r:5000/a:lock-x"), ("untag", "r:5000/a:lock-x")]
    engine.calls.clear()
    again = _push_lock_tag(engine, "sha256:" + "2" * 64, "r:5000/a:lock-x", None, lambda _: None)
    assert not again.pushed and again.digest == first.digest and engine.calls == []
