"""Issue 26, the third fuzzing campaign's defects in serving images, generate's commit and option handling: D7 (the
model directory baked in whole), D8 (secrets in --serve-arg), D11 and D12 (kill -9 / SIGTERM of generate --serve: a
truncated model, a mixed old/new context, staging kept by a zombie's PID), D14 (options a chosen engine drops
silently), and the serve/push argument items. Each reproducer: one line, its documented exit code, nothing leaked,
nothing half-written.

No container engine is contacted (DOCKER_HOST names a socket that does not exist); the kill tests run real processes."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from envkit.adapters import context_dir
from envkit.adapters.model_dir import LISTING, classify, read_model
from envkit.app.generate import generate
from envkit.app.serving import ServeRequest, check_args, parse_ref, prepare
from fuzzing import in_process
from envkit.errors import InputError
from envkit.model.flags import ResolveFlags
from schema_check import validate

ROOT = Path(__file__).resolve().parent.parent
NO_ENGINE = "unix:///nonexistent/envkit.sock"
CPU_VLLM = ["--platform", "cpu", "--vllm", "0.32.0"]
SECRET = "hf_SECRETTOKEN0123456789abcdefghijklmnop"


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)


def cli(*argv: str) -> tuple[int, str, str]:
    return in_process(argv)


def refused(code: int, err: str, exit_code: int = 2, *, says: str = "", leaks: tuple[str, ...] = ()) -> None:
    """One line `envkit: error: ... (fix: ...)`, the exit code, the words, and none of `leaks`."""
    lines = err.strip().splitlines()
    assert code == exit_code, err
    assert len(lines) == 1 and lines[0].startswith("envkit: error: ") and "(fix: " in lines[0], err
    assert "Traceback" not in err and says in lines[0], lines[0]
    for secret in leaks:
        assert secret not in err, f"{secret} printed"


def model_dir(root: Path, weights: bytes = b"\0" * 1000, **extra: bytes) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "llama"}')
    (root / "tokenizer.json").write_text("{}")
    (root / "model.safetensors").write_bytes(weights)
    for name, content in extra.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return root


def snapshot(root: Path) -> dict[str, str]:
    """Every file (its sha256) and directory under root, staging directories left out."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not context_dir.is_staging(rel.split("/")[0]):
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "<dir>"
    return out


def staging(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob(context_dir.STAGING_PREFIX + "*"))


def label(ctx: Path) -> str:
    text = (ctx / "Dockerfile").read_text()
    return text.split('io.envkit.model.sha256="', 1)[1].split('"', 1)[0]


def model_is_whole(ctx: Path) -> None:
    """The context's model: SHA256SUMS names every file there (and only those), each file has its sha256, and the
    Dockerfile's label is the listing's digest."""
    listing = (ctx / "model" / LISTING).read_text()
    assert label(ctx) == hashlib.sha256(listing.encode()).hexdigest()
    named = {}
    for line in listing.splitlines():
        sha, rel = line.split("  ", 1)
        named[rel] = sha
    there = {p.relative_to(ctx / "model").as_posix() for p in (ctx / "model").rglob("*") if p.is_file()} - {LISTING}
    assert set(named) == there
    for rel, sha in named.items():
        assert hashlib.sha256((ctx / "model" / rel).read_bytes()).hexdigest() == sha, rel


# ---------------------------------------------------------------- D7: the model directory is copied by an allow-list


