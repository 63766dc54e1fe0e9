"""[[triton]] and [[trtllm_backend]] rows from the extracts of triton_source.py (data/sources/triton).

[[triton]]: one row per `-trtllm-python-py3` / `-vllm-python-py3` container of Triton's compatibility.md, with
the server version its release's build.py names. [[trtllm_backend]]: one row per tensorrtllm_backend tag whose
dockerfile/Dockerfile.trt_llm_backend builds the backend on a Triton `-py3` image.
"""
from __future__ import annotations

import re
from typing import Any, Optional

_COLUMNS = {"python": "Python version", "torch": "Torch version", "tensorrt": "TensorRT version",
            "trtllm": "TensorRT-LLM version", "vllm": "vLLM version", "cuda": "CUDA version", "driver": "CUDA Driver version"}


def _python(text: str) -> str:
    m = re.search(r"(\d+)\.(\d+)", text)
    if not m:
        raise ValueError(f"no Python version in {text!r}")
    return f"{m.group(1)}.{m.group(2)}"


def triton_rows(server: dict[str, Any]) -> list[dict[str, Any]]:
    compat = server["compatibility"]
    servers = {s["release"]: s for s in server["servers"]}
    rows = []
    for flavor, table in sorted(compat["tables"].items()):
        for r in table:
            release = r["Triton release version"].strip()
            row: dict[str, Any] = {"release": release, "flavor": flavor}
            s: Optional[dict[str, Any]] = servers.get(release)
            if s is not None:
                row["server"] = s["server"]
            for key, column in _COLUMNS.items():
                value = r.get(column, "").strip()
                if value:
                    row[key] = _python(value) if key == "python" else re.sub(r"\s+", ".", value) if key == "vllm" else value
            source = f"{compat['citation']} ({flavor}, row {release})"
            if s is not None:
                source += f"; server version: {s['citation']}"
            row["source"] = source
            rows.append(row)
    return rows


