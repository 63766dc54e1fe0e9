"""Issue 26, "no secret in any output, nothing half-written", for user files, locks and CI exports: the
reproducers of the third fuzzing campaign (D6, D9, D10, D13, D15, D16 and the `[defaults] registry` grammar),
each through the CLI where it was found. Every refusal is one line and exit 2 (a matrix, 3), echoes no secret,
and leaves nothing written: no CI file, no context, no ca.crt."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import fuzzing
import pytest
import tomllib
import yaml
from ruamel.yaml import YAML
from schema_check import errors

from envkit.config import matrix_file, project_file, site_file
from envkit.core import export as export_core
from envkit.core import k8s as k8s_core
from envkit.core.wheels import step_requirements
from envkit.errors import InputError, MatrixError
from envkit.model.lock import Lock, LockedWheel
from envkit.model.project import EnvkitRequirement

ROOT = Path(__file__).resolve().parent.parent
MATRIX = (ROOT / "matrix.toml").read_text(encoding="utf-8")
SECRET = "glpat-S3CR3TT0KEN"
CPU = '[[target]]\nname = "cpu"\nplatform = "cpu"\ntorch = "2.13.0"\noffline = true\n'
CERT = (b"-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\nTEST+/=\n-----END CERTIFICATE-----\n")
SITE = ('[apt]\nmirror = "http://10.10.1.10/debian"\n[pip]\nindex_url = "http://10.10.1.10/simple"\n[rewrite]\n'
        '"https://download.pytorch.org/whl" = "http://10.10.1.10/whl"\n[ca]\ncert = "ca.pem"\n')
YAML12 = YAML(typ="safe", pure=True)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ENVKIT_NO_CACHE", "1")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/envkit.sock")  # nothing here may need an engine


def refused(argv: list[str], code: int = 2, *secrets: str) -> str:
    """The run's one error line: exit `code`, one `envkit: error:` line, no traceback, no secret anywhere in its output."""
    ran = fuzzing.run(argv, "hardening: user files")
    fuzzing.holds(ran)
    assert ran.code == code, (ran.code, ran.err)
    lines = [line for line in ran.err.splitlines() if line.startswith("envkit: error: ")]
    assert len(lines) == 1, ran.err
    for s in (SECRET, *secrets):
        assert s not in ran.out + ran.err, ran.err
    return lines[0]


def project(tmp_path: Path, text: str) -> str:
    path = tmp_path / "envkit.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------- D6: [ci] envkit's VCS URL carries no token

@pytest.mark.parametrize("url, what", [
    (f"git+https://git.example/envkit.git@v0.1.0?private_token={SECRET}", "a query string"),
    (f"git+https://git.example/envkit.git@v0.1.0#token={SECRET}", "a fragment"),
    (f"git+https://git.example/envkit.git@v0.1.0?x=1#{SECRET}", "a query string"),
    (f"git+ssh://git@git.example/envkit.git@v0.1.0?{SECRET}", "a query string"),
    (f"git+https://git.example/envkit.git?private_token={SECRET}", "a query string"),  # no ref either: the token first
])
@pytest.mark.parametrize("fmt", ["github", "gitlab"])
def test_a_vcs_url_with_a_query_string_or_fragment_is_refused_and_no_ci_file_is_written(url, what, fmt, tmp_path):
    out = tmp_path / "ci.yml"
    line = refused(["matrix", "export", "--format", fmt, "--project",
                    project(tmp_path, CPU + f'[ci]\nenvkit = "envkit-gpu @ {url}"\n'), "-o", str(out)])
    assert f"[ci] envkit the git URL of host git.example has {what}" in line and "carry tokens" in line
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "envkit.toml"]