def test_d7_hidden_entries_and_links_out_are_left_out_and_listed_and_the_digest_covers_what_is_carried(tmp_path):
    """D7's reproducer: a clone's .git/config with a token, .env, a README and a link to a file outside; only what a
    server loads reaches the context, the plan lists the rest with why, and the label is the digest of exactly that."""
    outside = tmp_path / "netrc"
    outside.write_text(f"machine huggingface.co password {SECRET}\n")
    md = model_dir(tmp_path / "md", **{".git/config": f'[remote "origin"]\n\turl = https://user:{SECRET}@huggingface.co/org/m\n'.encode(),
                                       ".env": f"HF_TOKEN={SECRET}\n".encode(), "README.md": b"# card\n",
                                       "training_args.bin": SECRET.encode(), "sub/tokenizer_config.json": b"{}"})
    (md / "x").symlink_to(outside)
    code, out, err = cli("generate", *CPU_VLLM, "--serve", str(md), "--dry-run", "--json")
    assert code == 0, err
    doc = validate(json.loads(out), "generate")
    left = {e["path"]: e["why"] for e in doc["model"]["left_out"]}
    assert set(left) == {".env", ".git/", "README.md", "training_args.bin", "x"}
    assert "token" in left[".git/"] and "credentials" in left[".env"] and "serving.toml" in left["README.md"]
    assert "hub_token" in left["training_args.bin"] and "link out of the model directory" in left["x"]
    assert not (tmp_path / "sv").exists()
    warning = [w for w in doc["warnings"] if "left out of the image" in w]
    assert len(warning) == 1 and all(name in warning[0] for name in left)
    code, _, err = cli("generate", *CPU_VLLM, "--serve", str(md), "-o", str(tmp_path / "sv"))
    assert code == 0, err
    sv = tmp_path / "sv"
    carried = sorted(p.relative_to(sv / "model").as_posix() for p in (sv / "model").rglob("*") if p.is_file())
    assert carried == [LISTING, "config.json", "model.safetensors", "sub/tokenizer_config.json", "tokenizer.json"]
    for p in sv.rglob("*"):
        assert not p.is_symlink() and (not p.is_file() or SECRET.encode() not in p.read_bytes()), p
    model_is_whole(sv)
    assert doc["model"]["sha256"] == label(sv) and doc["model"]["files"] == 4


def test_d7_a_link_out_of_the_directory_whose_name_is_on_the_list_is_refused(tmp_path):
    outside = tmp_path / "elsewhere.json"
    outside.write_text(SECRET)
    md = model_dir(tmp_path / "md")
    (md / "vocab.json").symlink_to(outside)
    code, _, err = cli("generate", *CPU_VLLM, "--serve", str(md), "-o", str(tmp_path / "sv"))
    refused(code, err, says="vocab.json is a link to a file outside the model directory", leaks=(SECRET,))
    assert not (tmp_path / "sv").exists()


def test_d7_a_hugging_face_cache_snapshot_is_read_through_its_links_into_blobs(tmp_path):
    repo = tmp_path / "hub" / "models--org--tiny"
    blobs, snap = repo / "blobs", repo / "snapshots" / "0123abc"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    for name, content in (("config.json", b'{"model_type": "llama"}'), ("model.safetensors", b"w" * 64), ("tokenizer.json", b"{}")):
        blob = blobs / hashlib.sha256(content).hexdigest()
        blob.write_bytes(content)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    tree = read_model(str(snap), lambda _: None)
    assert [rel for rel, _, _ in tree.files] == ["config.json", "model.safetensors", "tokenizer.json"] and tree.left_out == ()


@pytest.mark.parametrize("rel, auto_map, carried", [
    ("model-00001-of-00002.safetensors", False, True), ("model.safetensors.index.json", False, True),
    ("pytorch_model.bin", False, True), ("consolidated.00.pth", False, True), ("ggml-q4.gguf", False, True),
    ("generation_config.json", False, True), ("tokenizer.model", False, True), ("tokenizer.model.v3", False, True),
    ("special_tokens_map.json", False, True), ("merges.txt", False, True), ("chat_template.jinja", False, True),
    ("qwen.tiktoken", False, True), ("preprocessor_config.json", False, True), ("LICENSE", False, True),
    ("modeling_qwen.py", True, True), ("modeling_qwen.py", False, False), ("sub/modeling_qwen.py", True, False),
    ("training_args.bin", False, False), ("optimizer.pt", False, False), ("rng_state_0.pth", False, False),
    ("README.md", False, False), ("notes.txt", False, False), ("run.sh", False, False),
])
def test_d7_the_allow_list(rel, auto_map, carried):
    group, why = classify(rel, auto_map)
    assert (group is not None) == carried and (carried or why)


