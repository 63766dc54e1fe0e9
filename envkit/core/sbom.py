"""An image's software bill of materials: CycloneDX 1.6 JSON, written from what envkit holds offline.

What is installed comes from the image itself (envkit's probe, `--section inventory`: every Python distribution the
image's interpreter sees and every package dpkg's database holds); what each one is, by hash, from the build context
(the bundle manifest's sha256 of every carried wheel, deb and source tarball; a pinned lock's wheels); what it was
built from and how, from the solution (the compiled kernels, their arch list, their sdist) and the plan. A package
that nothing carried (a base image's deb, the pip a venv bootstraps) is listed by its purl without a hash: its bytes
are the base image's, whose ID is listed. Deterministic: the same inputs give the same bytes (no timestamp; the serial
number is derived from the content), so the digest label it leaves on the image is reproducible."""
from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import quote, unquote

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envkit.model.purl import PyPIRef, purl_name

SPEC_VERSION = "1.6"
SBOM_LABEL = "io.envkit.sbom.sha256"  # the image label that names the SBOM written beside it
MEDIA_TYPE = "application/vnd.cyclonedx+json"
KIND = "envkit:kind"  # what a component is: python, deb, base-image, source, kernel


@dataclass(frozen=True)
class PythonDist:
    name: str
    version: str
    installer: Optional[str] = None


@dataclass(frozen=True)
class Deb:
    name: str
    version: str
    arch: str
    source: Optional[str] = None


@dataclass(frozen=True)
class Inventory:
    """What the probe found inside the image (its `inventory` section)."""
    os_id: Optional[str]
    os_version: Optional[str]
    python: Optional[str]
    dists: tuple[PythonDist, ...]
    debs: Optional[tuple[Deb, ...]]  # None: the image has no dpkg database

    @classmethod
    def from_probe(cls, doc: Any) -> "Inventory":
        """The probe's `inventory` section; ValueError naming what is missing."""
        if not isinstance(doc, dict) or not isinstance(doc.get("python"), dict) or not isinstance(doc.get("os"), dict):
            raise ValueError("the probe's inventory has no python or os section")
        dists = doc["python"].get("distributions")
        if not isinstance(dists, list):
            raise ValueError("the probe's inventory lists no Python distributions")
        debs = doc.get("dpkg")
        if debs is not None and not isinstance(debs, list):
            raise ValueError("the probe's dpkg list is not a list")
        try:
            return cls._read(doc, dists, debs)
        except (KeyError, TypeError, AttributeError):
            raise ValueError("the probe's inventory names a package without its name or version") from None

    @classmethod
    def _read(cls, doc: dict[str, Any], dists: list[Any], debs: Optional[list[Any]]) -> "Inventory":
        return cls(os_id=_opt(doc["os"].get("id")), os_version=_opt(doc["os"].get("version_id")), python=_opt(doc["python"].get("version")),
                   dists=tuple(PythonDist(str(d["name"]), str(d["version"]), _opt(d.get("installer"))) for d in dists),
                   debs=None if debs is None else tuple(_deb(d) for d in debs if d.get("state") == "installed"))


def _deb(d: dict[str, Any]) -> Deb:
    return Deb(str(d["name"]), str(d["version"]), str(d.get("arch") or ""), _opt(d.get("source")))


def _opt(value: Any) -> Optional[str]:
    return None if value in (None, "") else str(value)


@dataclass(frozen=True)
class CarriedFile:
    """A file of the build context, by its manifest entry."""
    path: str
    sha256: str


@dataclass(frozen=True)
class BaseImage:
    ref: str
    id: str  # sha256:<hex>, the engine's image ID
    debs: Optional[frozenset[tuple[str, str, str]]] = None  # (name, version, arch) its dpkg database holds; None: not read


