"""What `--gpu auto` reads of a host: its GPUs (each with its arch), the NVIDIA driver, the CPU architecture and the
Python a user would run, from the probe's facts (envkit/inimage/probe.py) of this host or of a recorded facts file."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from envkit.errors import InputError

_CC = re.compile(r"([0-9]{1,2})\.([0-9]{1,2})")
_GFX = re.compile(r"gfx[0-9a-f]{3,4}")


@dataclass(frozen=True)
class SeenGpu:
    name: str
    vendor: str  # nvidia | amd | hygon
    arch: Optional[str]  # sm_90, gfx942; None where the facts do not say


@dataclass(frozen=True)
class HostView:
    source: str  # "this host", or "facts file PATH"
    gpus: tuple[SeenGpu, ...] = ()
    driver: Optional[str] = None  # the NVIDIA driver
    machine: Optional[str] = None  # platform.machine(): x86_64, aarch64
    python: Optional[str] = None  # the full version of the Python a user runs here, e.g. 3.12.3
    python_path: Optional[str] = None
    nvml_error: Optional[str] = None

    @classmethod
    def from_facts(cls, record: Any, source: str, python: Optional[tuple[str, str]] = None) -> "HostView":
        """The probe's facts record; `python`: (version, path) of the interpreter to resolve for, where another than
        the record's own was chosen (doctor's discovery). A value of the wrong type is an InputError naming its key."""
        if not isinstance(record, dict):
            raise InputError(f"{source}: the facts are not a JSON object", "give a JSON file written by envkit doctor --json")
        nv, amd, os_, py = (_table(record, k, source) for k in ("nvidia", "amd", "os", "python"))
        gpus: list[SeenGpu] = []
        for i, g in enumerate(_list(nv, "gpus", f"{source}: nvidia.gpus")):
            name = _text(g, "name", f"{source}: nvidia.gpus[{i}]") or "NVIDIA GPU"
            cc = _text(g, "cc", f"{source}: nvidia.gpus[{i}]")
            m = _CC.fullmatch(cc) if cc else None
            gpus.append(SeenGpu(name, "nvidia", f"sm_{m.group(1)}{m.group(2)}" if m else None))
        rocm = _table(amd, "rocm_smi", source)
        hygon = bool(amd.get("hygon_pci"))
        for i, g in enumerate(_list(rocm, "gpus", f"{source}: amd.rocm_smi.gpus")):
            arch = _text(g, "arch", f"{source}: amd.rocm_smi.gpus[{i}]")
            gfx = _GFX.search(arch.lower()) if arch else None
            gpus.append(SeenGpu(_text(g, "name", f"{source}: amd.rocm_smi.gpus[{i}]") or ("Hygon DCU" if hygon else "AMD GPU"),
                                "hygon" if hygon else "amd", gfx.group(0) if gfx else None))
        if hygon and not any(g.vendor == "hygon" for g in gpus):
            gpus += [SeenGpu("Hygon DCU", "hygon", None)] * max(1, len(amd["hygon_pci"]) if isinstance(amd["hygon_pci"], list) else 1)
        version, path = python if python else (_text(py, "python", f"{source}: python"), _text(py, "executable", f"{source}: python"))
        return cls(source, tuple(gpus), _text(nv, "driver", f"{source}: nvidia"), _text(os_, "machine", f"{source}: os"),
                   version, path, _text(nv, "nvml_error", f"{source}: nvidia"))


def _table(rec: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    v = rec.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise InputError(f"{where}: facts key {key} is not an object", "give a JSON file written by envkit doctor --json, unedited")
    return v


def _list(rec: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    v = rec.get(key)
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise InputError(f"{where} is not a list of objects", "give a JSON file written by envkit doctor --json, unedited")
    return v


def _text(rec: dict[str, Any], key: str, where: str) -> Optional[str]:
    v = rec.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise InputError(f"{where}.{key} is not a string", "give a JSON file written by envkit doctor --json, unedited")
    return v
