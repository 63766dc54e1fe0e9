"""The site mirror profile (SITE.toml): where an intranet site keeps its apt, pip, wheel and image
mirrors. Parsed once into a frozen Site; the planner reads nothing else about the site. Credentials never
appear here: `netrc = true` in [pip] or [apt] says that the mirror asks for a login, and `envkit build
--secret netrc=FILE` (apt: `--secret apt-netrc=FILE`) gives the file at build time, mounted by the steps that
need it and never written into a layer (model.site.BuildSecret).

    [apt]
    mirror = "http://10.0.0.5/ubuntu"            # replaces the distro archive in sources.list and .sources
    security = "http://10.0.0.5/ubuntu"          # optional; Ubuntu: defaults to mirror, Debian: mirror + "-security"
    remove_vendor_lists = true                    # cuda*.list, nvidia-ml, rocm, amdgpu lists (default true)
    # netrc = true                                # the mirror asks for a login: build with --secret apt-netrc=FILE

    [pip]
    index_url = "http://10.0.0.5/pypi/simple"
    trusted_hosts = ["10.0.0.5"]
    extra_index_urls = []
    # netrc = true                                # the index asks for a login: build with --secret netrc=FILE

    [rewrite]                                     # upstream URL prefix -> the site's mirror of it
    "https://download.pytorch.org/whl" = "http://10.0.0.5/pytorch-whl"
    "https://github.com" = "http://10.0.0.5/github"

    [proxy]                                       # passed as build args at build time, never written into a layer
    http = "http://proxy.corp:3128"
    https = "http://proxy.corp:3128"
    no_proxy = "10.0.0.0/8,.corp"

    [ca]
    cert = "corp-root-ca.crt"                     # relative to this file

    [registry]
    prefix = "registry.corp:5000"                 # docker.io/nvidia/cuda:X -> registry.corp:5000/nvidia/cuda:X;
                                                  # nvcr.io/nvidia/tritonserver:T -> registry.corp:5000/nvidia/tritonserver:T

    [images]                                      # any base image -> the site's own name or digest
    "nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04" = "registry.corp:5000/cuda@sha256:..."

    [dtk]                                         # DTK images are not on Docker Hub
    devel_image = "registry.corp:5000/dtk:24.04-ubuntu20.04"
    runtime_image = "registry.corp:5000/dtk:24.04-ubuntu20.04"
    os = "ubuntu20.04"

    [cuda]
    toolkit = "pip"                               # the devel stage's CUDA toolkit from NVIDIA's wheels (default "image")
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from envkit.config.fields import Field, Invalid, Problem, Table, boolean, text
from envkit.config.userfile import parse_toml, read_bytes, read_text
from envkit.errors import InputError
from envkit.model.plan import TOOLKIT_SOURCES
from envkit.model.site import APT_NETRC, PIP_NETRC, BuildSecret, Site

_SECRET_KEY = re.compile(r"pass(word)?|token|secret|api[_-]?key|auth", re.I)
_IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*(:\d+)?")
_SECRET_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

# How a login reaches each kind of mirror: as a build secret, never through the site file or a layer.
SITE_SECTION = "see envkit's docs/guide/sites.md, mirrors that ask for a login"
_PIP_LOGIN = (f"put the login in a netrc file, set [pip] netrc = true, and pass the file at build time: "
              f"envkit build --secret {PIP_NETRC.id}=FILE ({SITE_SECTION})")
_APT_LOGIN = (f"put the login in an apt auth.conf file (netrc format), set [apt] netrc = true, and pass it at build time: "
              f"envkit build --secret {APT_NETRC.id}=FILE ({SITE_SECTION})")
_PROXY_LOGIN = ("let the build host through the proxy without a login (a proxy login would ride in the build args), "
                "or reach the site's mirrors without the proxy")
_IMAGE_LOGIN = "log in on the build host (docker login or podman login: the engine pulls with it) and name the image without them"


def _bad(path: str, what: str, fix: str) -> InputError:
    return InputError(f"site file {path}: {what}", fix)


# ---------------------------------------------------------------- converters: their messages follow the key's place

def _url_with(login_fix: str) -> Callable[[Any], str]:
    """The URL converter of one kind of mirror; `login_fix` says how a login reaches that mirror instead."""
    def convert(value: Any) -> str:
        return _url(value, login_fix)
    return convert


def _shown(value: Any) -> str:
    """A URL as an error may show it: any login before the host cut out."""
    return re.sub(r"(://)[^/@]*@", r"\1***@", value) if isinstance(value, str) else repr(value)


def _url(value: Any, login_fix: str = _PIP_LOGIN) -> str:
    if not isinstance(value, str) or not re.match(r"(https?|file)://\S+$", value):
        raise Invalid(f"must be an http(s):// URL, got {_shown(value)!r}", 'write {where} = "http://mirror.host/path"')
    if re.match(r"[a-z]+://[^/]*@", value):  # a login, whatever characters it holds: say that, not the characters
        raise Invalid("carries credentials (***@...): they would be written into an image layer",
                      f"write the URL without them; {login_fix}")
    if re.search(r"[#'\"`$\\;&|<>()\s]", value):
        raise Invalid(f"contains a character a URL here may not hold ({_shown(value)!r})", "percent-encode it or use a plainer mirror path")
    try:
        parts = urlsplit(value)
        parts.port
    except ValueError as exc:
        raise Invalid(f"is not a valid URL ({exc})", "write it as http://host[:port]/path") from None
    if parts.username or parts.password:
        raise Invalid("carries credentials (***@...): they would be written into an image layer",
                      f"write the URL without them; {login_fix}")
    if parts.query:
        raise Invalid("has a query string (?...): it would be written into the image (pip.conf, site.env, RUN lines), "
                      "and query strings carry tokens", f"give the mirror's plain URL; if it asks for a login, {login_fix}")
    return value.rstrip("/")


def _image(value: Any) -> str:
    """An image reference; `user:pass@` in front of it would be a credential, `@sha256:...` after it is a digest."""
    ref = _image_text(value)
    if "@" in ref and not re.match(r"sha(256|384|512):", ref.split("@", 1)[1]):
        raise Invalid(f"carries credentials ({ref.split('@', 1)[0].split(':', 1)[0]}@...): they would be written into the "
                      "Dockerfile's FROM line and the plan", _IMAGE_LOGIN)
    return ref


_image_text = text(_IMAGE_REF.pattern, "must be an image reference like registry:5000/name:tag or name@sha256:..., got {value}",
                   "write the image name on one line, without spaces")
_no_proxy = text(r"[A-Za-z0-9.,/*:_-]*", "must be a comma-separated string of hosts and networks, got {value}",
                 'write no_proxy = "10.0.0.0/8,.corp.example"')
def _toolkit_source(value: Any) -> str:
    if value not in TOOLKIT_SOURCES:
        raise Invalid(f"must be one of {', '.join(repr(v) for v in TOOLKIT_SOURCES)}, got {value!r}",
                      'write toolkit = "pip" (NVIDIA\'s toolkit wheels) or toolkit = "image" (the nvidia/cuda devel image)')
    return str(value)


_os_name = text(r"[a-z]+\d+(\.\d+)?", 'must name an os like "ubuntu20.04", got {value}', "see envkit matrix show os")


def _str_list(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Invalid("must be a list of strings", 'write {where} = ["..."]')
    return tuple(value)


def _url_list(value: Any) -> tuple[str, ...]:
    return tuple(_url(u, _PIP_LOGIN) for u in _str_list(value))


def _netrc(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Invalid("must be true or false: the site file says that the mirror asks for a login, never the login or "
                      "where its file lies", "write {where} = true and give the file at build time (envkit build --secret ID=FILE)")
    return value


def _hosts(value: Any) -> tuple[str, ...]:
    hosts = _str_list(value)
    for h in hosts:
        if not _HOST.fullmatch(h):
            raise Invalid(f"entry {h!r} is not a host name", 'write host or host:port, e.g. "10.10.1.10"')
    return hosts


def _registry_prefix(value: Any) -> str:
    if not isinstance(value, str) or "://" in value or not value.strip("/") or not _IMAGE_REF.fullmatch(value):
        raise Invalid("must be a registry host[/path] without a scheme", 'write prefix = "registry.corp:5000"')
    if "@" in value:
        raise Invalid(f"carries credentials ({value.split('@', 1)[0].split(':', 1)[0]}@...): they would be written into every "
                      "FROM line and the plan", _IMAGE_LOGIN.replace("name the image without them", 'write prefix = "registry.corp:5000"'))
    return value.strip("/")


def _cert_path(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or re.search(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]", value):
        raise Invalid("must be the path of a PEM file on one line, relative to the site file", 'write {where} = "corp-root-ca.crt"')
    return value


def _opt(key: str, convert: Callable[[Any], Any], default: Any = None) -> Field:
    return Field(key, convert, object, default)


# ---------------------------------------------------------------- the tables; None: a free map, read by hand

_TABLES: dict[str, Optional[Table]] = {
    "apt": Table.of(_opt("remove_vendor_lists", boolean, True), _opt("mirror", _url_with(_APT_LOGIN)),
                    _opt("security", _url_with(_APT_LOGIN)), _opt("netrc", _netrc, False)),
    "pip": Table.of(_opt("trusted_hosts", _hosts, ()), _opt("index_url", _url_with(_PIP_LOGIN)), _opt("extra_index_urls", _url_list, ()),
                    _opt("netrc", _netrc, False)),
    "rewrite": None,
    "proxy": Table.of(_opt("http", _url_with(_PROXY_LOGIN)), _opt("https", _url_with(_PROXY_LOGIN)), _opt("no_proxy", _no_proxy)),
    "ca": Table.of(_opt("cert", _cert_path)),
    "registry": Table.of(_opt("prefix", _registry_prefix)),
    "images": None,
    "dtk": Table.of(_opt("devel_image", _image), _opt("runtime_image", _image), _opt("os", _os_name)),
    "cuda": Table.of(_opt("toolkit", _toolkit_source)),
}


def _raise_problem(path: str, table: str) -> Callable[[Problem], None]:
    def report(p: Problem) -> None:
        if p.what == "unknown":
            raise _bad(path, f"unknown key `{p.key}` in [{table}]", f"allowed keys: {', '.join(p.allowed)}")
        where = f"[{table}] {p.key}"
        raise _bad(path, f"{where} {p.why}", p.fix_at(where))
    return report


def _checked(path: str, where: str, convert: Callable[[Any], Any], value: Any) -> Any:
    """A converter's value, or its refusal as the one-line InputError naming `where`."""
    try:
        return convert(value)
    except Invalid as exc:
        raise _bad(path, f"{where} {exc.why}", exc.fix.replace("{where}", where)) from None


