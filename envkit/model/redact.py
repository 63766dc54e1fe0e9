"""The one redaction point: every text envkit builds from what it does not control (a server's answer, a tool's
output, a file a user gave, an exception's words) goes through here before it is cut, logged, written or shown.

- `redact(text, secrets=())`: the secrets envkit holds (an API key, a password, a token: pass them) cut out of the
  text, whole, in their URL-encoded and JSON-escaped spellings, and in part: any run of `FRAGMENT` or more
  characters of a secret's (a server that echoes the first half of a key, a text cut inside one). Also what looks
  like a secret whoever's it is: `Authorization:` values, `Bearer`/`Basic` credentials, the login in a URL
  (`https://user:pass@host` -> `https://***@host`), query-string tokens (`?private_token=`, `&token=`, `?key=`,
  `&sig=`, `X-Amz-Signature=`... any parameter whose name holds token, key, sig, secret, password, auth,
  credential or session), `api_key: VALUE`-style pairs, the token shapes of OpenAI (`sk-...`), GitHub, GitLab,
  Hugging Face, Slack and AWS, and PEM private-key blocks. Each becomes `***` (`REDACTED`).
- `printable(text)`: C0 and C1 control characters (ESC, BEL, the OSC and CSI introducers, DEL, NEL...), carriage
  returns and the bidirectional-override characters written as `\\xNN` / `\\uNNNN`, so that a server's text cannot
  retitle, clear or rewrite a terminal (or write its clipboard: OSC 52); newline and tab stay.
- `safe_text(text, secrets=(), limit=300)`: the order that matters, in one call: redact, then escape the controls,
  then fold the whitespace into one line, then cut to `limit` characters. Cutting first is what leaked a key in
  part (fuzz report 3, D4): the cut key no longer matched.

All three are pure, total (any str, or bytes read as UTF-8 with replacement) and idempotent: what they return
passes through them unchanged. They cost time linear in the text; keep the texts given to them bounded (read at
most a window of a server's body, then call them, then cut).
"""
from __future__ import annotations

import json
import re
from typing import Callable, Iterable, Optional, Union
from urllib.parse import quote

REDACTED = "***"
FRAGMENT = 6  # a run of this many characters of a secret's, anywhere in a text, is cut out with the rest of the run
LIMIT = 300  # safe_text's default cut, in characters

Text = Union[str, bytes]

_SECRET_WORDS = r"(?:token|key|sig|signature|secret|password|passwd|pwd|auth|credential|session)"
_PATTERNS: tuple[tuple[re.Pattern[str], Union[str, Callable[[re.Match[str]], str]]], ...] = (
    # PEM private keys, whole (to the END line, or to the text's end when it was cut inside one)
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S), REDACTED),
    # Authorization: [scheme] value (a header echoed in a body, a log line); Proxy-Authorization too
    (re.compile(r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|token|digest|negotiate)\s+)?[^\s\"',;]+"),
     lambda m: m.group(1) + (m.group(2) + " " if m.group(2) else "") + REDACTED),
    (re.compile(r"(?i)\b(bearer)\s+[^\s\"',;]{3,}"), r"\1 " + REDACTED),
    (re.compile(r"\b(Basic)\s+[A-Za-z0-9+/]{8,}={0,2}"), r"\1 " + REDACTED),
    # the login of a URL: scheme://user[:password]@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@?#\"'<>]+@"), r"\1" + REDACTED + "@"),
    # query-string parameters with a secret's name: ?private_token=, &token=, ?key=, &sig=, X-Amz-Signature=...
    (re.compile(r"(?i)([?&;])([a-z0-9_.\-]*" + _SECRET_WORDS + r"[a-z0-9_.\-]*)=[^&#\s\"'<>]*"), r"\1\2=" + REDACTED),
    # name: value or name=value pairs with a secret's name (JSON, YAML, a config dump, an error message)
    (re.compile(r"(?i)\b((?:x-)?(?:api[_-]?key|access[_-]?key|access[_-]?token|auth[_-]?token|private[_-]?token|refresh[_-]?token"
                r"|id[_-]?token|client[_-]?secret|secret[_-]?key|secret|password|passwd|amz-signature|amz-credential|amz-security-token)[\"']?\s*[:=]\s*[\"']?)(?!\*\*\*)[^\s\"',;&]+"),
     r"\1" + REDACTED),
    # token shapes whoever's they are
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), REDACTED),  # OpenAI and OpenAI-compatible gateways
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"), REDACTED),  # GitHub
    (re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"), REDACTED),  # GitLab
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}"), REDACTED),  # Hugging Face
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), REDACTED),  # Slack
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),  # AWS access key ids
)
# C0 (but newline and tab), DEL, C1, and the bidirectional controls that reorder what a terminal shows
# (and a lone surrogate, which a UTF-8 terminal cannot even be sent)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _str(text: Text) -> str:
    return text.decode("utf-8", errors="replace") if isinstance(text, (bytes, bytearray)) else str(text)


def _spellings(secret: str) -> set[str]:
    """The secret as written, URL-encoded (a query string, a form) and JSON-escaped (a body that quotes it)."""
    return {s for s in (secret, quote(secret, safe=""), json.dumps(secret)[1:-1]) if s}


def _covered(text: str, secret: str) -> list[tuple[int, int]]:
    """The spans of `text` that are the secret whole, or a run of FRAGMENT or more of its characters."""
    spans = []
    if len(secret) <= FRAGMENT:
        start = text.find(secret)
        while start >= 0:
            spans.append((start, start + len(secret)))
            start = text.find(secret, start + 1)
        return spans
    for window in {secret[i:i + FRAGMENT] for i in range(len(secret) - FRAGMENT + 1)}:
        start = text.find(window)
        while start >= 0:
            spans.append((start, start + FRAGMENT))
            start = text.find(window, start + 1)
    return spans


def redact(text: Text, secrets: Iterable[Optional[str]] = ()) -> str:
    """`text` with every secret given (None and "" are skipped), whole or in part, and whatever looks like a
    credential, replaced by *** (see the module's docstring for what is recognised)."""
    out = _str(text)
    spans: list[tuple[int, int]] = []
    for secret in {s for s in secrets if s}:
        for spelling in _spellings(secret):
            spans += _covered(out, spelling)
    if spans:
        spans.sort()
        merged = [list(spans[0])]
        for a, b in spans[1:]:
            if a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        pieces, at = [], 0
        for a, b in merged:
            pieces += [out[at:a], REDACTED]
            at = b
        out = "".join(pieces) + out[at:]
    for pattern, replacement in _PATTERNS:
        out = pattern.sub(replacement, out)
    return out


def printable(text: Text) -> str:
    """`text` with its control characters written as escapes (\\x1b, \\x07, \\x9b, \\u202e...); newline and tab kept."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) <= 0xFF else f"\\u{ord(m.group()):04x}", _str(text))


def safe_text(text: Text, secrets: Iterable[Optional[str]] = (), limit: Optional[int] = LIMIT) -> str:
    """Outside text made fit for one line of envkit's output: redacted, controls escaped, whitespace folded to single
    spaces, then (limit not None) cut to `limit` characters, the last three "..." where it was cut."""
    line = " ".join(printable(redact(text, secrets)).split())
    if limit is not None and len(line) > limit:
        line = line[:max(0, limit - 3)].rstrip() + "..."
    return line