def test_d7_remote_code_is_carried_only_for_a_config_with_an_auto_map_and_odd_entries_are_left_out(tmp_path):
    md = model_dir(tmp_path / "md", **{"modeling_x.py": b"import torch\n"})
    os.mkfifo(md / "pytorch_model.bin")  # a FIFO on the list: left out, never read (reading it would hang)
    (md / "linked-dir").symlink_to(tmp_path)
    tree = read_model(str(md), lambda _: None)
    left = dict(tree.left_out)
    assert "auto_map" in left["modeling_x.py"] and "not a regular file" in left["pytorch_model.bin"]
    assert "not followed" in left["linked-dir/"]
    (md / "config.json").write_text('{"model_type": "x", "auto_map": {"AutoModel": "modeling_x.X"}}')
    assert "modeling_x.py" in [rel for rel, _, _ in read_model(str(md), lambda _: None).files]
    (md / "bad\nname.safetensors").write_bytes(b"x")
    with pytest.raises(InputError, match=r"bad\\x0aname.safetensors has a control character"):
        read_model(str(md), lambda _: None)


# ---------------------------------------------------------------- D8: secrets in --serve-arg


@pytest.mark.parametrize("args", [
    ["--serve-arg=--api-key=sk-SERVESECRET0123456789"], ["--serve-arg=--api-key", "--serve-arg=sk-SERVESECRET0123456789"],
    ["--serve-arg=--hf-token=SERVESECRET"], ["--serve-arg=--x-secret=SERVESECRET"], ["--serve-arg=--db-password", "--serve-arg=SERVESECRET"],
    ["--serve-arg=--hf-overrides={\"api_key\": \"SERVESECRET\"}"], ["--serve-arg=--download-dir=https://u:SERVESECRET@host/x"],
])
def test_d8_a_secret_in_the_servers_arguments_is_refused_without_printing_it(tmp_path, args):
    md = model_dir(tmp_path / "md")
    code, out, err = cli("generate", *CPU_VLLM, "--serve", str(md), *args, "-o", str(tmp_path / "sv"), "--json")
    refused(code, err, says="--serve-arg", leaks=("SERVESECRET",))
    assert "SERVESECRET" not in out and "envkit serve --env " in err and not (tmp_path / "sv").exists()
    if "--api-key" in args[0]:
        assert "envkit serve --env VLLM_API_KEY=..." in err


def test_d8_a_project_targets_serve_args_take_the_same_check_and_ordinary_options_pass(tmp_path):
    md = model_dir(tmp_path / "md")
    with pytest.raises(InputError, match="--api-key carries a secret") as e:
        prepare(ServeRequest(str(md), args=("--api-key", "sk-PROJECTSECRET0123456789")), lambda _: None)
    assert "PROJECTSECRET" not in e.value.message + e.value.fix
    check_args(("--max-num-batched-tokens", "512", "--tokenizer-mode=auto", "--ssl-keyfile", "/k.pem", "--api-key"))


# ---------------------------------------------------------------- D14: options the chosen engine does not use


@pytest.mark.parametrize("argv, says", [
    (["--engine", "triton-trtllm", "--gpu", "T4", "--trtllm", "0.8", "--offline"], "--offline does not apply"),
    (["--engine", "trtllm", "--gpu", "H200", "--host-march", "x86-64-v2"], "--host-march does not apply"),  # its default, given
    (["--engine", "trtllm", "--gpu", "H200", "--toolkit", "pip"], "--toolkit does not apply"),
    (["--engine", "trtllm", "--gpu", "H200", "--max-jobs", "2", "--nvcc-threads", "2"], "--max-jobs, --nvcc-threads do not apply"),
    (["--engine", "triton-vllm", "--gpu", "H100", "--tp", "4"], "does not use --tp"),
    (["--engine", "triton-vllm", "--gpu", "H100", "--max-batch-size", "4000"], "does not use --max-batch-size"),
    (["--engine", "fastertransformer", "--gpu", "A100", "--max-batch-size", "8"], "does not use --max-batch-size"),
    (["--engine", "triton-trtllm", "--gpu", "H100", "--from-wheel"], "--from-wheel installs TensorRT-LLM's wheel for trtllm-serve"),
    (["--platform", "cpu", "--torch", "2.13.0", "--tp", "8"], "--tp lays out a container engine's server"),
    (["--platform", "cpu", "--torch", "2.13.0", "--tp", "1"], "--tp lays out"),  # the default, given
    (["--platform", "cpu", "--torch", "2.13.0", "--max-batch-size", "64", "--from-wheel"], "--max-batch-size, --from-wheel lay out"),
    (["--platform", "cpu", "--torch", "2.13.0", "--tp", "8", "--max-batch-size", "0", "--from-wheel"], "--max-batch-size 0 is out of range"),
    (["--engine", "trtllm", "--gpu", "H200", "--max-batch-size", "0"], "--max-batch-size 0 is out of range"),
])
def test_d14_an_option_the_engine_would_drop_is_refused_with_the_reason(tmp_path, argv, says):
    code, _, err = cli("generate", *argv, "-o", str(tmp_path / "g"))
    refused(code, err, says=says)
    assert not (tmp_path / "g").exists()


