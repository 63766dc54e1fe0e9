"""After a build: the image's SBOM (CycloneDX) and provenance (in-toto, SLSA v1) written beside it, and the SBOM's
sha256 left on the image as a label. Offline: the inventory is read inside the image (network none), the hashes from
the build context's manifest and lock, the base images' packages from the base images on the engine."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from envkit import __version__, data
from envkit.adapters.bundle_dir import MANIFEST, lock_sha, manifest_files
from envkit.adapters.engine import Engine, is_podman
from envkit.config.lockfile import LOCK_NAME
from envkit.config.userfile import parse_json
from envkit.core import provenance, sbom
from envkit.errors import ExternalError
from envkit.inimage.probe import parse_dpkg_status
from envkit.model.plan import PlanDocument
from envkit.model.purl import pypi_file
from envkit.model.solution import SolutionRecord

SBOM_SUFFIX = ".cdx.json"
PROVENANCE_SUFFIX = ".intoto.json"


@dataclass(frozen=True)
class Attested:
    image_id: str      # the image with the SBOM's label (the one the tag names now)
    sbom: str          # the files written
    sbom_sha256: str
    provenance: str
    components: int

    def to_json(self) -> dict[str, Any]:
        return {"sbom": self.sbom, "sbom_sha256": self.sbom_sha256, "provenance": self.provenance, "components": self.components}


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def file_stem(ref: str) -> str:
    """An image reference as a file name: envkit/cpu:default -> envkit_cpu_default."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", ref).strip("_") or "image"


def inventory(engine: Engine, image: str) -> sbom.Inventory:
    """The probe's inventory section, run inside the image on its own Python with the network off."""
    script = (data.INIMAGE / "probe.py").read_text()
    rc, out = engine.run(image, ["python3", "-c", script, "--section", "inventory"], {}, network="none", stderr=False)
    try:
        doc = parse_json(out[out.find("{"):], "the probe's inventory in", image)
        return sbom.Inventory.from_probe(doc.get("inventory") if isinstance(doc, dict) else None)
    except ValueError:
        raise ExternalError(f"the probe listed no packages inside {image} (exit {rc}): {out.strip()[-200:]}",
                            "the image needs python3 on its PATH for its SBOM; or build with --no-sbom") from None


def base_debs(engine: Engine, image: str) -> Optional[frozenset[tuple[str, str, str]]]:
    """The packages a base image's dpkg database holds (read with its own cat, network off); None where it has none."""
    rc, out = engine.run(image, ["cat", "/var/lib/dpkg/status"], {}, network="none", stderr=False)
    if rc != 0:
        return None
    return frozenset((d["name"], d["version"], d["arch"]) for d in parse_dpkg_status(out) if d["state"] == "installed")


def context_files(context: Path) -> tuple[sbom.CarriedFile, ...]:
    """Every file of the build context by sha256: a bundle's manifest (verified by the preflight), else hashed here."""
    doc: Any = None
    if (context / MANIFEST).is_file():
        doc = json.loads((context / MANIFEST).read_text())
    files = doc["files"] if isinstance(doc, dict) and isinstance(doc.get("files"), dict) else manifest_files(context)
    return tuple(sbom.CarriedFile(rel, str(v["sha256"])) for rel, v in sorted(files.items()))


def source_purls(plan: PlanDocument, files: tuple[sbom.CarriedFile, ...]) -> tuple[tuple[str, str], ...]:
    """(context path, purl) of every source tarball the context carries: a PyPI sdist by its file's purl, another
    archive as a generic purl with the address it was fetched from."""
    sha = {f.path: f.sha256 for f in files}
    out = []
    for c in plan.context:
        if not c.path.startswith("sources/") or c.path.endswith("/"):
            continue
        name = c.path.rsplit("/", 1)[-1]
        if c.origin.startswith("pkg:pypi/"):
            out.append((c.path, pypi_file(name, sha.get(c.path))))
        else:
            checksum = f"&checksum=sha256:{sha[c.path]}" if c.path in sha else ""
            out.append((c.path, f"pkg:generic/{name}?download_url={c.origin.split()[0]}{checksum}"))
    return tuple(out)


