"""Small real HTTP servers on 127.0.0.1 for the tests: a file server that honours Range (and can
cut a response short, to interrupt a download), a PEP 503 index built from wheel files, an apt
pass-through mirror (what apt-cacher-ng does at an intranet site), and an OpenAI-compatible server
(an event stream per completion, a model list, a health check, an API key)."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
import time
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@contextmanager
def serve(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class RangeFiles(SimpleHTTPRequestHandler):
    """Static files with `Range: bytes=N-`; `cut_after` bytes ends the first response early."""

    cut_after: int | None = None
    requests: list = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        path = Path(self.translate_path(self.path))
        type(self).requests.append((self.path, self.headers.get("Range")))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = 0
        m = re.match(r"bytes=(\d+)-", self.headers.get("Range") or "")
        if m:
            start = int(m.group(1))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = type(self).cut_after
        if cut is not None:
            type(self).cut_after = None
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(body)


def files_handler(root: Path, cut_after: int | None = None):
    handler = type("Files", (RangeFiles,), {"cut_after": cut_after, "requests": []})
    return partial(handler, directory=str(root)), handler


def _project(wheel: str) -> str:
    return re.sub(r"[-_.]+", "-", wheel.split("-")[0]).lower()


def write_simple_index(wheels: Path, root: Path, prefixes: tuple[str, ...] = ("simple",)) -> None:
    """A PEP 503 index of the wheels under each prefix, files under root/files/."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    by_project: dict[str, list[str]] = {}
    for w in sorted(wheels.glob("*.whl")):
        shutil.copy2(w, files / w.name)
        by_project.setdefault(_project(w.name), []).append(w.name)
    for prefix in prefixes:
        depth = "../" * (len(prefix.split("/")) + 1)
        for project, names in by_project.items():
            d = root / prefix / project
            d.mkdir(parents=True, exist_ok=True)
            links = "".join(f'<a href="{depth}files/{n}#sha256={hashlib.sha256((files / n).read_bytes()).hexdigest()}">{n}</a>\n'
                            for n in names)
            (d / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")


class AptPassThrough(SimpleHTTPRequestHandler):
    """GET /debian/... and /debian-security/... are fetched from deb.debian.org once, then served."""

    cache: Path = Path("/tmp")
    requests: list = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        import requests

        type(self).requests.append(self.path)
        local = self.cache / self.path.lstrip("/")
        if not local.is_file():
            r = requests.get("http://deb.debian.org" + self.path, timeout=120)
            if r.status_code != 200:
                self.send_error(r.status_code)
                return
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(r.content)
        data = local.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def apt_mirror_handler(cache: Path):
    return type("Apt", (AptPassThrough,), {"cache": cache, "requests": []})


class EventStream(BaseHTTPRequestHandler):
    """A quiet OpenAI-compatible server: every POST is answered with a 200 event stream of `chunks` (delay in
    seconds, bytes), unless `failure(request)` gives a (status, body) for it; GET /v1/models lists `models`, GET
    /health answers 200. With `api_key` set, a request without `Authorization: Bearer <api_key>` gets a 401 that
    echoes what it was sent (as some servers do). Each request's (method, path, Authorization header, JSON body)
    is appended to `seen`: give a subclass its own list."""
    protocol_version = "HTTP/1.0"
    chunks: list = []
    models: list = ["tiny"]
    api_key: str | None = None
    seen: list = []

    def log_message(self, *a):
        pass

    def failure(self, request: dict) -> tuple[int, bytes] | None:
        return None

    def _refused(self) -> bool:
        got = self.headers.get("Authorization")
        if self.api_key is None or got == f"Bearer {self.api_key}":
            return False
        self._send(401, f"invalid API key: {got}".encode())
        return True

    def _send(self, status: int, body: bytes, kind: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        type(self).seen.append(("GET", self.path, self.headers.get("Authorization"), None))
        if self._refused():
            return
        if self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}).encode(),
                       "application/json")
        elif self.path == "/health":
            self._send(200, b"")
        else:
            self._send(404, b"not found")

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(("POST", self.path, self.headers.get("Authorization"), request))
        if self._refused():
            return
        fail = self.failure(request)
        if fail:
            self._send(*fail)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for delay, data in self.chunks:
            time.sleep(delay)
            self.wfile.write(data)
            self.wfile.flush()