def test_d14_a_container_engine_refuses_serve_and_the_options_it_uses_still_reach_its_files(tmp_path):
    code, _, err = cli("generate", "--engine", "triton-trtllm", "--gpu", "H100", "--serve", str(model_dir(tmp_path / "md")), "-o", "-")
    assert code == 2 and "--serve does not apply" in err.strip().splitlines()[-1]
    code, out, err = cli("generate", "--engine", "trtllm", "--gpu", "H200", "--tp", "2", "--max-batch-size", "8", "-o", "-")
    assert code == 0, err
    assert '"--tp_size", "2", "--max_batch_size", "8"' in out and "--tp=2 --max-batch-size=8" in out


# ---------------------------------------------------------------- minor: serve and push arguments, before any engine


@pytest.mark.parametrize("argv, says", [
    (["--image", "envkit/serve:tiny", "--timeout", "nan"], "--timeout nan is not a number of seconds"),
    (["--image", "envkit/serve:tiny", "--timeout", "inf"], "--timeout inf"),
    (["--image", "envkit/serve:tiny", "--timeout", "0"], "--timeout 0.0"),
    (["--image", "envkit/serve:tiny", "--timeout", "-5"], "--timeout -5.0"),
    (["--image", "envkit/serve:tiny", "--model-dir", "/nonexistent"], "--model-dir '/nonexistent': no such directory"),
    (["--image", "x\ny"], "is not an image reference"),
    (["--image", "a//b"], "is not an image reference"),
    (["--image", "envkit/serve:tiny", "--env", "NOEQUALS"], "is not NAME=VALUE"),
    (["--stop", "envkit-serve-0123abcd", "--image", "envkit/serve:tiny"], "--image goes with starting one"),
    (["--stop", "envkit-serve-0123abcd", "--sweep", "--keep"], "--sweep, --keep go with starting one"),
    (["--image", "envkit/serve:tiny", "--keep"], "--keep leaves the server running after --sweep"),
])
def test_minor_serve_input_faults_are_bad_input_before_the_engine_is_contacted(argv, says):
    code, _, err = cli("serve", *argv)
    refused(code, err, says=says)


def test_minor_a_well_formed_serve_request_reaches_the_engine_check():
    code, _, err = cli("serve", "--image", "envkit/serve:tiny", "--timeout", "60")
    refused(code, err, 4, says="no container engine answers")


@pytest.mark.parametrize("ref, says", [
    ("a/b", "names no registry host"), ("llm/qwen:v1", "docker.io/llm/qwen"), ("qwen", "docker.io/library/qwen"),
    ("reg.io/a//b", "is not REGISTRY/REPOSITORY"), ("-a/b", "is not REGISTRY/REPOSITORY"), ("reg.io/-a/b", "is not"),
    ("reg.io/a:b:c", "is not"), ("reg.io/A/b", "is not"), ("reg.io/a/b@sha256:" + "0" * 64, "names a digest"), ("reg.io/a b", "is not"),
    ("user:PUSHSECRET@reg.io/a/b", "a login? it is not printed"),
])
def test_minor_push_needs_a_registry_host_and_a_valid_reference(ref, says):
    code, _, err = cli("push", "envkit/serve:tiny", "--to", ref)
    refused(code, err, says=says, leaks=("PUSHSECRET",))