def _check_no_secrets(path: str, raw: dict, where: str = "") -> None:
    for key, value in raw.items():
        here = f"{where}.{key}" if where else key
        if isinstance(value, dict):
            _check_no_secrets(path, value, here)
        elif _SECRET_KEY.search(key) and where not in ("rewrite", "images"):
            login = {"pip": _PIP_LOGIN, "apt": _APT_LOGIN, "proxy": _PROXY_LOGIN}.get(where.split(".")[0],
                                                                                      f"{_PIP_LOGIN}; images: {_IMAGE_LOGIN}")
            raise _bad(path, f"`{here}` looks like a credential: envkit never writes credentials into an image or a site file",
                       f"remove it; {login}")


def _check_tables(path: str, raw: dict) -> None:
    for table, value in raw.items():
        if table not in _TABLES:
            raise _bad(path, f"unknown table [{table}]", f"use only {', '.join('[' + t + ']' for t in _TABLES)}")
        if not isinstance(value, dict):
            raise _bad(path, f"[{table}] must be a table", f"write it as [{table}] with keys below it")
        spec = _TABLES[table]
        if spec is not None:
            spec.check_keys(value, _raise_problem(path, table))


_MAPS = {"rewrite": _url_with(_PIP_LOGIN), "images": _image}
_READ_ORDER = ("apt", "rewrite", "proxy", "ca", "images", "registry", "dtk", "cuda", "pip")  # the first problem found is the one named


