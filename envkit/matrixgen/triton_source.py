"""Triton Inference Server's container releases and tensorrtllm_backend's tags, read from git clones of their
repositories (maintainers' tool; github.com is not needed at run time). Adapter: git.

    python -m envkit.matrixgen.triton_source --server SERVER_CLONE --backend BACKEND_CLONE [--out data/sources/triton]

From triton-inference-server/server:
- `docs/introduction/compatibility.md` at the newest v2.N.0 tag: the `-trtllm-python-py3` and `-vllm-python-py3`
  containers, one table row each (Python, torch, TensorRT, TensorRT-LLM or vLLM, CUDA, the CUDA driver).
- `build.py` TRITON_VERSION_MAP at every v2.N.0 tag: the server version of each container release (YY.MM).
From triton-inference-server/tensorrtllm_backend, at every vX.Y.Z tag:
- the tag's commit (`[[trtllm_backend]] commit`: generate's build takes the model repository from GitHub's archive
  of it, envkit/core/planner/engine.py);
- `dockerfile/Dockerfile.trt_llm_backend`'s BASE_IMAGE:BASE_TAG (the Triton image the backend is built on) and the
  commit of its `tensorrt_llm` submodule; whether `all_models/inflight_batcher_llm` (the ensemble) is in the tag.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Optional

from .gitrepo import git, show

SERVER = "https://github.com/triton-inference-server/server"
BACKEND = "https://github.com/triton-inference-server/tensorrtllm_backend"
COMPAT = "docs/introduction/compatibility.md"




def _tags(repo: Path, pattern: str) -> list[str]:
    tags = [t for t in git(repo, "tag", "--list").split() if re.fullmatch(pattern, t)]
    return sorted(tags, key=lambda t: tuple(int(x) for x in re.findall(r"\d+", t)))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def compatibility_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """Each `## Container Name: X` table of compatibility.md as rows keyed by its header cells."""
    out: dict[str, list[dict[str, str]]] = {}
    name: Optional[str] = None
    header: Optional[list[str]] = None
    for line in text.splitlines():
        if line.startswith("#"):  # every heading ends the table before it
            m = re.match(r"##\s+Container Name:\s*(\S+)", line)
            name, header = (m.group(1), None) if m else (None, None)
            if name is not None:
                out[name] = []
            continue
        if name is None or not line.startswith("|"):
            continue
        cells = _cells(line)
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: "):
            out[name].append(dict(zip(header, cells)))
    return out


def version_map(build_py: str) -> dict[str, str]:
    """build.py's TRITON_VERSION_MAP: server version -> container release (its first element)."""
    found = {m.group(1): m.group(2) for m in re.finditer(r'["\'](\d+\.\d+\.\d+)["\']:\s*\(\s*["\'](\d\d\.\d\d)["\']', build_py)}
    # from 2.53 on: DEFAULT_TRITON_VERSION_MAP = {"release_version": ..., "triton_container_version": ...}
    new = re.search(r'"release_version":\s*"(\d+\.\d+\.\d+)",\s*"triton_container_version":\s*"(\d\d\.\d\d)"', build_py)
    if new:
        found[new.group(1)] = new.group(2)
    return found


def extract_server(repo: Path) -> dict[str, Any]:
    tags = _tags(repo, r"v2\.\d+\.\d+")
    newest = tags[-1]
    commit = git(repo, "rev-list", "-n", "1", newest).strip()
    text = show(repo, newest, COMPAT) or ""
    servers = []
    for tag in tags:
        build = show(repo, tag, "build.py")
        for server, release in version_map(build or "").items():
            if server == tag[1:]:
                servers.append({"server": server, "release": release, "citation": f"{SERVER}/blob/{tag}/build.py"})
    return {"compatibility": {"tag": newest, "commit": commit, "citation": f"{SERVER}/blob/{newest}/{COMPAT}",
                              "tables": compatibility_tables(text)},
            "servers": servers}


def extract_backend(repo: Path) -> list[dict[str, Any]]:
    out = []
    for tag in _tags(repo, r"v\d+\.\d+\.\d+"):
        dockerfile = show(repo, tag, "dockerfile/Dockerfile.trt_llm_backend")
        if dockerfile is None:
            continue
        image = re.search(r"^ARG BASE_IMAGE=(\S+)", dockerfile, re.M)
        base_tag = re.search(r"^ARG BASE_TAG=(\S+)", dockerfile, re.M)
        sub = git(repo, "ls-tree", tag, "tensorrt_llm").split()
        ensemble = show(repo, tag, "all_models/inflight_batcher_llm/ensemble/config.pbtxt") is not None
        out.append({"tag": tag, "commit": git(repo, "rev-list", "-n", "1", tag).strip(),
                    "base_image": f"{image.group(1)}:{base_tag.group(1)}" if image and base_tag else None,
                    "tensorrt_llm_commit": sub[2] if len(sub) >= 3 else None, "ensemble": ensemble,
                    "citation": f"{BACKEND}/blob/{tag}/dockerfile/Dockerfile.trt_llm_backend"})
    return out


def main(argv: list[str]) -> int:
    def arg(name: str, default: Optional[str] = None) -> str:
        if name in argv:
            return argv[argv.index(name) + 1]
        if default is None:
            raise SystemExit(f"usage: python -m envkit.matrixgen.triton_source --server CLONE --backend CLONE [--out DIR] ({name} missing)")
        return default

    out = Path(arg("--out", "data/sources/triton"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "server.json").write_text(json.dumps(extract_server(Path(arg("--server"))), indent=1, sort_keys=True) + "\n")
    (out / "backend.json").write_text(json.dumps({"tags": extract_backend(Path(arg("--backend")))}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}/server.json and {out}/backend.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