@pytest.mark.parametrize("ref", ["localhost/a/b:v1", "127.0.0.1:5000/envkit/tiny:v1", "registry.intra:5000/llm/qwen-7b:v1", "Registry/x"])
def test_minor_a_push_to_a_registry_reaches_the_engine_check(ref):
    assert parse_ref(ref) is not None and parse_ref(ref).host is not None  # type: ignore[union-attr]
    code, _, err = cli("push", "envkit/serve:tiny", "--to", ref)
    refused(code, err, 4, says="no container engine answers")


# ---------------------------------------------------------------- D12: the commit after kill -9, deterministically

CPU = ResolveFlags(platform="cpu", vllm="0.32.0")
H100 = ResolveFlags(gpu="H100", cuda="12.8", flash_attn="2.7.4.post1", kernels="layer_norm,rotary")


def _in_child(body: Callable[[], None]) -> int:
    """Run `body` in a forked child (a real process) and return how it ended: -SIGNAL, or its exit code."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                body()
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _kill_at_replace(n: int, fail_at: Optional[int] = None) -> None:
    """os.replace as context_dir calls it: SIGKILL this process at call n (call fail_at raises disk full first)."""
    real, calls = os.replace, [0]

    def replace(src: Any, dst: Any) -> None:
        calls[0] += 1
        if calls[0] == fail_at:
            raise OSError(28, "No space left on device")
        if calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst)
    context_dir.os.replace = replace  # type: ignore[attr-defined]


def _serving(md: Path) -> Any:
    return prepare(ServeRequest(str(md), name="tiny"), lambda _: None)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(old context, new context, models): a serving context over a small model, and one of another model and stack."""
    base = tmp_path_factory.mktemp("pair")
    m1 = model_dir(base / "m1", b"1" * 5000, **{"generation_config.json": b"{}"})
    m2 = model_dir(base / "m2", b"2" * 7000, **{"sub/tokenizer_config.json": b"{}"})
    generate(CPU, out=str(base / "old"), serving=_serving(m1))
    generate(CPU, out=str(base / "new"), serving=_serving(m2))
    generate(ResolveFlags(platform="cpu", torch="2.13.0"), out=str(base / "plain"))
    generate(H100, out=str(base / "h100"))
    return base, m1, m2


def _cases(base: Path, m2: Path) -> dict[str, tuple[Path, Path, Callable[[str], Any]]]:
    return {"serving model over model": (base / "old", base / "new", lambda out: generate(CPU, out=out, serving=_serving(m2))),
            "fuzz D12: H100 over cpu": (base / "plain", base / "h100", lambda out: generate(H100, out=out))}


def _state(ctx: Path, old: dict, new: dict) -> str:
    s = snapshot(ctx)
    if s == old:
        return "old"
    if s == new:
        return "new"
    assert "Dockerfile" not in s, "a Dockerfile beside files of the other generation: a mixed context"
    return "cut"


@pytest.mark.parametrize("case", ["serving model over model", "fuzz D12: H100 over cpu"])
def test_d12_kill_9_at_every_rename_of_the_commit_leaves_old_new_or_no_dockerfile_and_a_rerun_repairs(pair, tmp_path, case):
    """Each rename of the commit in turn: the process is SIGKILLed there. The context is then the old one byte for byte,
    the whole new one, or (the commit cut short) one without a Dockerfile, which nothing can build; the next run
    finishes the commit from the staging's journal and writes its own, whole, with no staging left."""
    base, _, m2 = pair
    before, after, run = _cases(base, m2)[case]
    old, new = snapshot(before), snapshot(after)
    seen, n = set(), 0
    while True:
        n += 1
        ctx = tmp_path / f"k{n}"
        shutil.copytree(before, ctx, symlinks=True)
        code = _in_child(lambda: (_kill_at_replace(n), run(str(ctx))))
        state = _state(ctx, old, new)
        seen.add(state)
        if code == 0:  # fewer renames than n: the run finished
            assert state == "new" and not staging(ctx)
            break
        assert code == -signal.SIGKILL
        if state == "cut":
            assert staging(ctx), "a cut commit keeps its journal for the next run"
            if n % 2:  # and a re-run killed while it finishes the commit is finished by the one after it
                assert _in_child(lambda: (_kill_at_replace(1), run(str(ctx)))) == -signal.SIGKILL
                assert "Dockerfile" not in snapshot(ctx) or _state(ctx, old, new) in ("new", "cut")
        run(str(ctx))
        assert snapshot(ctx) == new and not staging(ctx), f"rename {n}: the re-run did not repair it"
        if case.startswith("serving"):
            model_is_whole(ctx)
    assert seen == {"cut", "new"} and n > 5  # the Dockerfile goes aside before the first rename: every kill inside is "cut"