def kernel_builds(record: SolutionRecord, plan: PlanDocument, lock: dict[str, Any],
                  sources: tuple[tuple[str, str], ...]) -> tuple[sbom.KernelBuild, ...]:
    """The modules the build stage compiled (csrc kernels, flash-attn from its sdist), each with what it was built from
    and the settings it was built with."""
    doc = record.doc
    nvcc = next((r.split("==", 1)[1] for r in plan.requirements if r.startswith("nvidia-cuda-nvcc==")), None)
    common = [("torch", record.torch_pin), ("cxx11abi", str(record.torch_cxx11abi).lower()),
              ("host-march", str((lock.get("generate") or {}).get("host_march") or "")),
              ("toolkit", str((doc.get("toolkit") or {}).get("release") or record.toolkit or "")), ("nvcc-wheel", nvcc or ""),
              ("max-jobs", str(plan.max_jobs or "")), ("nvcc-threads", str(plan.nvcc_threads or ""))]

    def sdist(version: str) -> Optional[str]:
        return next((p for path, p in sources if path.rsplit("/", 1)[-1].startswith(f"flash_attn-{version}.")), None)

    out = []
    for k in doc.get("kernels") or ():
        own = [("kernel", str(k.get("name"))), ("arch-list", ";".join(k.get("arch_list") or ())),
               ("setup-py", str(k.get("setup_py"))), ("patch-gencode", str(k.get("patch_gencode")).lower())]
        out.append(sbom.KernelBuild(str(k.get("module")), sdist(str(k.get("flash_attn_sdist"))),
                                    tuple((n, v) for n, v in own + common if v)))
    fa = doc.get("flash_attn") or {}
    if fa.get("build") == "source":
        own = [("arch-list", ";".join(fa.get("arch_list") or ()))]
        out.append(sbom.KernelBuild("flash-attn", sdist(str(fa.get("version"))), tuple((n, v) for n, v in own + common if v)))
    return tuple(out)


def write_whole(path: Path, body: bytes) -> None:
    part = path.with_name(f".{path.name}.part-{os.getpid()}")
    part.write_bytes(body)
    os.replace(part, path)


def attest(engine: Engine, context: Path, *, ref: str, image_id: str, plan: PlanDocument, record: SolutionRecord,
           offline: bool, network: str, started: str, out_dir: Path, say: Callable[[str], None],
           compiled: tuple[tuple[str, str], ...] = ()) -> Attested:
    """The SBOM and provenance of the image just built (`image_id`, to be tagged `ref`): the ID of the same image with the
    SBOM's label, which the caller tags. `compiled`: (file, sha256) of the wheels the build stage compiled, exported."""
    lock = json.loads((context / LOCK_NAME).read_text())
    files = context_files(context)
    images = {}
    if (context / MANIFEST).is_file():
        images = {i["ref"]: i["id"] for i in json.loads((context / MANIFEST).read_text()).get("images") or ()}
    bases = {s.image: images.get(s.image) or engine.image_id(s.image) for s in plan.stages}
    final = plan.stages[-1].image
    say(f"sbom: reading the packages inside {ref} (network none)")
    inv = inventory(engine, image_id)
    sources = source_purls(plan, files)
    pinned = compiled + tuple((str(w["filename"]), str(w["sha256"])) for w in lock.get("wheels") or () if isinstance(w, dict))
    props = tuple((k, v) for k, v in (("envkit:stack", plan.stack), ("envkit:lock.sha256", lock_sha(context))) if v)
    doc = sbom.sbom(sbom.SbomInput(
        image=ref, envkit=__version__, inventory=inv, carried=files, pinned=pinned, sources=sources, properties=props,
        bases=(sbom.BaseImage(final, bases[final], base_debs(engine, bases[final])),),
        kernels=kernel_builds(record, plan, lock, sources)))
    body = sbom.canonical(doc)
    sha = sbom.sha256_hex(body)
    labelled = engine.relabel(image_id, {sbom.SBOM_LABEL: sha})
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = file_stem(ref)
    sbom_path, prov_path = out_dir / f"{stem}{SBOM_SUFFIX}", out_dir / f"{stem}{PROVENANCE_SUFFIX}"
    materials = tuple(provenance.Material(f.path, f"file:{f.path}", f.sha256) for f in files)
    materials += tuple(provenance.Material(r, sbom.docker_purl(r, i), i.split(":", 1)[-1]) for r, i in sorted(bases.items()))
    info = engine.info_or_none() or {}
    builder = file_stem(f"{'podman' if is_podman(info) else 'docker'}-{info.get('ServerVersion', '')}")
    run = provenance.BuildRun(image=ref, image_id=labelled, envkit=__version__, engine=builder, query=dict(lock.get("query") or {}),
                              offline=offline, network=network, lock_sha256=lock_sha(context), matrix_sha256=lock.get("matrix_sha256"),
                              materials=materials, started=started, finished=now(), sbom=(sbom_path.name, sha))
    write_whole(sbom_path, body)
    write_whole(prov_path, sbom.canonical(provenance.statement(run)))
    say(f"sbom: {sbom_path} ({len(doc['components'])} components, sha256 {sha}; label {sbom.SBOM_LABEL}); provenance: {prov_path}")
    return Attested(labelled, str(sbom_path), sha, str(prov_path), len(doc["components"]))