@dataclass(frozen=True)
class KernelBuild:
    """A module the build stage compiled: its distribution's name, what it was compiled from and with."""
    dist: str
    source: Optional[str]  # the purl of its sdist
    settings: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class SbomInput:
    image: str           # the reference the image is tagged with
    envkit: str          # envkit's version
    inventory: Inventory
    carried: tuple[CarriedFile, ...] = ()
    pinned: tuple[tuple[str, str], ...] = ()  # (wheel file name, sha256) of a pinned lock (mirror builds)
    bases: tuple[BaseImage, ...] = ()
    kernels: tuple[KernelBuild, ...] = ()
    sources: tuple[tuple[str, str], ...] = ()  # (context path, purl) of a carried source tarball
    properties: tuple[tuple[str, str], ...] = ()  # the image's own (the lock's sha256, the stack)


def docker_purl(ref: str, image_id: str) -> str:
    """purl-spec's docker type: pkg:docker/NAMESPACE/NAME@sha256:ID, with repository_url where the registry is not the
    default one (the reference's first part when it names a host: a dot, a port or localhost)."""
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    parts = name.split("/")
    registry = None
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry, parts = parts[0], parts[1:]
    if registry == "docker.io":
        registry = None
        if len(parts) == 1:
            parts = ["library", *parts]
    out = f"pkg:docker/{'/'.join(quote(p, safe='.-_') for p in parts)}@{image_id}"
    return out + (f"?repository_url={quote(registry, safe='.:-')}" if registry else "")


def deb_purl(deb: Deb, os_id: Optional[str], os_version: Optional[str]) -> str:
    distro = f"&distro={quote(os_id)}-{quote(os_version)}" if os_id and os_version else ""
    upstream = f"&upstream={quote(deb.source, safe='.+-')}" if deb.source and deb.source != deb.name else ""
    return (f"pkg:deb/{quote(os_id or 'debian')}/{quote(deb.name, safe='.+-')}@{quote(deb.version, safe='.+~-')}"
            f"?arch={quote(deb.arch or 'all')}{distro}{upstream}")


def _carried_wheels(facts: SbomInput) -> dict[tuple[str, Version], tuple[str, str, str]]:
    """(canonical name, version) -> (file name, sha256, context path) of every wheel the context carries or a lock pins."""
    out: dict[tuple[str, Version], tuple[str, str, str]] = {}
    files = [(f.path.rsplit("/", 1)[-1], f.sha256, f.path) for f in facts.carried if f.path.endswith(".whl")]
    for name, sha, path in sorted(files) + sorted((n, s, "") for n, s in facts.pinned):
        try:
            dist, version, _, _ = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        out.setdefault((dist, version), (name, sha, path))
    return out