def _read_tables(path: str, raw: dict, read_file: Optional[Callable[[Path], bytes]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for table in _READ_ORDER:
        spec = _TABLES[table]
        if spec is None:
            out[table] = _map(path, raw, table, _MAPS[table])
        else:
            out[table] = spec.convert(raw.get(table, {}), _raise_problem(path, table))
        if table == "ca":
            out["ca"]["cert"] = _ca_cert(path, out["ca"]["cert"], read_file)
    return out


def _map(path: str, raw: dict, table: str, convert: Callable[[Any], Any]) -> tuple[tuple[str, str], ...]:
    """A free map ([rewrite], [images]): every key and value checked by `convert`."""
    return tuple((_checked(path, f"[{table}] key" + (f" {k!r}" if table == "rewrite" else ""), convert, k),
                  _checked(path, f"[{table}] {k!r}", convert, v)) for k, v in raw.get(table, {}).items())


def _read_ca(cert_path: Path) -> bytes:
    """The [ca] certificate, read bounded like every user file: a device (/dev/zero) or a huge file is one line."""
    return read_bytes(str(cert_path), "[ca] cert", "point cert at a PEM file, relative to the site file")


def _ca_cert(path: str, cert: Optional[str], read_file: Optional[Callable[[Path], bytes]]) -> Optional[bytes]:
    if cert is None:
        return None
    cert_path = Path(path).parent / cert
    try:
        ca = (read_file or _read_ca)(cert_path)
    except OSError as exc:
        raise _bad(path, f"[ca] cert {cert_path}: {exc.strerror}", "point cert at a PEM file, relative to the site file") from None
    return _certificates(path, cert_path, ca)


# A PEM certificate block (RFC 7468's strict form: the BEGIN line, lines of base64, the END line), one per match.
_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----[ \t]*\r?\n((?:[A-Za-z0-9+/=]+[ \t]*\r?\n)+)"
                       rb"-----END CERTIFICATE-----[ \t]*(?:\r?\n|\Z)")
_CA_ONLY = ("give a file of the CA certificate(s) alone: sed -n '/-----BEGIN CERTIFICATE-----/,/-----END CERTIFICATE-----/p' FILE "
            "> ca.crt, and point cert at that file")


def _certificates(path: str, cert_path: Path, ca: bytes) -> bytes:
    """The [ca] file's BEGIN/END CERTIFICATE blocks, each ending in a newline: all that goes to the context's ca.crt
    and the image's trust store. A file that holds anything else (a private key of any kind, PGP or PuTTY blocks,
    key = value lines, text between the blocks) is refused naming the file: it is not a CA certificate, and what it
    holds besides would land in the image."""
    blocks, rest, at = [], [], 0
    for m in _PEM_CERT.finditer(ca):
        rest.append(ca[at:m.start()])
        blocks.append(b"-----BEGIN CERTIFICATE-----\n" + b"".join(line.strip() + b"\n" for line in m.group(1).splitlines())
                      + b"-----END CERTIFICATE-----\n")
        at = m.end()
    rest.append(ca[at:])
    other = b"".join(rest)
    if not blocks:
        raise _bad(path, f"[ca] cert {cert_path} is not a PEM certificate (no complete BEGIN/END CERTIFICATE block)",
                   "give the PEM (BEGIN CERTIFICATE) form: openssl x509 -inform der -in FILE -out ca.crt")
    if other.strip():
        key = re.search(rb"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY[A-Z ]*)-----|PuTTY-User-Key-File|-----BEGIN SSH2 ENCRYPTED", other)
        what = ("a private key" if key else
                "something besides its certificates (another PEM block, key = value lines or other text)")
        raise _bad(path, f"[ca] cert {cert_path} holds {what}: a [ca] file holds CA certificates only, since it goes into the "
                   "build context and the image's trust store", _CA_ONLY)
    return b"".join(blocks)


def parse(text: str, path: str, read_file: Optional[Callable[[Path], bytes]] = None) -> Site:
    raw = parse_toml(text, "site file", path)
    _check_no_secrets(path, raw)
    _check_tables(path, raw)
    t = _read_tables(path, raw, read_file)
    apt, pip, dtk = t["apt"], t["pip"], t["dtk"]
    return Site(
        path=path,
        apt_mirror=apt["mirror"],
        apt_security=apt["security"],
        remove_vendor_lists=apt["remove_vendor_lists"],
        pip_index=pip["index_url"],
        trusted_hosts=pip["trusted_hosts"],
        extra_index_urls=pip["extra_index_urls"],
        rewrites=tuple((upstream.rstrip("/"), mirror) for upstream, mirror in t["rewrite"]),
        proxy=tuple(raw.get("proxy", {}).items()),
        ca_cert=t["ca"]["cert"],
        registry_prefix=t["registry"]["prefix"],
        images=t["images"],
        dtk_devel=dtk["devel_image"],
        dtk_runtime=dtk["runtime_image"] or dtk["devel_image"],
        dtk_os=dtk["os"],
        cuda_toolkit=t["cuda"]["toolkit"],
        pip_netrc=pip["netrc"],
        apt_netrc=apt["netrc"],
    )


def load(path: str) -> Site:
    return parse(read_text(path, "site file", "give the path of a SITE.toml"), path)


def secret_arg(spec: str) -> tuple[str, str]:
    """`--secret ID=FILE`, or docker's `id=ID,src=FILE` (also `source=`, `type=file`): (id, file as given).
    Only the file's place is read here; what it holds is never read, printed or logged."""
    fix = f"write --secret ID=FILE (e.g. --secret {PIP_NETRC.id}=~/.netrc) or --secret id=ID,src=FILE"
    if re.match(r"(id|src|source|type)=", spec):  # docker's form
        parts = [part.partition("=") for part in spec.split(",")]
        fields = {key: value for key, _, value in parts}
        if any(not eq for _, eq, _ in parts) or len(fields) != len(parts) or not set(fields) <= {"id", "src", "source", "type"} \
                or fields.get("type", "file") != "file":
            raise InputError("a --secret in docker's form takes only id=, src= (or source=) and type=file, each once", fix)
        ident, src = fields.get("id", ""), fields.get("src") or fields.get("source") or ""
    else:
        ident, _, src = spec.partition("=")
    if not _SECRET_ID.fullmatch(ident) or not src:
        raise InputError("a --secret names no id and file (the value is not echoed: it might be the secret itself)", fix)
    return ident, src


def known_secret(ident: str) -> Optional[BuildSecret]:
    """The build secret a site file can ask for, by its id (None: no site setting asks for that id)."""
    return next((secret for secret in (PIP_NETRC, APT_NETRC) if secret.id == ident), None)
