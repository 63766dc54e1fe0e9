"""What an image was built from, as an in-toto Statement (v1) with a SLSA provenance predicate (v1): the image by its
ID, the build's parameters (the resolve query, offline or the site's mirrors, the network of its steps), envkit's
version and the matrix it resolved with, every file of the build context and every base image by sha256, and the
SBOM written beside it. Unsigned: signing is the site's (cosign attest-blob; docs/ci.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:envkit:build:v1"  # envkit's own build type: buildDefinition's parameters are envkit's, as named below
MEDIA_TYPE = "application/vnd.in-toto+json"


@dataclass(frozen=True)
class Material:
    name: str     # a context path, or a base image's reference
    uri: str      # file:PATH inside the build context, or the image's purl
    sha256: str


@dataclass(frozen=True)
class BuildRun:
    image: str                 # the reference the image is tagged with
    image_id: str              # sha256:<hex>, the engine's image ID (a local image has no registry digest yet)
    envkit: str
    engine: str                # the container engine that built it, with its version
    query: dict[str, Any]      # the lock's resolve query
    offline: bool
    network: str               # the RUN steps' network: none, bridge, host
    lock_sha256: Optional[str]
    matrix_sha256: Optional[str]
    materials: tuple[Material, ...]
    started: str               # RFC 3339, UTC
    finished: str
    sbom: Optional[tuple[str, str]] = None  # (file name, sha256) of the SBOM written beside the image


def statement(run: BuildRun) -> dict[str, Any]:
    """The in-toto Statement of one build."""
    internal = {"envkit": run.envkit, "lock_sha256": run.lock_sha256, "matrix_sha256": run.matrix_sha256}
    details: dict[str, Any] = {"builder": {"id": f"urn:envkit:builder:{run.engine}"},
                               "metadata": {"startedOn": run.started, "finishedOn": run.finished}}
    if run.sbom:
        details["byproducts"] = [{"name": run.sbom[0], "digest": {"sha256": run.sbom[1]}, "mediaType": "application/vnd.cyclonedx+json"}]
    predicate = {"buildDefinition": {"buildType": BUILD_TYPE,
                                     "externalParameters": {"query": run.query, "offline": run.offline, "network": run.network,
                                                            "tag": run.image},
                                     "internalParameters": {k: v for k, v in internal.items() if v is not None},
                                     "resolvedDependencies": [{"name": m.name, "uri": m.uri, "digest": {"sha256": m.sha256}}
                                                              for m in run.materials]},
                 "runDetails": details}
    return {"_type": STATEMENT_TYPE, "subject": [{"name": run.image, "digest": {"sha256": run.image_id.split(":", 1)[-1]}}],
            "predicateType": PREDICATE_TYPE, "predicate": predicate}
