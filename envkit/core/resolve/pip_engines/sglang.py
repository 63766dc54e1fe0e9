"""`--engine sglang[==VERSION]`: SGLang's wheel, its torch, flashinfer and kernel pins (its METADATA), the CUDA major of
the cuda-python it requires, and the compute capability its runtime check demands."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Union

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit.core.resolve.pip_engines.common import (
    MODEL_DIR,
    SERVE_PORT,
    UNCHECKED,
    no_compile,
    pin,
    pinned_version,
    runs_on,
    specifier_python_ok,
)
from envkit.model.engines import EnginePackages, Sglang
from envkit.model.matrix import CC, Matrix
from envkit.model.solution import Conflict, Query

compile_arch = no_compile


def releases(m: Matrix, source: bool) -> list[str]:
    return [str(r.version) for r in m.rows("sglang")]


def candidates(m: Matrix, q: Query, plat: str) -> list[Sglang]:
    return [r for r in m.rows("sglang") if q.engine_version is None or str(r.version) == q.engine_version]


def label(row: Sglang) -> str:
    return f"sglang {row.version}"


def conflicts(m: Matrix, q: Query, row: Sglang, plat: str) -> tuple[list[Conflict], list[str]]:
    out: list[Conflict] = []
    if plat != "cuda":
        out.append(Conflict("engine.platform", f"{label(row)} is built for NVIDIA GPUs (CUDA); the query asks for {plat}",
                            "use --engine vllm or --engine torch there", row.source))
    g = q.gpu
    cc = g.cc if g is not None else None
    notes = [f"{label(row)}: its wheel states no Requires-Python"] if row.python is None else []
    if cc is not None and plat == "cuda" and row.min_cc is not None and cc < row.min_cc:
        out.append(Conflict("engine.gpu-arch", f"{label(row)} refuses GPUs below compute capability {row.min_cc} "
                            f"(its own check: 'SGLang only supports sm75 and above'); {g.name if g else ''} is {cc}",
                            "use --engine vllm or --engine torch on this GPU", row.source))
    elif g is not None and cc is not None and plat == "cuda" and row.kernel_archs and not runs_on(row.kernel_archs, cc):
        out.append(Conflict("engine.gpu-arch", f"{label(row)} pins {pin(row.kernel)}, whose PyPI wheel is built for "
                            f"{', '.join(row.kernel_archs)}: none runs on {g.name} ({g.arch})", _arch_fix(m, cc, g.name), row.source))
    elif g is not None and cc is not None and plat == "cuda" and not row.kernel_archs:
        notes.append(f"{label(row)}: the arch list of its kernel wheel ({pin(row.kernel)}) is not in the matrix; {g.arch} {UNCHECKED}")
    return out, notes


def _arch_fix(m: Matrix, cc: CC, gpu: str) -> str:
    """The releases whose kernel wheel runs on the GPU, or that none whose list the matrix holds does (a pinned query's fix
    is the release that resolves, pip_engines._release_fix)."""
    able = [r for r in m.rows("sglang") if (r.min_cc is None or cc >= r.min_cc) and r.kernel_archs and runs_on(r.kernel_archs, cc)]
    if able:
        return f"use an sglang release whose kernel wheel runs on {cc.sm}: " + ", ".join(str(r.version) for r in reversed(able))
    return f"no sglang release whose kernel arch list the matrix holds runs on {gpu} ({cc.sm}): use --engine vllm or --engine torch"


def python_ok(row: Sglang, py: Version) -> Optional[bool]:
    return specifier_python_ok(row.python, py)


def python_text(row: Sglang) -> str:
    return str(row.python) if row.python is not None else "not stated"


def constrain(m: Matrix, q: Query, row: Sglang, base: Query, plat: str) -> Union[Query, Conflict]:
    torch = pinned_version(row.torch)
    if torch is not None:
        if q.torch is not None and not q.torch.contains(torch, prereleases=True):
            return Conflict("engine.torch", f"sglang {row.version} pins torch=={torch}; --torch {q.flags().get('torch')} excludes it",
                            f"drop --torch (sglang {row.version} installs torch {torch}), or pick another sglang", row.source)
        base = replace(base, torch=SpecifierSet(f"=={torch}"), torch_local=None)
    if row.cuda_major is not None:
        if q.cuda is not None and q.cuda.major != row.cuda_major:
            return Conflict("engine.cuda", f"sglang {row.version} requires CUDA {row.cuda_major} (its cuda-python pin); "
                            f"--cuda {q.flags().get('cuda')} asks for another", f"use --cuda {row.cuda_major}, or another sglang",
                            row.source)
        if q.cuda is None:
            base = replace(base, cuda=Version(str(row.cuda_major)))
    return base


def packages(row: Sglang, plat: str) -> EnginePackages:
    pins = [f"sglang=={row.version}", pin(row.kernel), *(pin(f) for f in row.flashinfer)]
    return EnginePackages("sglang", str(row.version), tuple(p for p in pins if p), row.source,
                          server=("python3", "-m", "sglang.launch_server", "--model-path", MODEL_DIR, "--host", "0.0.0.0",
                                  "--port", str(SERVE_PORT)))
