"""Which matrix facts rest on inference rather than a measured or published fact (envkit matrix check).
Pure: the matrix in, a summary out."""
from __future__ import annotations

from typing import Any

from envkit.model.matrix import Matrix


def inferred_entries(m: Matrix) -> dict[str, Any]:
    """What in the matrix rests on inference rather than a stated fact, and whether any of it could
    make envkit name an artifact (a wheel, an image) that might not exist or not fit."""
    kinds: dict[str, int] = {}

    def add(kind: str) -> None:
        kinds[kind] = kinds.get(kind, 0) + 1

    artifacts: list[str] = []
    for b in m.torch:
        if b.confidence != "inferred":
            continue
        if not b.archs_known:
            add("torch build without a stated arch list (never given a GPU)")
        elif b.note.startswith("arch list derived"):
            add("torch arch list derived from dated pull requests (answers say so)")
        if not b.abi_known:
            add("torch C++ ABI taken from the release's PyPI build (no flash-attn wheel chosen for it)")
            if b.platform == "cuda" and b.archs_known and not b.note:
                artifacts.append(b.pin)
        if b.archs_known and b.abi_known and not b.note.startswith("arch list derived"):
            artifacts.append(b.pin)  # inferred for a reason this report does not know
    for f in m.flash_attn:
        if f.confidence == "inferred":
            add("flash-attn release marked inferred")
            if f.wheel_set == "workflow":
                artifacts.append(f"flash-attn {f.version}")
    for v in m.vllm:
        if v.confidence == "inferred":
            add("vLLM release marked inferred")
            artifacts.append(f"vllm {v.version}")
    for d in m.gpu_drivers:
        if d.confidence == "inferred":
            add("driver floor from the first toolkit of the family (can only refuse a driver)")
    return {"total": sum(kinds.values()), "kinds": kinds, "can_name_artifact": artifacts}