def _carried_debs(facts: SbomInput) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(name, version, arch) -> (sha256, context path) of every carried .deb (apt's file name: NAME_VERSION_ARCH.deb,
    an epoch's colon written %3a)."""
    out: dict[tuple[str, str, str], tuple[str, str]] = {}
    for f in sorted(facts.carried, key=lambda f: ("/runtime/" not in f.path, f.path)):  # the final stage's copy first
        stem = f.path.rsplit("/", 1)[-1]
        if stem.endswith(".deb") and stem.count("_") == 2:
            name, version, arch = stem[:-4].split("_")
            out.setdefault((name, unquote(version), arch), (f.sha256, f.path))
    return out


def _component(kind: str, ctype: str, name: str, version: str, purl: str, sha256: Optional[str] = None,
               props: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    doc: dict[str, Any] = {"type": ctype, "bom-ref": purl, "name": name, "version": version, "purl": purl}
    if sha256:
        doc["hashes"] = [{"alg": "SHA-256", "content": sha256}]
    doc["properties"] = [{"name": k, "value": v} for k, v in ((KIND, kind), *props)]
    return doc


def _python_components(facts: SbomInput) -> list[dict[str, Any]]:
    wheels = _carried_wheels(facts)
    kernels = {canonicalize_name(k.dist): k for k in facts.kernels}
    out = []
    for d in facts.inventory.dists:
        try:
            key = (canonicalize_name(d.name), Version(d.version))
        except InvalidVersion:
            key = None
        carried = wheels.get(key) if key else None
        props: list[tuple[str, str]] = [("envkit:installer", d.installer)] if d.installer else []
        kernel = kernels.get(canonicalize_name(d.name))
        if carried:
            props.append(("envkit:file", carried[0]))
            if carried[2]:
                props.append(("envkit:carried", carried[2]))
        if kernel:
            props += [("envkit:built-from", kernel.source)] if kernel.source else []
            props += [(f"envkit:build.{k}", v) for k, v in kernel.settings]
        purl = str(PyPIRef(purl_name(d.name), d.version))
        out.append(_component("kernel" if kernel else "python", "library", d.name, d.version, purl, carried[1] if carried else None,
                              tuple(props)))
    return out


def _deb_components(facts: SbomInput) -> list[dict[str, Any]]:
    inv = facts.inventory
    carried = _carried_debs(facts)
    out = []
    for d in inv.debs or ():
        key = (d.name, d.version, d.arch)
        hit = carried.get(key)
        base = next((b.ref for b in facts.bases if b.debs is not None and key in b.debs), None)
        props = (("envkit:carried", hit[1]),) if hit else (("envkit:base-image", base),) if base else ()
        out.append(_component("deb", "library", d.name, d.version, deb_purl(d, inv.os_id, inv.os_version), hit[0] if hit else None, props))
    return out


def _source_components(facts: SbomInput) -> list[dict[str, Any]]:
    by_path = {f.path: f.sha256 for f in facts.carried}
    out = []
    for path, purl in facts.sources:
        name, version = path.rsplit("/", 1)[-1], ""
        if purl.startswith("pkg:pypi/"):
            name, _, version = purl[len("pkg:pypi/"):].split("?", 1)[0].partition("@")
        out.append(_component("source", "library", unquote(name), unquote(version), purl, by_path.get(path),
                              (("envkit:carried", path), ("envkit:stage", "build (compiled there; not in the image)"))))
    return out


def _base_components(facts: SbomInput) -> list[dict[str, Any]]:
    return [_component("base-image", "container", b.ref, b.id, docker_purl(b.ref, b.id), b.id.split(":", 1)[-1]) for b in facts.bases]


def _unique(components: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for c in components:
        if c["bom-ref"] not in seen:
            seen.add(c["bom-ref"])
            out.append(c)
    return out


def sbom(facts: SbomInput) -> dict[str, Any]:
    """The CycloneDX 1.6 document of one image."""
    components = _unique(_base_components(facts) + _deb_components(facts) + _python_components(facts) + _source_components(facts))
    refs = [c["bom-ref"] for c in components]
    name, _, tag = facts.image.rpartition(":") if ":" in facts.image.rsplit("/", 1)[-1] else (facts.image, "", "latest")
    image = {"type": "container", "bom-ref": "image", "name": name, "version": tag,
             "properties": [{"name": k, "value": v} for k, v in facts.properties]}
    built_from = {s[1] for s in facts.sources}
    deps = [{"ref": "image", "dependsOn": [r for r in refs if r not in built_from]}]
    deps += [{"ref": c["bom-ref"], "dependsOn": [p["value"]]} for c in components
             for p in c["properties"] if p["name"] == "envkit:built-from" and p["value"] in refs]
    body = {"metadata": {"tools": {"components": [{"type": "application", "name": "envkit", "version": facts.envkit}]},
                         "component": image},
            "components": components, "dependencies": deps}
    serial = uuid.uuid5(uuid.NAMESPACE_URL, "envkit-sbom:" + hashlib.sha256(canonical(body)).hexdigest())
    return {"bomFormat": "CycloneDX", "specVersion": SPEC_VERSION, "serialNumber": f"urn:uuid:{serial}", "version": 1, **body}


def sha256_hex(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def canonical(doc: Any) -> bytes:
    """The bytes written (and hashed): sorted keys, two-space indents, a final newline."""
    return (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
