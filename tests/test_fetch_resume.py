"""Downloads retry transient failures, resume after an interruption and verify their sha256, against a real local
HTTP server (newcomer review: fetch.py had no retries, any transient error aborted `bundle`)."""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

from envkit.adapters.fetch import RESUMES, download, get_text
from envkit.errors import ExternalError
from servers import RangeFiles, files_handler, serve

NAME = "flash_attn-2.7.4.post1.tar.gz"


@pytest.fixture
def payload(tmp_path):
    data = os.urandom(3 * (1 << 20) + 12345)
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / NAME).write_bytes(data)
    return data


class Scripted(RangeFiles):
    """RangeFiles whose first requests misbehave, one action each: "503" (a 503 answer), "drop" (the connection
    closed before any answer), "cut" (the body cut off after 1 MiB); then it serves normally."""

    script: list = []

    def do_GET(self):
        action = type(self).script.pop(0) if type(self).script else None
        if action == "503":
            type(self).requests.append((self.path, self.headers.get("Range")))
            self.send_error(503)
        elif action == "drop":
            type(self).requests.append((self.path, self.headers.get("Range")))
            self.close_connection = True
            self.connection.shutdown(2)
        else:
            type(self).cut_after = (1 << 20) if action == "cut" else None
            super().do_GET()


def scripted(root: Path, *script: str):
    from functools import partial

    handler = type("Scripted", (Scripted,), {"script": list(script), "requests": [], "cut_after": None})
    return partial(handler, directory=str(root)), handler


def test_an_interrupted_download_resumes_from_where_it_stopped_and_verifies(tmp_path, payload):
    handler, cls = files_handler(tmp_path / "srv", cut_after=1 << 20)
    sha = hashlib.sha256(payload).hexdigest()
    dest = tmp_path / "sources" / NAME
    with serve(handler) as srv:
        url = f"http://127.0.0.1:{srv.server_port}/{NAME}"
        assert download(url, dest, sha256=sha, backoff=0) is True  # cut off after 1 MiB: continued in the same run
        assert download(url, dest, sha256=sha, backoff=0) is False  # complete and verified: nothing fetched
    assert dest.read_bytes() == payload and not dest.with_name(dest.name + ".part").exists()
    assert cls.requests == [(f"/{NAME}", None), (f"/{NAME}", f"bytes={1 << 20}-")]


def test_a_download_cut_off_every_time_stops_after_a_few_resumes_and_the_next_run_continues(tmp_path, payload):
    payload = os.urandom((RESUMES + 3) << 20)  # longer than RESUMES + 1 cut-off answers carry
    (tmp_path / "srv" / NAME).write_bytes(payload)
    sha = hashlib.sha256(payload).hexdigest()
    dest = tmp_path / "sources" / NAME
    part = dest.with_name(dest.name + ".part")
    handler, cls = scripted(tmp_path / "srv", *["cut"] * (RESUMES + 1))
    with serve(handler) as srv:
        url = f"http://127.0.0.1:{srv.server_port}/{NAME}"
        with pytest.raises(ExternalError) as e:
            download(url, dest, sha256=sha, backoff=0)
        assert "run the same command again: it resumes from there" in e.value.fix
        assert not dest.exists() and part.stat().st_size == (RESUMES + 1) << 20
        assert f"({(RESUMES + 1) << 20} bytes kept)" in e.value.message
        assert download(url, dest, sha256=sha, backoff=0) is True
    assert dest.read_bytes() == payload
    assert [r for _, r in cls.requests] == [None] + [f"bytes={n << 20}-" for n in range(1, RESUMES + 2)]


@pytest.mark.parametrize("script", [("503",), ("503", "503"), ("drop",), ("503", "drop", "cut")])
def test_transient_failures_are_retried_with_backoff(tmp_path, payload, script):
    """Newcomer review, fetch.py: a 5xx answer or a dropped connection aborted the whole bundle."""
    sha = hashlib.sha256(payload).hexdigest()
    dest = tmp_path / NAME
    handler, cls = scripted(tmp_path / "srv", *script)
    with serve(handler) as srv:
        assert download(f"http://127.0.0.1:{srv.server_port}/{NAME}", dest, sha256=sha, backoff=0) is True
    assert dest.read_bytes() == payload
    assert len(cls.requests) == len(script) + 1


def test_a_server_that_keeps_failing_is_one_error_after_the_retries(tmp_path, payload):
    handler, cls = scripted(tmp_path / "srv", *["503"] * 10)
    with serve(handler) as srv:
        with pytest.raises(ExternalError) as e:
            download(f"http://127.0.0.1:{srv.server_port}/{NAME}", tmp_path / NAME, backoff=0)
    assert "503" in e.value.message and "run the same command again" in e.value.fix
    assert len(cls.requests) == 4  # the first try and 3 retries
    assert not (tmp_path / NAME).exists()


def test_an_index_page_is_retried_too(tmp_path):
    (tmp_path / "srv" / "simple").mkdir(parents=True)
    (tmp_path / "srv" / "simple" / "page.html").write_text("<a href='x'>x</a>")
    handler, cls = scripted(tmp_path / "srv", "503")
    with serve(handler) as srv:
        assert "href" in get_text(f"http://127.0.0.1:{srv.server_port}/simple/page.html")
    assert len(cls.requests) == 2


def test_a_corrupted_download_is_refused_and_not_kept(tmp_path, payload):
    handler, _ = files_handler(tmp_path / "srv")
    dest = tmp_path / "x.tar.gz"
    with serve(handler) as srv:
        with pytest.raises(ExternalError, match="sha256"):
            download(f"http://127.0.0.1:{srv.server_port}/{NAME}", dest, sha256="0" * 64)
    assert not dest.exists() and not dest.with_name(dest.name + ".part").exists()


def test_an_unreachable_server_is_one_error_with_a_fix(tmp_path):
    with pytest.raises(ExternalError) as e:
        download("http://127.0.0.1:9/none.whl", tmp_path / "none.whl", timeout=5, backoff=0)
    assert "failed" in e.value.message and e.value.fix
    assert re.search(r"ConnectionError", e.value.message)