def test_other_ci_envkit_refusals_do_not_echo_a_token_either():
    for value in (f"envkit-gpu @ git+https://git.example/envkit.git@main?private_token={SECRET}",
                  f"envkit @ git+https://git.example/e.git@v1?private_token={SECRET}",
                  f"envkit-gpu>=1 ; python_version > '3' and 'private_token={SECRET}' == 'x'"):
        with pytest.raises(InputError) as e:
            project_file.parse(CPU + "[ci]\nenvkit = " + json.dumps(value) + "\n", "envkit.toml")
        assert SECRET not in e.value.one_line() and e.value.exit_code == 2


def test_a_vcs_url_at_a_tag_without_query_or_fragment_still_passes():
    p = project_file.parse(CPU + '[ci]\nenvkit = "envkit-gpu @ git+https://git.example/envkit.git@v0.1.0"\n', "envkit.toml")
    assert p.ci.envkit == EnvkitRequirement("vcs", "envkit-gpu @ git+https://git.example/envkit.git@v0.1.0")


# ---------------------------------------------------------------- D9: [ca] cert holds certificates only

PGP = b"-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGXsecret\n-----END PGP PRIVATE KEY BLOCK-----\n"
PUTTY = b"PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPrivate-Lines: 1\nAAAAIHsecret\n"


