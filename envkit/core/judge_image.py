"""doctor --image's own verdict on the container it probed (pure): an image built for GPUs whose container got none,
because this host has none of them or the engine refused them, is an error with the fix. The probe's record carries
the planned access (`gpu_access`, from core/devices.py) and whether the engine passed it (`gpus_passed`)."""
from __future__ import annotations

from typing import Any, Optional

from envkit.model.host import Finding

SOURCE = "doc:docs/research/gpu-containers.md"


def image_gpu_findings(image: str, record: Optional[dict[str, Any]]) -> list[Finding]:
    access = (record or {}).get("gpu_access")
    if not isinstance(access, dict) or not access.get("wanted") or (record or {}).get("gpus_passed"):
        return []
    exp = access.get("expects") if isinstance(access.get("expects"), dict) else {}
    what = f"{exp.get('gpu') or access.get('vendor')} ({exp.get('platform', '?')})" if exp else str(access.get("vendor"))
    if access.get("refusal"):
        return [Finding("error", "image.no-gpu", f"{image} is built for {what}; the engine refused its devices: {access['refusal']}",
                        "its stack was probed without the GPUs it needs, so nothing of its GPU path is known",
                        "install the vendor's container toolkit (NVIDIA: nvidia-container-toolkit, nvidia-ctk runtime configure; "
                        "Podman: nvidia-ctk cdi generate) and run doctor --image again", SOURCE)]
    return [Finding("error", "image.no-gpu", f"{image} is built for {what}; {access.get('missing') or 'no GPU could be passed'}",
                    "its stack was probed without the GPUs it needs, so nothing of its GPU path is known",
                    "run envkit doctor --image on a host with the GPUs it was built for", SOURCE)]
