"""doctor --image's own verdict on the container it probed (pure): an image built for GPUs whose container got none,
because this host has none of them or the engine refused them, is an error with the fix. The probe's record carries
the planned access (`gpu_access`, from core/devices.py) and whether the engine passed it (`gpus_passed`)."""
from __future__ import annotations

from typing import Any, Optional

from envkit.model.host import Finding, GpuFact, Host
from envkit.model.matrix import CC, Driver

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


ENGINE_SOURCE = "doc:docs/engines.md"


def _cc(g: GpuFact) -> Optional[CC]:
    try:
        return CC.parse(g.cc) if g.cc else None
    except ValueError:
        return None


def engine_image_findings(doc: dict[str, Any], host: Host) -> list[Finding]:
    """`envkit inspect` of a container engine's image: its answer (the io.envkit.solution label, resolve's `engine`
    document) against this host's NVIDIA GPUs and driver. The container's CUDA needs its driver (data-centre GPUs may run
    an older branch through CUDA forward compatibility where NVIDIA's notes allow it: resolve --driver says), and it
    serves the GPU arch it was resolved for (TensorRT engines are built on that GPU)."""
    engine, image = doc.get("engine"), doc.get("image")
    gpu = doc.get("gpu") if isinstance(doc.get("gpu"), dict) else None
    built_for = f"{gpu.get('name')} ({gpu.get('arch')})" if gpu else "any NVIDIA GPU"
    nvidia = [g for g in host.gpus if _cc(g) is not None]
    if not nvidia:
        return [Finding("warning", "image.engine-no-gpu", f"{engine} image ({image}), built for {built_for}; this host shows no NVIDIA GPU",
                        "the container's server runs on NVIDIA GPUs only", "inspect it on the GPU host it serves on", ENGINE_SOURCE)]
    out = []
    resolve = f"envkit resolve --engine {engine} --gpu {nvidia[0].name}" + (f" --driver {host.driver}" if host.driver else "")
    need = doc.get("min_driver")
    try:
        have = Driver.parse(host.driver) if host.driver else None
        low = have is not None and need is not None and have < Driver.parse(str(need))
    except ValueError:
        low = False
    if low:
        out.append(Finding("error", "image.engine-driver", f"driver {host.driver}; {engine}'s container {image} needs >= {need}",
                           "its CUDA needs that driver (a data-centre GPU may run an older branch through CUDA forward "
                           "compatibility only where the container's notes allow it)",
                           f"upgrade the driver to >= {need}, or build the release this driver runs ({resolve})", ENGINE_SOURCE))
    arch = gpu.get("arch") if gpu else None
    here = sorted({f"sm_{c.major}{c.minor}" for c in (_cc(g) for g in nvidia) if c is not None})
    if arch and arch not in here:
        out.append(Finding("warning", "image.engine-arch", f"{engine} image resolved for {built_for}; this host has {', '.join(here)}",
                           "the answer (driver floor, TensorRT-LLM's archs) was checked for that GPU, not for these",
                           f"resolve for this host's GPU ({resolve}) and generate that image", ENGINE_SOURCE))
    if not out:
        out.append(Finding("info", "image.engine-ok", f"{engine} image ({image}) for {built_for}; driver {host.driver or '?'} "
                           f"(needs >= {need or '?'}), GPUs {', '.join(here)}", "", "", ENGINE_SOURCE))
    return out
