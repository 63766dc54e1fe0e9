"""Authenticated mirrors without credentials in layers (issue 14): the site file says that a mirror asks for a
login (`[pip] netrc = true`, `[apt] netrc = true`), `envkit build --secret ID=FILE` gives the file, the pip and
apt steps mount it (`RUN --mount=type=secret,...`), and only an engine that can pass secrets builds: Podman
through its CLI, Docker through buildx; Docker's legacy builder is refused in one line before anything is built.
The real build, and that the password is in no layer, is tests/integration/test_secret_builds.py."""
from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from envkit.adapters.engine import build_with_secrets, is_podman, secrets_build_command, secrets_builder
from envkit.adapters.image_build import check_build_secrets, stream_build
from envkit.app import build as build_app
from envkit.app.generate import generate
from envkit.config.site_file import parse, secret_arg
from envkit.core.render import secret_ids
from envkit.errors import InputError, PreflightError
from envkit.model.flags import ResolveFlags
from envkit.model.plan import Options
from envkit.model.site import APT_NETRC, PIP_NETRC

PASSWORD = "pw-9f3e1c-NEVER-IN-A-LAYER"
NETRC = f"machine 10.0.0.5 login robot password {PASSWORD}\n"
CPU = ResolveFlags(platform="cpu", torch="2.13.0")
SITE = '[apt]\nmirror = "http://10.0.0.5/debian"\n{apt}[pip]\nindex_url = "http://10.0.0.5/simple"\n{pip}' \
       '[rewrite]\n"https://download.pytorch.org/whl" = "http://10.0.0.5/torch"\n'
# what `docker info` / Podman's compatible `info` answer (the keys that matter here)
DOCKER_20_10 = {"ServerVersion": "20.10.24+dfsg1", "OperatingSystem": "Debian GNU/Linux 12 (bookworm)", "Driver": "overlay2"}
PODMAN_4_3 = {"ServerVersion": "4.3.1", "OperatingSystem": "debian", "Driver": "overlay", "BuildahVersion": "1.28.2"}
LEGACY_LINE = ("this engine (Docker 20.10.24+dfsg1, legacy builder) cannot pass build secrets (fix: install docker buildx, use podman "
               "(podman system service --time=0 unix:///run/podman.sock, then DOCKER_HOST=unix:///run/podman.sock), or build --offline "
               "from a bundle made where the mirror's credentials are (envkit bundle --mirror SITE.toml uses your netrc on that machine only))")


def _site_file(tmp_path: Path, pip: bool = True, apt: bool = False) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "SITE.toml"
    path.write_text(SITE.format(pip="netrc = true\n" if pip else "", apt="netrc = true\n" if apt else ""))
    return str(path)


def _context(tmp_path: Path, pip: bool = True, apt: bool = False) -> Path:
    g = generate(CPU, mirror=_site_file(tmp_path, pip, apt), out=str(tmp_path / "ctx"))
    return Path(g.out or "")


def _netrc(tmp_path: Path) -> Path:
    f = tmp_path / "netrc"
    f.write_text(NETRC)
    return f


# ---------------------------------------------------------------- the site file names where a login comes from, never the login


@pytest.mark.parametrize("pip, apt, ids", [(True, False, ("netrc",)), (False, True, ("apt-netrc",)), (True, True, ("netrc", "apt-netrc")),
                                           (False, False, ())])
def test_netrc_true_asks_for_the_build_secret_of_its_mirror(pip, apt, ids, tmp_path):
    site = parse(SITE.format(pip="netrc = true\n" if pip else "", apt="netrc = true\n" if apt else ""), "SITE.toml")
    assert (site.pip_netrc, site.apt_netrc) == (pip, apt)
    assert tuple(s.id for s in site.secrets()) == ids


@pytest.mark.parametrize("value", ['"~/.netrc"', f'"{PASSWORD}"', "1", '{login = "robot"}'])
def test_netrc_is_true_or_false_and_never_the_file_or_the_login(value):
    with pytest.raises(InputError) as e:
        parse(f"[pip]\nnetrc = {value}\n", "SITE.toml")
    line = e.value.one_line()
    assert "[pip] netrc must be true or false" in line and "--secret" in line and PASSWORD not in line and "\n" not in line


