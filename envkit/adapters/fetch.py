"""Downloads that resume and verify (adapter). A file is first written as NAME.part; an interrupted
download continues from where it stopped (HTTP Range), and the file gets its final name only once
its sha256 matches (when one is known)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable, Optional

from envkit.errors import ExternalError

CHUNK = 1 << 20
Progress = Callable[[int, Optional[int]], None]  # (bytes so far, total or None)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def download(url: str, dest: Path, *, sha256: Optional[str] = None, progress: Optional[Progress] = None,
             session=None, timeout: float = 60.0) -> bool:
    """Fetch url to dest. Returns False when dest already holds the verified file (nothing fetched)."""
    import requests

    if dest.is_file() and (sha256 is None or sha256_file(dest) == sha256):
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    http = session or requests.Session()
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        with http.get(url, headers=headers, stream=True, timeout=timeout) as r:
            if r.status_code == 416:  # the .part already holds everything
                pass
            else:
                r.raise_for_status()
                if have and r.status_code != 206:  # the server ignored Range: start over
                    have = 0
                total = r.headers.get("Content-Length")
                size = int(total) + have if total is not None else None
                with part.open("ab" if have else "wb") as f:
                    done = have
                    for block in r.iter_content(CHUNK):
                        f.write(block)
                        done += len(block)
                        if progress:
                            progress(done, size)
                if size is not None and part.stat().st_size < size:
                    raise ExternalError(f"download of {url} stopped at {part.stat().st_size} of {size} bytes",
                                        "run the same command again: it resumes from there")
    except requests.RequestException as exc:
        raise ExternalError(f"download of {url} failed: {type(exc).__name__}: {str(exc)[:200]}",
                            "check the connection or the site mirror, then run the same command again: it resumes") from None
    if sha256 is not None:
        got = sha256_file(part)
        if got != sha256:
            part.unlink()
            raise ExternalError(f"{dest.name}: sha256 {got[:16]}... is not the published {sha256[:16]}...",
                                "the download was corrupted or the source changed; run again, or check the mirror")
    os.replace(part, dest)
    return True


def get_text(url: str, what: str = "page") -> str:
    """One small text page (an index page): its text, or an ExternalError naming the page."""
    import requests

    try:
        r = requests.get(url, timeout=60, headers={"Accept": "text/html"})
        r.raise_for_status()
    except requests.RequestException as exc:
        raise ExternalError(f"cannot read the {what} {url}: {type(exc).__name__}", "check the connection or the site index") from None
    return r.text