def backend_rows(backend: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for t in backend["tags"]:
        if not t.get("base_image"):
            continue
        rows.append({"version": t["tag"].lstrip("v"), "commit": t["commit"], "base_image": t["base_image"], "ensemble": bool(t["ensemble"]),
                     "tensorrt_llm_commit": t["tensorrt_llm_commit"], "source": t["citation"]})
    return sorted(rows, key=lambda x: tuple(int(p) for p in x["version"].split(".")), reverse=True)


def py3_rows(notes: dict[str, Any], server: dict[str, Any]) -> list[dict[str, Any]]:
    """The general -py3 containers from their release notes (release-notes.json, hand-collected): the CUDA, the driver
    the page requires, the data center drivers its forward-compatibility package supports, the minimum compute
    capability. A release whose page was not found (no url) has no row."""
    servers = {s["release"]: s for s in server["servers"]}
    rows = []
    for r in notes["releases"]:
        if not r.get("url") or not r.get("min_driver"):
            continue
        row: dict[str, Any] = {"release": r["release"], "flavor": "py3"}
        s: Optional[dict[str, Any]] = servers.get(r["release"])
        if s is not None:
            row["server"] = s["server"]
        if r.get("cuda"):
            row["cuda"] = r["cuda"]
        row["driver"] = r["min_driver"]
        if r.get("datacenter_drivers"):
            row["datacenter_drivers"] = list(r["datacenter_drivers"])
        if r.get("not_forward_compatible"):
            row["not_forward_compatible"] = [int(b.lstrip("R")) for b in r["not_forward_compatible"]]
        if r.get("min_cc"):
            row["min_cc"] = r["min_cc"]
        row["source"] = r["url"] + (f"; server version: {s['citation']}" if s is not None else "")
        rows.append(row)
    return rows


def _order(row: dict[str, Any]) -> tuple[str, tuple[int, ...]]:
    return row["flavor"], tuple(int(p) for p in row["release"].split("."))


def _cuda_minor(text: Optional[str]) -> Optional[tuple[int, ...]]:
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def forward_compatible(rows: list[dict[str, Any]], py3: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A release's notes state its driver requirement for the release, every container of it: the data center drivers
    its forward-compatibility package supports go to each -trtllm-/-vllm-python-py3 row of that release whose CUDA is
    the notes' (same major.minor), citing the notes; a row on another CUDA keeps its own requirement only."""
    notes = {r["release"]: r for r in py3 if r.get("datacenter_drivers")}
    out = []
    for row in rows:
        n = notes.get(row["release"])
        cuda = _cuda_minor(row.get("cuda"))
        if n is not None and cuda is not None and cuda == _cuda_minor(n.get("cuda")):
            row = {**{k: v for k, v in row.items() if k != "source"}, "datacenter_drivers": n["datacenter_drivers"],
                   **({"not_forward_compatible": n["not_forward_compatible"]} if n.get("not_forward_compatible") else {}),
                   "source": f"{row['source']}; forward compatibility: {n['source'].split('; ')[0]}"}
        out.append(row)
    return out


def derive_triton(docs: dict[str, Any]) -> list[dict[str, Any]]:
    rows = triton_rows(docs["server.json"])
    if "release-notes.json" in docs:
        py3 = py3_rows(docs["release-notes.json"], docs["server.json"])
        rows = forward_compatible(rows, py3) + py3
    return sorted(rows, key=_order, reverse=True)


_TRTLLM_KEYS = ("version", "python", "torch", "tensorrt", "cuda", "archs", "archs_note", "archs_removed", "pip_unsupported_archs",
                "fp8_archs", "support_min_cc", "support_note", "trtllm_build", "trtllm_serve", "ngc_image", "unknown", "source")


def derive_trtllm(docs: dict[str, Any]) -> list[dict[str, Any]]:
    """[[trtllm]] rows: the hand-collected releases.toml as it is, in the matrix's key order, newest first."""
    rows = []
    for doc in docs.values():
        for r in doc.get("trtllm", []):
            extra = set(r) - set(_TRTLLM_KEYS)
            if extra:
                raise ValueError(f"trtllm {r.get('version')}: unknown keys {sorted(extra)}")
            row = {k: r[k] for k in _TRTLLM_KEYS if k in r and r[k] not in ("", [])}
            first = re.search(r"(?:https://|pkg:)\S+?(?=[;,)]?(\s|$))", row["source"])
            if first is None:
                raise ValueError(f"trtllm {r.get('version')}: its source names no URL or purl")
            if not row["source"].startswith(("https://", "pkg:")):  # the matrix's rule: a source starts with its URL or purl
                row["source"] = f"{first.group(0)} ({row['source']})"
            rows.append(row)
    return sorted(rows, key=lambda x: tuple(int(p) for p in x["version"].split(".")), reverse=True)


def derive_backend(docs: dict[str, Any]) -> list[dict[str, Any]]:
    return backend_rows(docs["backend.json"])


def derive_pip_engine(table: str, docs: dict[str, Any]) -> list[dict[str, Any]]:
    """A pip engine's table ([[ftllm]], [[sglang]], [[paddle]]...): the hand-collected data/sources/engines/TABLE.toml rows,
    in the key order the loader's ENGINE_TABLES writes (facts per release; what a release does not state is left out and
    named in `unknown`)."""
    from envkit.config.matrix_file import ENGINE_TABLES

    keys = ENGINE_TABLES[table].written
    rows = []
    for doc in docs.values():
        for r in doc.get(table, []):
            row = {k: r[k] for k in keys if k in r and r[k] not in ("", [])}
            if not row.get("source", "").startswith(("https://", "pkg:")):
                raise ValueError(f"{table} {r.get('version')}: its source must start with its URL or its purl (pkg:pypi/NAME@VERSION)")
            rows.append(row)
    return rows


def derive_ftllm_source(docs: dict[str, Any]) -> list[dict[str, Any]]:
    """[[ftllm_source]]: one row per fastllm tag in ftllm-source.json (envkit.matrixgen.ftllm_source), newest first, with
    the measured server set of ftllm-source-measured.toml where a tag has one.
    `numa`: libnuma is linked by default when one of the switches whose block links it is an option() that is ON."""
    rows = []
    measured = {m["version"]: m for doc in docs.values() for m in doc.get("measured", [])}
    for doc in docs.values():
        for t in doc.get("tags", []):
            options = t["options"]
            row: dict[str, Any] = {"version": t["tag"].lstrip("v"), "tag": t["tag"], "commit": t["commit"], "date": t["date"],
                                   "cmake_minimum": t["cmake_minimum"], "options": [f"{k}={v}" for k, v in sorted(options.items())],
                                   "cuda_arch_default": t["cuda_arch_default"], "cxx_march_native": t["cxx_march_native"],
                                   "portable_option": t["portable_option"], "cuda_libs": t["cuda_libs"],
                                   "numa": any(options.get(o) == "ON" for o in t["numa_options"]),
                                   "python_package": t["python_package"], "base_requires": t.get("base_requires") or [],
                                   "server_requires": t.get("server_requires") or [], "source": t["citation"]}
            m = measured.get(row["version"], {})
            row.update({"server_pins": m.get("server_pins"), "measured": m.get("measured")})
            rows.append({k: v for k, v in row.items() if v not in (None, "", [])})
    return sorted(rows, key=lambda x: tuple(int(p) for p in x["version"].split(".")), reverse=True)
