"""Downloads resume after an interruption and verify their sha256, against a real local HTTP server."""
from __future__ import annotations

import hashlib
import os

import pytest

from envkit.errors import ExternalError
from envkit.adapters.fetch import download
from servers import files_handler, serve


@pytest.fixture
def payload(tmp_path):
    data = os.urandom(3 * (1 << 20) + 12345)
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / "flash_attn-2.7.4.post1.tar.gz").write_bytes(data)
    return data


def test_an_interrupted_download_resumes_from_where_it_stopped_and_verifies(tmp_path, payload):
    handler, cls = files_handler(tmp_path / "srv", cut_after=1 << 20)
    sha = hashlib.sha256(payload).hexdigest()
    dest = tmp_path / "sources" / "flash_attn-2.7.4.post1.tar.gz"
    with serve(handler) as srv:
        url = f"http://127.0.0.1:{srv.server_port}/flash_attn-2.7.4.post1.tar.gz"
        with pytest.raises(ExternalError) as e:
            download(url, dest, sha256=sha)
        assert "run the same command again" in e.value.fix
        part = dest.with_name(dest.name + ".part")
        assert not dest.exists() and part.stat().st_size == 1 << 20
        assert download(url, dest, sha256=sha) is True
        assert download(url, dest, sha256=sha) is False  # complete and verified: nothing fetched
    assert dest.read_bytes() == payload
    assert cls.requests == [("/flash_attn-2.7.4.post1.tar.gz", None), ("/flash_attn-2.7.4.post1.tar.gz", f"bytes={1 << 20}-")]


def test_a_corrupted_download_is_refused_and_not_kept(tmp_path, payload):
    handler, _ = files_handler(tmp_path / "srv")
    dest = tmp_path / "x.tar.gz"
    with serve(handler) as srv:
        with pytest.raises(ExternalError, match="sha256"):
            download(f"http://127.0.0.1:{srv.server_port}/flash_attn-2.7.4.post1.tar.gz", dest, sha256="0" * 64)
    assert not dest.exists() and not dest.with_name(dest.name + ".part").exists()


def test_an_unreachable_server_is_one_error_with_a_fix(tmp_path):
    with pytest.raises(ExternalError) as e:
        download("http://127.0.0.1:9/none.whl", tmp_path / "none.whl", timeout=5)
    assert "failed" in e.value.message and e.value.fix
