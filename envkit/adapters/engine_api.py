"""Reads of the engine's REST API over its socket with the standard library alone, for the paths that must stay fast
(doctor's listing of envkit-built images: the Docker SDK's import costs more than the whole probe). Docker and
Podman's Docker-compatible service answer the same. TLS endpoints are left to the SDK (adapters/engine.py)."""
from __future__ import annotations

import http.client
import json
import os
import socket
from typing import Any, Optional
from urllib.parse import quote, urlsplit

DEFAULT_HOST = "unix:///var/run/docker.sock"
TIMEOUT_S = 5.0


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def _connection(host: str) -> Optional[http.client.HTTPConnection]:
    if host.startswith("unix://"):
        path = host[len("unix://"):]
        return _UnixConnection(path, TIMEOUT_S) if os.path.exists(path) else None
    if host.startswith("tcp://") and not os.environ.get("DOCKER_TLS_VERIFY"):
        u = urlsplit(host)
        return http.client.HTTPConnection(u.hostname or "localhost", u.port or 2375, timeout=TIMEOUT_S)
    return None


def get_json(path: str, host: Optional[str] = None) -> Optional[Any]:
    """GET `path` of the engine's API; None where no engine answers (no socket, refused, timed out, not JSON)."""
    conn = _connection(host or os.environ.get("DOCKER_HOST", DEFAULT_HOST))
    if conn is None:
        return None
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read(64 << 20)
        return json.loads(body) if resp.status == 200 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def labelled_images(label: str, host: Optional[str] = None) -> Optional[list[tuple[str, dict[str, str]]]]:
    """(first tag, labels) of every tagged image with `label`, sorted; None where no engine answers."""
    filters = quote(json.dumps({"label": [label]}))
    doc = get_json(f"/images/json?filters={filters}", host)
    if not isinstance(doc, list):
        return None
    out = []
    for img in doc:
        if not isinstance(img, dict):
            continue
        tags = [t for t in img.get("RepoTags") or [] if isinstance(t, str) and t != "<none>:<none>"]
        labels = img.get("Labels") or {}
        if tags and isinstance(labels, dict):
            out.append((sorted(tags)[0], {str(k): str(v) for k, v in labels.items()}))
    return sorted(out)