@pytest.mark.parametrize("text, way", [
    ('[pip]\nindex_url = "http://robot:{pw}@10.0.0.5/simple"\n', "--secret netrc=FILE"),
    ('[pip]\nextra_index_urls = ["http://10.0.0.5/whl?token={pw}"]\n', "--secret netrc=FILE"),
    ('[rewrite]\n"https://download.pytorch.org/whl" = "http://robot:{pw}@10.0.0.5/torch"\n', "--secret netrc=FILE"),
    ('[apt]\nmirror = "http://robot:{pw}@10.0.0.5/debian"\n', "--secret apt-netrc=FILE"),
    ('[apt]\nsecurity = "http://10.0.0.5/debian-security?token={pw}"\n', "--secret apt-netrc=FILE"),
    ('[pip]\npassword = "{pw}"\n', "--secret netrc=FILE"),
    ('[apt]\nauth_token = "{pw}"\n', "--secret apt-netrc=FILE"),
    ('[registry]\nprefix = "robot:{pw}@registry.corp:5000"\n', "docker login or podman login"),
    ('[proxy]\nhttp = "http://robot:{pw}@proxy.corp:3128"\n', "without a login"),
])
def test_a_credential_is_refused_with_the_way_to_pass_it_as_a_build_secret(text, way):
    """Issue 14: "a credential is refused with the way to pass it as a build secret, never written" (fuzz report,
    security findings 1-2): one line, exit 2, the way named, the secret not echoed."""
    with pytest.raises(InputError) as e:
        parse(text.format(pw=PASSWORD), "SITE.toml")
    line = e.value.one_line()
    assert way in line and PASSWORD not in line and "\n" not in line and e.value.exit_code == 2
    if "secret" in way:
        assert "netrc = true" in line and "docs/guide/sites.md" in line


# ---------------------------------------------------------------- the generated Dockerfile mounts, and only where a mirror is reached


def test_pip_and_apt_steps_mount_their_secrets_and_nothing_else_changes(tmp_path):
    plain = generate(CPU, mirror=_site_file(tmp_path, pip=False))
    secret = generate(CPU, mirror=_site_file(tmp_path, pip=True, apt=True))  # the same path: the header names it
    before, after = plain.files["Dockerfile"].decode(), secret.files["Dockerfile"].decode()
    runs = [line for line in after.splitlines() if line.startswith("RUN ")]
    pip_runs = [r for r in runs if " pip install " in r]
    apt_runs = [r for r in runs if "apt-get update" in r]
    assert pip_runs and apt_runs
    assert all(r.startswith(f"RUN --mount=type=secret,id=netrc,target={PIP_NETRC.target} pip install ") for r in pip_runs)
    assert all(r.startswith(f"RUN --mount=type=secret,id=apt-netrc,target={APT_NETRC.target} apt-get update") for r in apt_runs)
    assert re.sub(r"--mount=type=secret,\S+ ", "", after) == before  # the mounts are the only difference
    assert secret_ids(after) == ("apt-netrc", "netrc") and secret_ids(before) == ()
    assert {k: v for k, v in secret.files.items() if k not in ("Dockerfile", "envkit.plan.json")} == \
        {k: v for k, v in plain.files.items() if k not in ("Dockerfile", "envkit.plan.json")}  # pip.conf, site.env: no login
    warnings = [w for w in secret.plan.warnings if "--secret" in w]
    assert len(warnings) == 2 and any("--secret netrc=FILE" in w for w in warnings)


def test_an_offline_context_mounts_nothing_the_bundle_carries_every_wheel(tmp_path):
    g = generate(CPU, mirror=_site_file(tmp_path, pip=True, apt=True), opts=Options(offline=True))
    assert secret_ids(g.files["Dockerfile"].decode()) == ()
    assert not [w for w in g.plan.warnings if "--secret" in w]


# ---------------------------------------------------------------- --secret on the command line