def test_d12_kill_9_during_the_rollback_of_a_failed_commit_is_rolled_back_by_the_next_run(pair, tmp_path):
    base, _, m2 = pair
    before, after, run = _cases(base, m2)["serving model over model"]
    old, new = snapshot(before), snapshot(after)
    for fail_at in (2, 4, 6, 8):
        ctx = tmp_path / f"r{fail_at}"
        shutil.copytree(before, ctx, symlinks=True)
        code = _in_child(lambda: (_kill_at_replace(fail_at + 1, fail_at=fail_at), run(str(ctx))))
        assert code == -signal.SIGKILL and _state(ctx, old, new) in ("old", "cut")
        context_dir.recover_dead_staging(ctx)  # what the next run does first: the rollback is finished
        assert snapshot(ctx) == old and not staging(ctx)
        run(str(ctx))
        assert snapshot(ctx) == new


def _zombie() -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    for _ in range(500):  # exited, not reaped: a zombie until wait()
        if Path(f"/proc/{p.pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return p
        time.sleep(0.01)
    raise AssertionError("no zombie")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="/proc gives the state and start time")
def test_d12_staging_of_a_zombie_or_of_a_reused_pid_is_not_a_live_writer(tmp_path):
    """In 11 of 42 fuzz runs the killed run's staging survived the re-run: its PID was a zombie's, not yet reaped."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    z = _zombie()
    parent = os.getppid()
    start = int(Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[19])
    names = {"zombie": f".envkit-staging-{z.pid}-abc", "reused": f".envkit-staging-{parent}-t{start + 1}-abc",
             "live": f".envkit-staging-{parent}-t{start}-abc"}
    for name in names.values():
        (ctx / name / "new").mkdir(parents=True)
    try:
        generate(ResolveFlags(platform="cpu", torch="2.13.0"), out=str(ctx))
    finally:
        z.wait()
    assert staging(ctx) == [names["live"]]


# ---------------------------------------------------------------- D11: kill -9 and SIGTERM of generate --serve, real timing


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """Two serving contexts of a 192 MB model (two shards of random bytes, mode 0600, so they are copied, not linked):
    the old one, and the new one whose second shard differs."""
    base = tmp_path_factory.mktemp("big")
    m1 = model_dir(base / "m1", os.urandom(96 << 20), **{"model-00002.safetensors": os.urandom(96 << 20)})
    m2 = base / "m2"
    shutil.copytree(m1, m2)
    (m2 / "model-00002.safetensors").write_bytes(os.urandom(96 << 20))
    for m in (m1, m2):
        for p in m.glob("*.safetensors"):
            p.chmod(0o600)
    generate(CPU, out=str(base / "old"), serving=_serving(m1))
    generate(CPU, out=str(base / "new"), serving=_serving(m2))
    model_is_whole(base / "new")
    return base, m2, snapshot(base / "old"), snapshot(base / "new")


def _spawn(model: Path, out: Path, err: Path) -> subprocess.Popen:
    with err.open("wb") as f:
        return subprocess.Popen([sys.executable, "-m", "envkit", "generate", *CPU_VLLM, "--serve", str(model), "--served-model-name",
                                 "tiny", "-o", str(out)], stdout=subprocess.DEVNULL, stderr=f, cwd=ROOT, start_new_session=True,
                                env={**os.environ, "DOCKER_HOST": NO_ENGINE})


def _wait_for(out: Path, point: str, p: subprocess.Popen) -> None:
    """Poll until the run reaches `point`: its staging directory, its second shard half-copied, its model staged."""
    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline:
        dirs = list(out.glob(context_dir.STAGING_PREFIX + "*"))
        shard = [d / "new" / "model" / "model-00002.safetensors" for d in dirs]
        if point == "staging" and dirs:
            return
        if point == "copying" and any(s.exists() and s.stat().st_size > 0 for s in shard):
            return
        if point == "staged" and any((d / "new" / "model" / LISTING).exists() for d in dirs):
            return
        time.sleep(0.001)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_d11_a_signal_at_any_point_of_generate_serve_leaves_the_old_context_or_the_whole_new_one(big, tmp_path, sig):
    """D11's reproducer, with real processes: `generate --serve` over a context of another model, signalled while it
    stages, while it copies the second shard, once the model is staged, and after it is done. The model is staged
    with the generated files and committed with them: the context is the old one byte for byte, the whole new one (its
    SHA256SUMS match the label), or, after kill -9 inside the commit, one without a Dockerfile; SIGTERM ends the
    process by the signal (143 in a shell) after putting the old context back, with no staging left. A re-run
    repairs every case."""
    base, m2, old, new = big
    seen = []
    for point in ("staging", "copying", "staged", "done"):
        ctx = tmp_path / point
        shutil.copytree(base / "old", ctx)
        p = _spawn(m2, ctx, tmp_path / f"{point}.err")
        if point == "done":
            assert p.wait(timeout=120) == 0
        else:
            _wait_for(ctx, point, p)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)
            p.wait(timeout=120)
        err = (tmp_path / f"{point}.err").read_text()
        assert "Traceback" not in err and p.returncode in (0, -sig), err[-2000:]
        state = _state(ctx, old, new)
        seen.append(state)
        if state == "new":
            model_is_whole(ctx)
        if sig == signal.SIGTERM:
            assert state in ("old", "new") and not staging(ctx)
        generate(CPU, out=str(ctx), serving=_serving(m2))
        assert snapshot(ctx) == new and not staging(ctx)  # the new context, whose model was checked whole above
        shutil.rmtree(ctx)
    assert seen[0] == "old" and seen[-1] == "new"


def test_d11_the_staged_model_is_hard_linked_where_it_may_be_so_disk_is_not_doubled(tmp_path):
    md = model_dir(tmp_path / "md", b"w" * 100_000)
    (md / "private.safetensors").write_bytes(b"p" * 1000)
    (md / "private.safetensors").chmod(0o600)
    generate(CPU, out=str(tmp_path / "ctx"), serving=_serving(md))
    ctx_model = tmp_path / "ctx" / "model"
    assert os.stat(ctx_model / "model.safetensors").st_ino == os.stat(md / "model.safetensors").st_ino  # linked: no copy
    private = os.stat(ctx_model / "private.safetensors")
    assert private.st_ino != os.stat(md / "private.safetensors").st_ino and stat.S_IMODE(private.st_mode) == 0o644
    assert stat.S_IMODE(os.stat(md / "private.safetensors").st_mode) == 0o600
    model_is_whole(tmp_path / "ctx")


def test_a_signal_while_the_staging_directory_is_made_is_raised_inside_its_cleanup():
    """The d11 SIGTERM case once left a staging directory: the signal came inside mkdtemp, after the directory was
    made and before it had a name the cleanup could remove. Such a signal is held, then raised by resume()."""
    guard = context_dir.SignalGuard()
    with guard.holding():
        guard.handler(signal.SIGTERM, None)
        assert guard.cleaning and guard.held == [signal.SIGTERM]
    assert not guard.cleaning
    with pytest.raises(context_dir.Interrupted) as e:
        guard.resume()
    assert e.value.signum == signal.SIGTERM and guard.held == []
    guard.resume()  # nothing held: nothing raised