@pytest.mark.parametrize("extra, what", [
    (PGP, "a private key"),
    (b"aws_secret_access_key = wJalrXUtnFEMISECRET\n", "something besides its certificates"),
    (PUTTY, "a private key"),
    (b"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIsecret\n-----END EC PRIVATE KEY-----\n", "a private key"),
    (b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFsecret\n-----END ENCRYPTED PRIVATE KEY-----\n", "a private key"),
    (b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaCsecret\n-----END OPENSSH PRIVATE KEY-----\n", "a private key"),
    (b"-----BEGIN PRIVATE KEY-----\nMIIEsecret\n-----END PRIVATE KEY-----\n", "a private key"),
    (b"-----BEGIN DSA PARAMETERS-----\nMIIBsecret\n-----END DSA PARAMETERS-----\n", "something besides its certificates"),
    (b"# password: hunter2secret\n", "something besides its certificates"),
])
def test_a_ca_file_holding_anything_but_certificates_is_refused_and_no_context_is_written(extra, what, tmp_path):
    (tmp_path / "ca.pem").write_bytes(CERT + extra)
    (tmp_path / "site.toml").write_text(SITE)
    out = tmp_path / "ctx"
    line = refused(["generate", "--platform", "cpu", "--torch", "2.13.0", "--mirror", str(tmp_path / "site.toml"), "-o", str(out)],
                   2, "secret", "SECRET", "hunter2")
    assert f"[ca] cert {tmp_path / 'ca.pem'} holds {what}" in line and "BEGIN CERTIFICATE" in line  # the file and the fix
    assert not out.exists()


@pytest.mark.parametrize("data", [b"", b"\x30\x82\x01", CERT.replace(b"-----END CERTIFICATE-----\n", b""),
                                  b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
                                  CERT.replace(b"TEST+/=", b"TEST secret")])
def test_a_ca_file_without_a_whole_certificate_block_is_refused(data, tmp_path):
    (tmp_path / "ca.pem").write_bytes(data)
    with pytest.raises(InputError) as e:
        site_file.parse('[ca]\ncert = "ca.pem"\n', str(tmp_path / "SITE.toml"))
    assert e.value.exit_code == 2 and "\n" not in e.value.one_line() and "secret" not in e.value.one_line()


def test_only_the_certificate_blocks_are_written_and_a_clean_file_is_written_as_it_is(tmp_path):
    golden = (ROOT / "tests" / "golden" / "sites" / "corp-root-ca.crt").read_bytes()
    assert site_file.parse('[ca]\ncert = "ca"\n', "SITE.toml", read_file=lambda p: golden).ca_cert == golden
    two = CERT + b"\n" + CERT.replace(b"\n", b"\r\n")  # a blank line between, CRLF line ends: the blocks as LF
    assert site_file.parse('[ca]\ncert = "ca"\n', "SITE.toml", read_file=lambda p: two).ca_cert == CERT + CERT


def test_a_ca_path_with_a_control_character_is_refused_in_one_line():
    with pytest.raises(InputError) as e:
        site_file.parse('[ca]\ncert = "ca\\n.pem"\n', "SITE.toml", read_file=lambda p: CERT)
    assert "[ca] cert must be the path of a PEM file on one line" in e.value.one_line() and "\n" not in e.value.one_line()


# ---------------------------------------------------------------- D10: a lock's wheels, checked for their grammar

WHEEL = {"name": "torch", "version": "2.13.0+cpu", "filename": "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl",
         "sha256": "0" * 64, "step": "build-torch", "index": None, "url": None}


def tampered(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    base = tmp_path / "base"
    ran = fuzzing.run(["generate", "--platform", "cpu", "--torch", "2.13.0", "-o", str(base)], "hardening: user files")
    assert ran.code == 0, ran.err
    doc = json.loads((base / "envkit.lock.json").read_text())
    doc.update(schema=2, wheels=[dict(WHEEL)],
               images=[{"ref": "docker.io/library/debian:bookworm-slim", "id": "sha256:" + "b" * 64, "digest": None}])
    edit(doc)
    path = tmp_path / "tampered.lock.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _wheel(**changes: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["wheels"][0].update(changes)


@pytest.mark.parametrize("edit, why", [
    (_wheel(version="2.13.0+cpu\r--extra-index-url http://u:T0KEN@10.0.0.9/simple"),
     "wheels[0].version holds the control or line-break character U+000D"),
    (_wheel(version="1.0 --index-url=http://u:T0KEN@10.0.0.9/simple"), "is not a PEP 440 version"),
    (_wheel(version="2.13.0+cpu\u2028--pre"), "U+2028"),
    (_wheel(version="2.13.0+cpu\u0085--pre"), "U+0085"),
    (_wheel(name="torch\u2029--pre"), "U+2029"),
    (_wheel(name="torch --pre"), "is not a project name"),
    (_wheel(name="-torch"), "is not a project name"),
    (_wheel(version="latest"), "is not a PEP 440 version"),
    (_wheel(version="2.14.0"), "the file is not torch 2.14.0's"),
    (_wheel(name="vllm"), "the file is not vllm 2.13.0+cpu's"),
    (_wheel(filename="torch-2.13.0+cpu.tar.gz"), "not a wheel file name"),
    (_wheel(filename="torch-2.13.0+cpu-cp311.whl"), "not a wheel file name"),
    (_wheel(filename="torch-2.13.0+cpu-cp311-cp311-linux_x86_64 --pre.whl"), "not a wheel file name"),
    (_wheel(sha256="0" * 63 + "G"), "sha256 is not 64 hex digits"),
    (_wheel(step="build torch"), "is not a step of a plan"),
    (_wheel(url="https://u:T0KEN@10.0.0.9/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"), "url carries a login"),
    (_wheel(url="https://10.0.0.9/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl?X-Amz-Signature=T0KEN"), "url has a query string"),
    (_wheel(url="https://10.0.0.9/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl#T0KEN"), "url has a fragment"),
    (_wheel(url="https://10.0.0.9/other-1.0-py3-none-any.whl"), "url names another file"),
    (_wheel(url="ftp://10.0.0.9/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"), "url is not an http(s):// URL"),
    (_wheel(index="https://u:T0KEN@10.0.0.9/simple"), "index carries a login"),
    (_wheel(index="https://10.0.0.9/simple?private_token=T0KEN"), "index has a query string"),
    (_wheel(index="https://10.0.0.9/simple --trusted-host x"), "index is not an http(s):// URL"),
    (lambda doc: doc.update(images=[]), "schema 2 that pins no base image"),
    (lambda doc: doc["images"][0].update(ref="robot:T0KEN@registry.corp/debian:12"), "not an image reference without a scheme or a login"),
    (lambda doc: doc["images"][0].update(digest="registry.corp/debian:latest"), "digest is not NAME@sha256"),
    (lambda doc: doc.update(envkit="0.1.0\x1b]0;owned\x07"), "envkit holds the control or line-break character U+001B"),
    (lambda doc: doc["generate"].update(site="site\n.toml"), "generate.site holds the control or line-break character U+000A"),
])
def test_a_tampered_lock_is_refused_in_one_line_with_nothing_written_and_no_token_shown(edit, why, tmp_path):
    lock = tampered(tmp_path, edit)
    out = tmp_path / "ctx"
    line = refused(["generate", "--lock", str(lock), "-o", str(out)], 2, "T0KEN", "owned")
    assert f"lock file {lock} is not an envkit lock this envkit reads" in line and why in line, line
    assert not out.exists()


def test_an_untampered_lock_replays_and_its_requirements_are_built_from_checked_values(tmp_path):
    lock = tampered(tmp_path, lambda doc: None)
    out = tmp_path / "ctx"
    ran = fuzzing.run(["generate", "--lock", str(lock), "-o", str(out)], "hardening: user files")
    assert ran.code == 0, ran.err
    assert (out / "envkit" / "requirements" / "build-torch.txt").read_text().splitlines()[1:] == [
        f"torch==2.13.0+cpu --hash=sha256:{'0' * 64}"]
    assert Lock.from_json(json.loads((out / "envkit.lock.json").read_text())).wheels[0].to_json() == WHEEL


@pytest.mark.parametrize("changes", [dict(version="1.0\r--pre"), dict(version="1.0 --pre"), dict(name="torch;--pre"),
                                     dict(filename="../torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"), dict(sha256="x"),
                                     dict(url="https://u:p@h/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl")])
def test_step_requirements_refuses_a_wheel_made_in_code_with_a_bad_value(changes):
    """A LockedWheel need not come from a lock file: the requirements writer checks each value itself."""
    w = LockedWheel(**{**WHEEL, **changes})
    with pytest.raises(InputError) as e:
        step_requirements("build-torch", [w], ("torch==2.13.0+cpu",), offline=True)
    assert e.value.exit_code == 2 and "\n" not in e.value.one_line()


def test_step_requirements_refuses_a_bad_step_id_or_a_bad_path_of_the_plan():
    with pytest.raises(InputError, match="not a step id"):
        step_requirements("build-torch\n--pre", [LockedWheel(**WHEEL)], (), offline=True)
    with pytest.raises(InputError, match="neither an absolute path nor an http"):
        step_requirements("build-torch", [LockedWheel(**WHEEL)], (f"x --pre /{WHEEL['filename']}",), offline=False)
    with pytest.raises(InputError, match="has a query string"):
        step_requirements("build-torch", [LockedWheel(**WHEEL)], (f"https://h/{WHEEL['filename']}?t=1",), offline=False)
    url = f"https://h/{WHEEL['filename']}#sha256={'0' * 64}"  # PEP 503's own fragment is not a token
    assert step_requirements("build-torch", [LockedWheel(**WHEEL)], (url,), offline=False).splitlines()[1].startswith(url + " ")


# ---------------------------------------------------------------- D13: YAML that reads back the same in YAML 1.1 and 1.2

PLAIN_LOOKING = ["1e3", "1.5e3", "1E3", "0o17", "0x1f", "0x1F", ".inf", "-.inf", ".nan", ".NaN", "null", "Null", "~", "",
                 "true", "True", "FALSE", "yes", "No", "on", "OFF", "y", "N", "1_000", "1:20", "2001-12-14", "+1", "-1",
                 "1.", ".5", "0b101", "0", "007", "<<", "="]


@pytest.mark.parametrize("value", PLAIN_LOOKING)
def test_yaml_dump_quotes_what_either_yaml_version_reads_as_another_type(value):
    doc = {value: value, "list": [value], "n": 3}
    text = export_core.yaml_dump(doc)
    assert YAML12.load(text) == doc and yaml.safe_load(text) == doc, text


def test_the_reproducer_exports_read_back_as_strings_in_yaml_1_2(tmp_path):
    p = project(tmp_path, '[[target]]\nname = "1e3"\nplatform = "cpu"\ntorch = "2.13.0"\noffline = true\ntag = "1.5e3"\n'
                          'runner = "0o17"\n[k8s]\nnamespace = "1e3"\nnode_selector = { "zone" = "0o17", "on" = "1e3" }\n'
                          '[ci]\nenvkit = "envkit-gpu==0.1.0"\n')
    gh = YAML12.load(fuzzing.run(["matrix", "export", "--format", "github", "--project", p], "hardening: user files").out)
    row = gh["jobs"]["build"]["strategy"]["matrix"]["include"][0]
    assert row == {"target": "1e3", "image": "envkit/envkit-1e3:1.5e3", "runner": "0o17"}
    gl = YAML12.load(fuzzing.run(["matrix", "export", "--format", "gitlab", "--project", p], "hardening: user files").out)
    assert gl["envkit-build-0o17"]["tags"] == ["0o17"] and gl["envkit-build-0o17"]["parallel"]["matrix"][0]["TARGET"] == "1e3"
    k8s = list(YAML12.load_all(fuzzing.run(["matrix", "export", "--format", "k8s", "--project", p], "hardening: user files").out))
    assert k8s[0]["metadata"]["namespace"] == "1e3"
    assert k8s[0]["spec"]["template"]["spec"]["nodeSelector"] == {"zone": "0o17", "on": "1e3"}


# ---------------------------------------------------------------- D15: duplicate engine rows

ENGINE_TABLES = ["triton", "trtllm", "trtllm_backend", "ftllm_source", "ftllm", "sglang", "paddle", "fastertransformer"]


def _first_row(table: str) -> tuple[int, int]:
    start = MATRIX.index(f"\n[[{table}]]\n") + 1
    return start, MATRIX.index("\n[[", start + 1) + 1


@pytest.mark.parametrize("table", ENGINE_TABLES)
def test_a_duplicated_engine_row_is_refused_by_matrix_check_naming_both_lines(table, tmp_path):
    start, end = _first_row(table)
    path = tmp_path / "dup.toml"
    path.write_text(MATRIX[:end] + MATRIX[start:end] + MATRIX[end:], encoding="utf-8")
    first, copy = MATRIX.count("\n", 0, start) + 1, MATRIX.count("\n", 0, end) + 1
    n = MATRIX[start:end].count("\n")
    ran = fuzzing.run(["matrix", "check", str(path)], "hardening: user files")
    fuzzing.holds(ran)
    assert ran.code == 3, ran.err
    dup = [line.strip() for line in ran.err.splitlines() if line.strip().startswith("line ") and "duplicate" in line]
    assert len(dup) == 1, ran.err
    line, also = map(int, re.fullmatch(r"line (\d+): .*duplicate .* \(first at line (\d+)\)", dup[0]).groups())
    assert copy <= line < copy + n and first <= also < first + n, (dup, first, copy)


def test_a_conflicting_triton_twin_is_refused_not_silently_shadowed():
    m = re.search(r"^\[\[triton\]\]\n(?:(?!\[).*\n)*", MATRIX, re.M)
    assert m and 'server = "' in m.group(0)
    twin = re.sub(r'server = "[^"]*"', 'server = "9.9.9"', m.group(0), count=1)
    with pytest.raises(MatrixError) as e:
        matrix_file.parse(MATRIX[:m.end()] + "\n" + twin + MATRIX[m.end():], "m.toml")
    assert any("duplicate [[triton]] (release, flavor)" in line for line in e.value.lines)


def test_the_shipped_matrix_has_no_duplicate_engine_row():
    m = matrix_file.parse(MATRIX, "matrix.toml")
    assert len({(t.release, t.flavor) for t in m.triton}) == len(m.triton) and m.fastertransformer is not None


# ---------------------------------------------------------------- D16: [[target]] tp and max_batch_size

TRITON = ('[[target]]\nname = "bloom"\nengine = "triton-trtllm"\ngpu = "H100"\n{keys}offline = true\n'
          '[k8s]\nmodel_pvc = "bloom-pvc:/mnt"\n')


@pytest.mark.parametrize("tp", ['"2"', "2"])
def test_a_triton_targets_tp_gives_its_deployment_its_gpus(tp, tmp_path):
    ran = fuzzing.run(["matrix", "export", "--format", "k8s", "--project",
                       project(tmp_path, TRITON.format(keys=f"tp = {tp}\nmax_batch_size = 128\n"))], "hardening: user files")
    assert ran.code == 0, ran.err
    deployment = next(iter(YAML12.load_all(ran.out)))
    assert deployment["kind"] == "Deployment"
    assert deployment["spec"]["template"]["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    t = project_file.load(project(tmp_path, TRITON.format(keys=f"tp = {tp}\nmax_batch_size = 128\n"))).targets[0]
    assert (t.tp, t.max_batch_size, dict(t.flags)) == (2, 128, {"engine": "triton-trtllm", "gpu": "H100"})


def test_gpus_that_are_not_the_tp_are_refused_at_export(tmp_path):
    line = refused(["matrix", "export", "--format", "k8s", "--project",
                    project(tmp_path, TRITON.format(keys="tp = 2\n") + "[target.k8s]\ngpus = 4\n"), "-o", str(tmp_path / "k.yml")])
    assert "gpus = 4 but its Triton server is tensor-parallel over tp = 2 GPUs" in line
    assert not (tmp_path / "k.yml").exists()


@pytest.mark.parametrize("keys, needle", [
    ("tp = 0\n", "tp must be from 1 to 64"), ("tp = 65\n", "tp must be from 1 to 64"), ('tp = "two"\n', "tp must be a whole number"),
    ("tp = 1.5\n", "tp must be a whole number"), ("tp = true\n", "tp must be a whole number"), ('tp = " 2"\n', "whole number"),
    ('tp = "2\\n"\n', "tp must be a whole number"), ("max_batch_size = 0\n", "max_batch_size must be from 1 to 4096"),
    ("max_batch_size = 4097\n", "from 1 to 4096"), ("tp = " + "9" * 4000 + "\n", "4000-digit number"),
])
def test_bad_tp_and_max_batch_size_are_one_line_and_exit_2(keys, needle, tmp_path):
    line = refused(["matrix", "export", "--format", "k8s", "--project", project(tmp_path, TRITON.format(keys=keys))])
    assert needle in line, line


@pytest.mark.parametrize("engine", [None, "vllm", "torch", "fastllm", "sglang==0.4.6"])
@pytest.mark.parametrize("key", ["tp = 2", "max_batch_size = 8"])
def test_a_pip_stack_given_tp_or_max_batch_size_is_refused_with_the_reason(engine, key, tmp_path):
    text = CPU.replace("offline", (f'engine = "{engine}"\n' if engine else "") + key + "\noffline")
    line = refused(["matrix", "export", "--format", "json", "--project", project(tmp_path, text)])
    assert f"target cpu: {key.split()[0]} lays out a container engine's server" in line and "pip stack" in line


def test_the_k8s_core_reads_the_targets_tp_field():
    p = project_file.parse(TRITON.format(keys="tp = 4\n"), "envkit.toml")
    deployment, _ = k8s_core.manifests(p, {"bloom": "cuda"})
    assert deployment["spec"]["template"]["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 4}}


# ---------------------------------------------------------------- [defaults] registry: the image-reference grammar

@pytest.mark.parametrize("registry", ["a//b", "x:", "-a/b", "a/b/", "/a", "a/", "A/b", "reg:port/x", "a..b/c", "a/-b", "a/b-",
                                      "a/.b", "a___b", "a:5000:6000/b", "a b", "a\u2028b", "a/b:tag", "a@sha256:0", "a" * 200,
                                      "localhost:/x", "reg.corp:5000//llm"])
def test_an_invalid_image_name_prefix_is_refused(registry, tmp_path):
    line = refused(["matrix", "export", "--format", "bake", "--project",
                    project(tmp_path, f"[defaults]\nregistry = {json.dumps(registry)}\n" + CPU), "-o", str(tmp_path / "b.json")])
    assert "[defaults] registry" in line and "is not an image name prefix" in line
    assert not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("registry", ["envkit", "registry.corp:5000/llm", "registry.corp.example:5000", "localhost:5000/a/b",
                                      "a__b/c-d.e", "a--b/c_d", "10.0.0.5:5000/llm", "[::1]:5000/llm", "my-registry.io/team/sub"])
def test_valid_image_name_prefixes_pass(registry):
    p = project_file.parse(f"[defaults]\nregistry = {json.dumps(registry)}\n" + CPU, "envkit.toml")
    assert p.targets[0].image == f"{registry}/envkit-cpu:latest"


def test_install_requirement_is_what_the_exports_write():
    p = project_file.parse(CPU + '[ci]\nenvkit = "envkit-gpu==0.1.0"\n', "envkit.toml")
    assert p.ci.envkit is not None
    text = export_core.export(p, "github", install=p.ci.envkit)
    assert "python -m pip install envkit-gpu==0.1.0" in text


# ---------------------------------------------------------------- the shipped schemas refuse what the readers refuse

def test_the_project_schema_agrees_on_registry_tp_and_max_batch_size():
    ok = tomllib.loads(TRITON.format(keys='tp = 2\nmax_batch_size = "128"\n'))
    assert not errors(ok, "project")
    for text in (TRITON.format(keys="tp = 65\n"), TRITON.format(keys='tp = "0"\n'), TRITON.format(keys="max_batch_size = 4097\n"),
                 CPU.replace("offline", "tp = 2\noffline"), CPU.replace("offline", 'engine = "vllm"\nmax_batch_size = 8\noffline'),
                 '[defaults]\nregistry = "a//b"\n' + CPU, '[defaults]\nregistry = "x:"\n' + CPU):
        assert errors(tomllib.loads(text), "project"), text
        with pytest.raises(InputError):
            project_file.parse(text, "envkit.toml")
    for registry in ("registry.corp:5000/llm", "localhost:5000", "a__b/c-d.e", "[::1]:5000/llm"):
        assert not errors(tomllib.loads(f'[defaults]\nregistry = "{registry}"\n' + CPU), "project"), registry


def test_the_lock_schema_agrees_on_the_wheels_grammar_and_the_base_images(tmp_path):
    doc = json.loads(tampered(tmp_path, lambda d: None).read_text())
    assert not errors(doc, "lock")
    for edit in (_wheel(version="1.0 --pre"), _wheel(name="torch --pre"), _wheel(filename="torch.tar.gz"), _wheel(step="a b"),
                 _wheel(url="https://u:p@h/x.whl"), _wheel(index="https://h/simple?token=x"), _wheel(url="https://h/x.whl#t"),
                 lambda d: d.update(images=[]), lambda d: d["images"][0].update(digest="x")):
        bad = json.loads(json.dumps(doc))
        edit(bad)
        assert errors(bad, "lock"), bad
        with pytest.raises(ValueError):
            Lock.from_json(bad)


def test_the_site_schema_refuses_a_ca_path_on_two_lines():
    assert errors({"ca": {"cert": "ca\n.pem"}}, "site") and not errors({"ca": {"cert": "corp-root-ca.crt"}}, "site")