@pytest.mark.parametrize("spec, parsed", [
    ("netrc=~/.netrc", ("netrc", "~/.netrc")),
    ("id=netrc,src=/home/u/.netrc", ("netrc", "/home/u/.netrc")),
    ("id=apt-netrc,source=/etc/apt/auth.conf", ("apt-netrc", "/etc/apt/auth.conf")),
    ("type=file,id=netrc,src=f", ("netrc", "f")),
    ("netrc=a=b", ("netrc", "a=b")),
])
def test_secret_specs_in_envkits_and_dockers_forms(spec, parsed):
    assert secret_arg(spec) == parsed


@pytest.mark.parametrize("spec", [PASSWORD, "netrc=", "=x", "id=netrc", "id=netrc,src=f,id=x", "id=netrc,env=PW",
                                  "type=env,id=netrc,src=f", f"id=netrc,{PASSWORD}", "bad id!=f"])
def test_a_malformed_secret_spec_is_refused_without_echoing_it(spec):
    with pytest.raises(InputError) as e:
        secret_arg(spec)
    assert PASSWORD not in e.value.one_line() and "--secret ID=FILE" in e.value.fix and e.value.exit_code == 2


# ---------------------------------------------------------------- which engine can pass secrets, from its info as plain data


@pytest.mark.parametrize("info, tools, builder", [
    (PODMAN_4_3, {"podman"}, "podman"),
    (PODMAN_4_3, {"podman", "buildx"}, "podman"),  # Podman's own CLI reaches Podman's storage
    (DOCKER_20_10, {"buildx"}, "buildx"),
    (DOCKER_20_10, {"buildx", "podman"}, "buildx"),  # podman's CLI would build into another engine
])
def test_the_builder_that_can_pass_secrets(info, tools, builder):
    assert secrets_builder(info, tools) == builder
    assert is_podman(info) == (builder == "podman")


@pytest.mark.parametrize("tools", [set(), {"podman"}])
def test_dockers_legacy_builder_is_refused_in_one_line_naming_the_alternatives(tools):
    with pytest.raises(PreflightError) as e:
        secrets_builder(DOCKER_20_10, tools)
    assert e.value.one_line() == LEGACY_LINE and e.value.exit_code == 5


def test_podman_without_its_cli_is_refused_naming_it():
    with pytest.raises(PreflightError, match="podman CLI, which is not on PATH"):
        secrets_builder(PODMAN_4_3, set())


def test_the_cli_builds_name_each_secrets_file_never_its_content(tmp_path):
    secrets = (("netrc", "/home/u/.netrc"), ("apt-netrc", "/home/u/apt.conf"))
    common = dict(network="host", buildargs={"http_proxy": "http://proxy.corp:3128"}, nocache=True, dockerfile="Dockerfile",
                  secrets=secrets, iidfile=tmp_path / "iid", docker_host="unix:///tmp/podman.sock")
    podman = secrets_build_command("podman", tmp_path, **common)  # type: ignore[arg-type]
    assert podman[:7] == ["podman", "--remote", "--url", "unix:///tmp/podman.sock", "build", "--format", "docker"]
    assert podman[-1] == str(tmp_path)
    for cmd in (podman, secrets_build_command("buildx", tmp_path, **common)):  # type: ignore[arg-type]
        text = " ".join(cmd)
        assert "--secret id=netrc,src=/home/u/.netrc --secret id=apt-netrc,src=/home/u/apt.conf" in text
        assert "--network host" in text and "--no-cache" in text and "--build-arg=http_proxy=http://proxy.corp:3128" in text
        assert f"--iidfile {tmp_path / 'iid'}" in text
    buildx = secrets_build_command("buildx", tmp_path, **{**common, "network": "bridge", "nocache": False})  # type: ignore[arg-type]
    assert buildx[:6] == ["docker", "buildx", "build", "--progress", "plain", "--load"]
    assert "--network" not in buildx and "--no-cache" not in buildx  # bridge is BuildKit's default network


