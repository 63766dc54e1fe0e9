"""The rule ids a resolver conflict can name. Stable: CI pipelines and case files match on them."""
from __future__ import annotations

RULES: dict[str, str] = {
    "platform.gpu": "the chosen platform (cuda/rocm/dtk) does not drive this GPU's vendor",
    "driver.too-old": "the NVIDIA driver is older than the CUDA toolkit's minimum (minor-version compatibility)",
    "driver.platform": "an NVIDIA driver version was given for a platform NVIDIA's driver does not run (ROCm, DTK, CPU)",
    "gpu.driver": "the NVIDIA driver is older than the GPU's architecture family needs, or a branch that no longer supports it",
    "gpu.toolkit-arch": "the CUDA toolkit cannot compile for (or its libraries do not support) the GPU's architecture",
    "torch.no-variant": "no torch wheel of this version exists for the requested CUDA / ROCm / DTK",
    "torch.python": "the torch release publishes no wheel for this Python",
    "torch.gpu-arch": "the torch build carries no kernels (SASS or PTX) for the GPU's architecture",
    "dtk.card": "the Hygon DCU card needs a newer DTK",
    "flash-attn.platform": "flash-attn does not support this platform",
    "flash-attn.gpu-arch": "flash-attn has no kernels for this GPU (FlashAttention-2 needs sm80+)",
    "flash-attn.torch": "flash-attn does not support this torch version",
    "flash-attn.python": "flash-attn does not support this Python",
    "flash-attn.toolkit": "building flash-attn needs a newer nvcc",
    "vllm.torch-pin": "the vLLM wheel is compiled against a different torch version",
    "vllm.python": "the vLLM release does not support this Python",
    "vllm.cuda": "no vLLM wheel was published for this CUDA version",
    "vllm.gpu-arch": "vLLM needs a newer GPU architecture",
    "vllm.platform": "no vLLM build for this platform",
    "vllm.deps": "the vLLM release pins a dependency release that PyPI no longer serves",
    "vllm.glibc": "the vLLM wheel's manylinux tag needs a newer glibc than the base image's OS",
    "kernels.removed": "the flash-attn sdist no longer ships this csrc kernel",
    "kernels.platform": "the csrc kernels need CUDA and nvcc",
}
