"""The base image a stack is built on, and its OS's Python: the planner builds on `base_os`; the resolver prefers
`image_python` where no --python is given (search.py `resolve`).

Pure: matrix rows in, images and an OS row out.
"""
from __future__ import annotations

from typing import Optional

from packaging.version import Version

from envkit.errors import InputError
from envkit.model.matrix import CudaToolkit, Matrix, OsRelease, TorchBuild, dtk_text
from envkit.model.site import Site
from envkit.model.solution import Solution


def base_os(m: Matrix, sol: Solution, site: Site) -> tuple[str, str, OsRelease]:
    """(devel image, runtime image, os) for the solution's platform."""
    if sol.platform == "cuda":
        assert sol.cuda is not None
        return sol.cuda.devel_image, sol.cuda.runtime_image, _known_os(m, sol.cuda.os)
    toolkit = sol.toolkit
    if sol.platform == "rocm":
        assert toolkit is not None
        r = m.rocm_release(toolkit)
        assert r is not None
        if r.devel_image is None or r.os is None:
            raise InputError(f"no public base image for ROCm {sol.toolkit} is known to envkit",
                             f"pin another ROCm with --rocm, or add a [[rocm]] row for {sol.toolkit} with its image and source "
                             "to matrix.toml")
        return r.devel_image, r.runtime_image or r.devel_image, _known_os(m, r.os)
    if sol.platform == "dtk":
        assert toolkit is not None
        if not site.dtk_devel or not site.dtk_os:
            raise InputError(f"DTK {dtk_text(toolkit)} images are not on Docker Hub and no site file names one",
                             "add [dtk] devel_image, runtime_image and os (e.g. \"ubuntu20.04\") to the site file given with --mirror")
        osr = m.os_release(site.dtk_os)
        if osr is None:
            raise InputError(f"site file: [dtk] os {site.dtk_os!r} is not a known os",
                             f"use one of: {', '.join(o.name for o in m.os)}")
        return site.dtk_devel, site.dtk_runtime or site.dtk_devel, osr
    osr = next(o for o in m.os if o.cpu_image)
    return osr.cpu_image or "", osr.cpu_image or "", osr


def _known_os(m: Matrix, name: str) -> OsRelease:
    osr = m.os_release(name)
    assert osr is not None, f"the matrix names os {name!r} but has no [[os]] row for it"
    return osr


def image_python(m: Matrix, b: TorchBuild, tk: Optional[CudaToolkit]) -> Optional[tuple[Version, str]]:
    """The Python of the base image a stack is built on, and its OS, where the matrix names the image
    (CUDA and ROCm images, the CPU image; DTK images come from the site file: None)."""
    os_name: Optional[str] = None
    if b.platform == "cuda" and tk is not None:
        os_name = tk.os
    elif b.platform == "rocm" and b.toolkit is not None:
        r = m.rocm_release(b.toolkit)
        os_name = r.os if r is not None else None
    elif b.platform == "cpu":
        os_name = next((o.name for o in m.os if o.cpu_image), None)
    osr = m.os_release(os_name) if os_name else None
    return (osr.python, osr.name) if osr is not None else None