def _fake_cli(tmp_path: Path, name: str, body: str) -> None:
    """A stand-in `podman` on PATH: prints what a build prints and writes the image id where --iidfile says."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / name
    script.write_text(f"#!{sys.executable}\nimport sys\nargs = sys.argv[1:]\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_a_cli_build_streams_as_the_sdks_build_does(tmp_path, monkeypatch):
    _fake_cli(tmp_path, "podman", "print('[1/2] STEP 1/3: FROM docker.io/library/debian:bookworm-slim AS build')\n"
                                  "print('[1/2] STEP 2/3: RUN --mount=type=secret,id=netrc,target=/root/.netrc pip install x')\n"
                                  "print('[2/2] STEP 1/2: FROM docker.io/library/debian:bookworm-slim AS runtime')\n"
                                  "open(args[args.index('--iidfile') + 1], 'w').write('sha256:' + '1' * 64)\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    engine = _InfoEngine(PODMAN_4_3, cli=True)
    lines: list[str] = []
    res = stream_build(engine, tmp_path, "host", {}, lines.append, secrets=(("netrc", "/x/netrc"),))
    assert res.image_id == "sha256:" + "1" * 64 and [name for name, _ in res.stages] == ["build", "runtime"] and res.steps == 3
    assert engine.asked == [(("netrc", "/x/netrc"),)]


def test_a_failed_cli_build_is_one_error_naming_its_first_line(tmp_path, monkeypatch):
    _fake_cli(tmp_path, "podman", "print('STEP 1/2: FROM x')\nprint('Error: building at STEP \"RUN pip install x\": exit status 1')\n"
                                  "sys.exit(125)\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    msgs = list(build_with_secrets("podman", tmp_path, network="bridge", buildargs={}, nocache=False, dockerfile="Dockerfile",
                                   secrets=(("netrc", "/x"),)))
    assert msgs[-1] == {"error": 'Error: building at STEP "RUN pip install x": exit status 1'}
    assert not any("aux" in m for m in msgs)


# ---------------------------------------------------------------- checked before anything is built


class _InfoEngine:
    """An engine of plain data: its info, and whether anything was built or loaded."""

    def __init__(self, info: dict[str, Any], cli: bool = False) -> None:
        self._info, self.cli = info, cli
        self.asked: list[Any] = []

    def info(self) -> dict[str, Any]:
        return self._info

    def build(self, context: Path, *, network: str, buildargs: dict[str, str], nocache: bool = False,
              dockerfile: str = "Dockerfile", secrets: Any = ()) -> Any:
        if not self.cli:
            raise AssertionError("nothing may be built")
        self.asked.append(secrets)
        return build_with_secrets(secrets_builder(self._info, {"podman"}), context, network=network, buildargs=buildargs,
                                  nocache=nocache, dockerfile=dockerfile, secrets=secrets)

    def load(self, path: Path) -> Any:
        raise AssertionError("nothing may be loaded")


@pytest.fixture()
def podman_cli(monkeypatch):
    monkeypatch.setattr("envkit.adapters.image_build.available_tools", lambda: frozenset({"podman"}))


def test_the_checked_secrets_are_absolute_files_for_each_mount(tmp_path, podman_cli, monkeypatch):
    ctx = _context(tmp_path, pip=True, apt=True)
    netrc, apt = _netrc(tmp_path), tmp_path / "apt.conf"
    apt.write_text(f"machine http://10.0.0.5 login robot password {PASSWORD}\n")
    monkeypatch.chdir(tmp_path)
    got = check_build_secrets(_InfoEngine(PODMAN_4_3), ctx, ("netrc=netrc", f"id=apt-netrc,src={apt}"))
    assert got == (("apt-netrc", str(apt)), ("netrc", str(netrc)))
    plain = _context(tmp_path / "plain", pip=False)
    assert check_build_secrets(_InfoEngine(DOCKER_20_10), plain, ()) == ()  # no mount, no --secret: the engine is not even asked


@pytest.mark.parametrize("specs, error, needle", [
    ((), InputError, "the build mounts the secret `netrc` ([pip] netrc = true in the site file) and no --secret gives it"),
    (("netrc=NETRC", "apt-netrc=NETRC"), InputError, "--secret apt-netrc: no step of"),
    (("netrc=NETRC", "netrc=NETRC"), InputError, "--secret netrc is given twice"),
    (("netrc=/nonexistent/netrc",), InputError, "--secret netrc: /nonexistent/netrc is not a readable file"),
    (("netrc=EMPTY",), InputError, "is empty"),
    (("netrc=INSIDE",), InputError, "lies inside the build context"),
])
def test_secrets_that_do_not_match_the_mounts_are_refused_before_anything_is_built(specs, error, needle, tmp_path, podman_cli):
    ctx = _context(tmp_path)
    files = {"NETRC": str(_netrc(tmp_path)), "EMPTY": str(tmp_path / "empty"), "INSIDE": str(ctx / "netrc")}
    (tmp_path / "empty").write_text("")
    (ctx / "netrc").write_text(NETRC)
    specs = tuple(re.sub(r"NETRC|EMPTY|INSIDE", lambda m: files[m.group(0)], s) for s in specs)
    with pytest.raises(error) as e:
        check_build_secrets(_InfoEngine(PODMAN_4_3), ctx, specs)
    assert needle in e.value.one_line() and PASSWORD not in e.value.one_line()


def test_dockers_legacy_engine_is_refused_before_the_build_even_with_the_secret_given(tmp_path, monkeypatch):
    monkeypatch.setattr("envkit.adapters.image_build.available_tools", lambda: frozenset())
    with pytest.raises(PreflightError) as e:
        check_build_secrets(_InfoEngine(DOCKER_20_10), _context(tmp_path), (f"netrc={_netrc(tmp_path)}",))
    assert e.value.one_line() == LEGACY_LINE


def test_build_context_refuses_the_legacy_engine_before_loading_or_building(tmp_path, monkeypatch):
    """The use case: the preflight passes, then the one line; nothing loaded, nothing built (the engine's build and
    load raise if called)."""
    ctx = _context(tmp_path)
    monkeypatch.setattr("envkit.adapters.image_build.available_tools", lambda: frozenset())
    monkeypatch.setattr(build_app.Engine, "connect", classmethod(lambda cls: _InfoEngine(DOCKER_20_10)))
    with pytest.raises(PreflightError) as e:
        build_app.build_context(ctx, offline=False, tag=None, network="bridge", no_cache=False, dry_run=False,
                                secrets=(f"netrc={_netrc(tmp_path)}",))
    assert e.value.one_line() == LEGACY_LINE
    with pytest.raises(PreflightError):  # a dry run says so too
        build_app.build_context(ctx, offline=False, tag=None, network="bridge", no_cache=False, dry_run=True, secrets=())


def test_an_offline_build_takes_no_secret(tmp_path):
    (tmp_path / "b").mkdir()
    with pytest.raises(InputError, match="--offline builds reach no mirror, so they take no --secret"):
        build_app.build(build_app.BuildRequest(offline=True, bundle_dir=str(tmp_path / "b"), secrets=("netrc=/x",)))



def test_build_all_refuses_secrets_it_would_not_pass(tmp_path):
    with pytest.raises(InputError, match="--all does not pass --secret to its targets"):
        build_app.load_project(str(tmp_path / "envkit.toml"), None, True, build_app.BuildRequest(secrets=("netrc=/x",)))


def test_the_command_line_carries_secret_to_the_build_and_prints_the_refusal_in_one_line(tmp_path, monkeypatch, capsys):
    """`envkit build --mirror ... --secret netrc=FILE` on a Docker 20.10 engine (its info as plain data): exit 5, the
    one line on stderr, the file's content nowhere."""
    from envkit.cli.main import main

    monkeypatch.setattr("envkit.adapters.image_build.available_tools", lambda: frozenset())
    monkeypatch.setattr(build_app.Engine, "connect", classmethod(lambda cls: _InfoEngine(DOCKER_20_10)))
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit) as e:
        main(["build", "--mirror", _site_file(tmp_path), "--platform", "cpu", "--torch", "2.13.0", "-o", str(tmp_path / "ctx"),
              "--secret", f"netrc={_netrc(tmp_path)}"])
    out = capsys.readouterr()
    assert e.value.code == 5
    assert f"envkit: error: {LEGACY_LINE}" in out.err.splitlines()
    assert PASSWORD not in out.out + out.err
