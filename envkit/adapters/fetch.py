"""Downloads that retry, resume and verify (adapter). Transient failures (a refused or dropped connection, a
read timeout, a 5xx answer) are retried with backoff (urllib3's Retry through requests' HTTPAdapter). A file is
first written as NAME.part; a download cut off half-way continues from where it stopped (HTTP Range), within
this run and in the next one, and the file gets its final name only once its sha256 matches (when one is known)."""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from envkit.errors import ExternalError

CHUNK = 1 << 20
RETRIES = 3            # per request: connect errors, read errors, 5xx answers
RESUMES = 3            # a body cut off half-way: continued from the .part this many times in one run
BACKOFF = 0.5          # seconds; doubled for each retry after the first
RETRY_STATUS = (500, 502, 503, 504)
Progress = Callable[[int, Optional[int]], None]  # (bytes so far, total or None)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def sha256sums(entries: Iterable[tuple[str, str]]) -> str:
    """A SHA256SUMS listing (`sha256sum -c` reads it) of (sha256, path) pairs, in the order given."""
    return "".join(f"{sha}  {path}\n" for sha, path in entries)


def retrying_session(retries: int = RETRIES, backoff: float = BACKOFF) -> Any:
    """A requests Session that retries transient failures of GET and HEAD with exponential backoff."""
    import requests
    from requests.adapters import HTTPAdapter, Retry  # urllib3's Retry, as requests hands it out

    retry = Retry(total=retries, connect=retries, read=retries, status=retries, other=0, backoff_factor=backoff,
                  status_forcelist=RETRY_STATUS, allowed_methods=frozenset({"GET", "HEAD"}), raise_on_status=False,
                  respect_retry_after_header=True)
    s = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    return s


def _fetch_once(http: Any, url: str, part: Path, progress: Optional[Progress], timeout: float) -> Optional[int]:
    """One GET appended to the .part (from its size on, by Range); the size the file should have, when known."""
    have = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    with http.get(url, headers=headers, stream=True, timeout=timeout) as r:
        if r.status_code == 416:  # the .part already holds everything
            return None
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
        return size


def download(url: str, dest: Path, *, sha256: Optional[str] = None, progress: Optional[Progress] = None,
             session: Any = None, timeout: float = 60.0, resumes: int = RESUMES, backoff: float = BACKOFF) -> bool:
    """Fetch url to dest. Returns False when dest already holds the verified file (nothing fetched)."""
    import requests

    if dest.is_file() and (sha256 is None or sha256_file(dest) == sha256):
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    http = session or retrying_session(backoff=backoff)
    attempt = 0
    while True:
        before = part.stat().st_size if part.exists() else 0
        try:
            size = _fetch_once(http, url, part, progress, timeout)
            got = part.stat().st_size if part.exists() else 0
            if size is None or got >= size:
                break
            cut = f"stopped at {got} of {size} bytes"
        except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
            cut = f"{type(exc).__name__}: {str(exc)[:200]}"  # urllib3 retries only before the body: resume from the .part
        except requests.RequestException as exc:
            raise ExternalError(f"download of {url} failed: {type(exc).__name__}: {str(exc)[:200]}",
                                "check the connection or the site mirror, then run the same command again: it resumes") from None
        have = part.stat().st_size if part.exists() else 0
        attempt += 1
        if have <= before or attempt > resumes:  # nothing came this time (retried already), or cut off too often
            raise ExternalError(f"download of {url} failed ({have} bytes kept): {cut}",
                                "check the connection or the site mirror, then run the same command again: it resumes from there")
        time.sleep(backoff * (2 ** (attempt - 1)))
    if sha256 is not None:
        got_sha = sha256_file(part)
        if got_sha != sha256:
            part.unlink()
            raise ExternalError(f"{dest.name}: sha256 {got_sha[:16]}... is not the published {sha256[:16]}...",
                                "the download was corrupted or the source changed; run again, or check the mirror")
    os.replace(part, dest)
    return True


def get_text(url: str, what: str = "page") -> str:
    """One small text page (an index page): its text, or an ExternalError naming the page. Transient failures are retried."""
    import requests

    try:
        r = retrying_session().get(url, timeout=60, headers={"Accept": "text/html"})
        r.raise_for_status()
    except requests.RequestException as exc:
        raise ExternalError(f"cannot read the {what} {url}: {type(exc).__name__}", "check the connection or the site index") from None
    return r.text
