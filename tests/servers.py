"""Small real HTTP servers on 127.0.0.1 for the tests: a file server that honours Range (and can
cut a response short, to interrupt a download), a PEP 503 index built from wheel files, an apt
pass-through mirror (what apt-cacher-ng does at an intranet site), an OpenAI-compatible server
(an event stream per completion, a model list, a health check, an API key), and a raw server that misbehaves
byte for byte (`misbehaving`: trickles, keep-alives forever, huge lines, wrong statuses; fuzz report 3)."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import socketserver
import subprocess
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
    """GET /debian/... and /debian-security/... are fetched from `upstream` (the archive the base image's own apt sources
    name) once, then served."""

    cache: Path = Path("/tmp")
    upstream: str = ""
    requests: list = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        import requests

        type(self).requests.append(self.path)
        local = self.cache / self.path.lstrip("/")
        if not local.is_file():
            r = requests.get(self.upstream + self.path, timeout=120)
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


def apt_mirror_handler(cache: Path, upstream: str):
    return type("Apt", (AptPassThrough,), {"cache": cache, "upstream": upstream.rstrip("/"), "requests": []})


def image_apt_origin(image: str, engine: tuple[str, ...] = ("docker",)) -> str:
    """The scheme and host of the first apt source in the image's own /etc/apt: the upstream of a pass-through mirror."""
    p = subprocess.run([*engine, "run", "--rm", "--network", "none", image, "sh", "-c",
                        "cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null"],
                       capture_output=True, text=True, timeout=300)
    m = re.search(r"^(?:deb\s+(?:\[[^\]]*\]\s+)?|URIs:\s*)(https?://[^/\s]+)", p.stdout, re.M)
    assert m, f"{image} names no apt source in /etc/apt: {p.stdout[-500:]}{p.stderr[-500:]}"
    return m.group(1)


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


# ---------------------------------------------------------------- misbehaving servers (fuzz report 3)

class RawRequest:
    """One request as a raw server read it: method, path, headers (lower-cased names), body."""

    def __init__(self, method: str, path: str, headers: dict, body: bytes) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body

    @property
    def auth(self) -> str:
        return self.headers.get("authorization", "")


class RawHandler(socketserver.StreamRequestHandler):
    """A server that writes whatever its `answer(handler, request)` writes, byte for byte: statuses, bodies and streams
    no well-behaved server sends (a byte at a time, lines of hundreds of MB, keep-alives forever). Loops end when the
    client leaves (a write fails) or the server stops (`stopping()`). `posts` counts the POSTs it got."""

    answer = staticmethod(lambda h, req: None)
    posts = None  # a per-server list, set by misbehaving()

    def handle(self) -> None:
        try:
            head = self.rfile.readline(65537)
            if not head:
                return
            headers: dict = {}
            while (line := self.rfile.readline(65537)) not in (b"\r\n", b"\n", b""):
                k, _, v = line.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            body = self.rfile.read(int(headers.get("content-length", 0) or 0))
            parts = head.decode("latin-1").split()
            req = RawRequest(parts[0], parts[1] if len(parts) > 1 else "/", headers, body)
            if req.method == "POST" and self.posts is not None:
                self.posts.append(req)
            type(self).answer(self, req)
            self.wfile.flush()
        except OSError:  # the client left: what a misbehaving server's loops end on
            pass

    def stopping(self) -> bool:
        return self.server.stop.is_set()  # type: ignore[attr-defined]

    def write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def send(self, status: int, body: bytes = b"", kind: str = "application/json", reason: str = "X", extra: str = "") -> None:
        self.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n{extra}"
                   "Connection: close\r\n\r\n".encode("latin-1") + body)

    def stream_head(self) -> None:
        self.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")

    def forever(self, data: bytes, every: float) -> None:
        """`data` every `every` seconds until the client leaves or the server stops."""
        while not self.stopping():
            self.write(data)
            time.sleep(every)


@contextmanager
def misbehaving(answer):
    """A raw server on 127.0.0.1 whose every request is answered by answer(handler, request); yields (url, posts)."""
    posts: list = []
    handler = type("Raw", (RawHandler,), {"answer": staticmethod(answer), "posts": posts})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler, bind_and_activate=False)
    server.daemon_threads = True
    server.allow_reuse_address = True
    server.server_bind()
    server.server_activate()
    server.stop = threading.Event()  # type: ignore[attr-defined]
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)  # a quick shutdown()
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", posts
    finally:
        server.stop.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


TOKEN = b'data: {"choices": [{"text": "t"}]}\n\n'
DONE = b"data: [DONE]\n\n"


def models_then(post, models=("m",)):
    """An OpenAI server: GET /v1/models lists `models`, GET /health is 200, other GETs 404; a POST is post(h, req)."""
    def answer(h: RawHandler, req: RawRequest) -> None:
        if req.method == "GET":
            if req.path.endswith("/v1/models"):
                h.send(200, json.dumps({"object": "list", "data": [{"id": m} for m in models]}).encode())
            elif req.path.endswith("/health"):
                h.send(200)
            else:
                h.send(404, b"not found", "text/plain")
            return
        post(h, req)
    return answer


def good_stream(h: RawHandler, req: RawRequest) -> None:
    h.stream_head()
    h.write(TOKEN * 3 + b'data: {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3}}\n\n' + DONE)
