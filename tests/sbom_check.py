"""What an image's SBOM and provenance must be, checked against the image itself: the SBOM valid against CycloneDX
1.6's published JSON Schema (the copy cyclonedx-python-lib carries, read offline), its sha256 the image's
io.envkit.sbom.sha256 label, its Python packages what `pip list` reports inside the image and its debs what
`dpkg-query` reports there, every carried file's hash the bundle manifest's; the provenance's subject the image's ID
and its materials every file of the context."""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packaging.utils import canonicalize_name

SBOM_LABEL = "io.envkit.sbom.sha256"
DPKG_FORMAT = "${db:Status-Status}\\t${Package}\\t${Version}\\t${Architecture}\\n"


def docker(*args: str, timeout: int = 600, cli: str = "docker") -> subprocess.CompletedProcess:
    return subprocess.run([cli, *args], capture_output=True, text=True, timeout=timeout)


def kind(component: dict[str, Any]) -> str:
    return next(p["value"] for p in component["properties"] if p["name"] == "envkit:kind")


def prop(component: dict[str, Any], name: str) -> Any:
    return next((p["value"] for p in component.get("properties", ()) if p["name"] == name), None)


def pip_list(image: str, cli: str = "docker") -> set[tuple[str, str]]:
    p = docker("run", "--rm", "--network", "none", image, "python3", "-m", "pip", "list", "--format", "json", cli=cli)
    assert p.returncode == 0, p.stderr[-2000:]
    return {(canonicalize_name(d["name"]), d["version"]) for d in json.loads(p.stdout)}


def dpkg_list(image: str, cli: str = "docker") -> set[tuple[str, str, str]]:
    p = docker("run", "--rm", "--network", "none", image, "dpkg-query", "-W", "-f", DPKG_FORMAT, cli=cli)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [line.split("\t") for line in p.stdout.splitlines() if line.strip()]
    return {(name, version, arch) for state, name, version, arch in rows if state == "installed"}


def check_sbom(image: str, sbom_dir: Path, context: Path, cli: str = "docker") -> dict[str, Any]:
    """Every check of the module docstring, for the image tagged `image` built from `context` (on the engine `cli`
    talks to: docker or podman); the SBOM document."""
    stem = image.replace("/", "_").replace(":", "_")
    sbom_file, provenance_file = sbom_dir / f"{stem}.cdx.json", sbom_dir / f"{stem}.intoto.json"
    text = sbom_file.read_text()
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    assert error is None, str(error)[:2000]
    labels = json.loads(docker("image", "inspect", "-f", "{{json .Config.Labels}}", image, cli=cli).stdout)
    assert labels[SBOM_LABEL] == hashlib.sha256(sbom_file.read_bytes()).hexdigest()
    doc = json.loads(text)
    components = doc["components"]

    python = {(canonicalize_name(c["name"]), c["version"]) for c in components if kind(c) in ("python", "kernel")}
    pip = pip_list(image, cli)
    assert python == pip, (python ^ pip)
    debs = {(c["name"], c["version"], c["purl"].split("arch=", 1)[1].split("&", 1)[0]) for c in components if kind(c) == "deb"}
    dpkg = dpkg_list(image, cli)
    assert debs == dpkg, (debs ^ dpkg)

    manifest = json.loads((context / "manifest.json").read_text())["files"]
    carried = [c for c in components if prop(c, "envkit:carried")]
    assert carried, "no component names the file the bundle carried it as"
    for c in carried:
        assert c["hashes"] == [{"alg": "SHA-256", "content": manifest[prop(c, "envkit:carried")]["sha256"]}], c
    bases = [c for c in components if kind(c) == "base-image"]
    assert len(bases) == 1 and bases[0]["hashes"][0]["content"] == bases[0]["version"].split(":", 1)[1]

    statement = json.loads(provenance_file.read_text())
    image_id = docker("image", "inspect", "-f", "{{.Id}}", image, cli=cli).stdout.strip()
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"] == [{"name": image, "digest": {"sha256": image_id.split(":")[-1]}}]  # podman prints no sha256:
    materials = {m["name"]: m["digest"]["sha256"] for m in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert {k: v["sha256"] for k, v in manifest.items()}.items() <= materials.items()
    assert statement["predicate"]["runDetails"]["byproducts"][0]["digest"]["sha256"] == labels[SBOM_LABEL]
    return doc
