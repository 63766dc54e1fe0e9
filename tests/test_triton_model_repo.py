"""The Triton model repository of a container engine's context, taken from the backend's own archive at its commit
and filled by envkit/inimage/fill_triton_repo.py (render_engine writes the values).

The archives here are synthetic: the backend's directory layout with a few ${...} placeholders, written by this test
(none of NVIDIA's text). The real archives were compared by hand (docs/engines.md); with
ENVKIT_TRITON_ARCHIVES=DIR holding them (git archive of each commit, or GitHub's), the last test fills them too.
"""
from __future__ import annotations

import functools
import http.server
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from envkit.app.generate import GeneratedEngine, generate
from envkit.errors import InputError
from envkit.model.engines import EngineOptions
from envkit.model.flags import ResolveFlags
from envkit.model.plan import Options

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "envkit" / "inimage" / "fill_triton_repo.py"
INTRANET = str(ROOT / "tests" / "golden" / "sites" / "intranet.toml")
T4_08 = {"gpu": "T4", "engine": "triton-trtllm", "trtllm": "0.8.0"}
FT = {"gpu": "V100", "engine": "fastertransformer"}
TRTLLM_COMMIT = "41fe3a6a9daa12c64403e084298c6169b07d489d"  # matrix.toml's [[trtllm_backend]] 0.8.0
FT_COMMIT = "c6936c39be6fc57c161db34cfe5c45d1bef81ee2"  # matrix.toml's [[fastertransformer]] backend_commit

# A synthetic ensemble: the layout of all_models/inflight_batcher_llm, a few of each kind of placeholder: structural
# ones (a number, a bool, a backend name), string ones envkit fills, and one string left unset (the backend reads it
# as "not given"); a directory envkit does not take (tensorrt_llm_bls) and a file it leaves out.
ENSEMBLE = {
    "ensemble/config.pbtxt": 'name: "ensemble"\nplatform: "ensemble"\nmax_batch_size: ${triton_max_batch_size}\n',
    "ensemble/1/.tmp": "",
    "preprocessing/config.pbtxt": ('name: "preprocessing"\nbackend: "python"\nmax_batch_size: ${triton_max_batch_size}\n'
                                   'parameters {\n  key: "tokenizer_dir"\n  value: {\n    string_value: "${tokenizer_dir}"\n  }\n}\n'
                                   'instance_group [ { count: ${preprocessing_instance_count} kind: KIND_CPU } ]\n'),
    "preprocessing/1/model.py": "# test text: the preprocessing model\n",
    "postprocessing/config.pbtxt": 'name: "postprocessing"\nmax_batch_size: ${triton_max_batch_size}\n',
    "postprocessing/1/model.py": "# test text: the postprocessing model\n",
    "tensorrt_llm/config.pbtxt": ('name: "tensorrt_llm"\nbackend: "${triton_backend}"\nmax_batch_size: ${triton_max_batch_size}\n'
                                  'model_transaction_policy {\n  decoupled: ${decoupled_mode}\n}\n'
                                  'parameters: {\n  key: "gpt_model_path"\n  value: {\n    string_value: "${engine_dir}"\n  }\n}\n'
                                  'parameters: {\n  key: "batch_scheduler_policy"\n  value: {\n    string_value: "${batch_scheduler_policy}"\n  }\n}\n'
                                  'parameters: {\n  key: "lora_cache_optimal_adapter_size"\n  value: {\n'
                                  '    string_value: "${lora_cache_optimal_adapter_size}"\n  }\n}\n'),
    "tensorrt_llm/1/.gitkeep": "",
    "tensorrt_llm/1/model.py": "# test text: the python implementation envkit leaves out\n",
    "tensorrt_llm_bls/config.pbtxt": 'name: "tensorrt_llm_bls"\nmax_batch_size: ${not_envkits}\n',
}
# A synthetic bloom repository of fastertransformer_backend: parameters set by key, the Hub tokenizer replaced.
BLOOM = {
    "ensemble/config.pbtxt": 'name: "ensemble"\nplatform: "ensemble"\nmax_batch_size: 1024\n',
    "ensemble/1/.tmp": "",
    "preprocessing/config.pbtxt": 'name: "preprocessing"\nbackend: "python"\n',
    "preprocessing/1/model.py": "tokenizer = AutoTokenizer.from_pretrained('bigscience/bloom')  # test text\n",
    "postprocessing/config.pbtxt": 'name: "postprocessing"\nbackend: "python"\n',
    "postprocessing/1/model.py": "tokenizer = AutoTokenizer.from_pretrained('bigscience/bloom')  # test text\n",
    "fastertransformer/config.pbtxt": ('name: "fastertransformer"\nbackend: "fastertransformer"\n'
                                       'parameters {\n  key: "tensor_para_size"\n  value: {\n    string_value: "1"\n  }\n}\n'
                                       'parameters {\n  key: "model_checkpoint_path"\n  value: {\n    string_value: "./x/1/"\n  }\n}\n'),
    "fastertransformer/1/config.ini": "[test]\nleft = out\n",
}


def archive(path: Path, project: str, commit: str, root: str, files: dict[str, str], *, record: str | None = None,
            link: str | None = None) -> Path:
    """A tar.gz laid out as GitHub's archive of a commit: PROJECT-COMMIT/ROOT/..., directory entries included, the
    commit in the pax header as git archive writes it (`record` another one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    top = f"{project}-{commit}"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT, pax_headers={"comment": record or commit}) as tar:
        parts = root.split("/")
        dirs = [top] + [f"{top}/{'/'.join(parts[:i])}" for i in range(1, len(parts) + 1)] + sorted(
            {f"{top}/{root}/" + "/".join(rel.split("/")[:i]) for rel in files for i in range(1, rel.count("/") + 1)})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for rel, text in sorted({"README.md": "# test\n", **{f"{root}/{k}": v for k, v in files.items()}}.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(f"{top}/{root}/{link}")
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
    return path


def trtllm_archive(ctx: Path, **kw) -> Path:
    return archive(ctx / "sources" / f"tensorrtllm_backend-{TRTLLM_COMMIT}.tar.gz", "tensorrtllm_backend", TRTLLM_COMMIT,
                   "all_models/inflight_batcher_llm", ENSEMBLE, **kw)


def engine(flags: dict, out: Path | None = None, *, site: str | None = None, offline: bool = False, **eopts) -> GeneratedEngine:
    g = generate(ResolveFlags.from_mapping(flags), mirror=site, out=None if out is None else str(out),
                 opts=Options(offline=offline), given=frozenset({"--offline"} if offline else ()),
                 engine_opts=EngineOptions(**eopts))
    assert isinstance(g, GeneratedEngine), g
    return g


def fill_stage(ctx: Path, out: Path) -> subprocess.CompletedProcess:
    """The Dockerfile's fill stage run here: its RUN line, with the files it COPYs to /tmp/envkit/ taken from the
    context, and its --out replaced by `out`."""
    docker = (ctx / "Dockerfile").read_text()
    stage = docker[docker.index(" AS model-repo\n"):docker.index("\n# ---- stage runtime")]
    copy = next(line for line in stage.splitlines() if line.startswith("COPY "))
    run = shlex.split(next(line for line in stage.splitlines() if line.startswith("RUN "))[4:])
    sources = {f"/tmp/envkit/{Path(p).name}": str(ctx / p) for p in copy.split()[1:-1]}
    argv = [sources.get(a, a) for a in run]
    argv[argv.index("--out") + 1] = str(out)
    assert argv[0] == "python3"
    return subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True)


def steps(plan: dict) -> list[dict]:
    """Every step of envkit/engine.plan.json, stage after stage."""
    return [st for stage in plan["stages"] for st in stage["steps"]]


def test_a_carried_archive_fills_the_model_repository_offline(tmp_path):
    ctx = tmp_path / "ctx"
    trtllm_archive(ctx)
    g = engine(T4_08, ctx, offline=True, tp=2, max_batch_size=8)
    docker = g.files["Dockerfile"].decode()
    name = f"tensorrtllm_backend-{TRTLLM_COMMIT}.tar.gz"
    assert f"COPY sources/{name} envkit/fill_triton_repo.py envkit/fill_triton_repo.json /tmp/envkit/" in docker
    assert not [line for line in docker.splitlines() if line.startswith("RUN ") and "://" in line]  # no network step
    assert "--offline" in g.command and (ctx / "Dockerfile").is_file() and (ctx / "sources" / name).is_file()
    plan = json.loads(g.files["envkit/engine.plan.json"])
    assert plan["offline"] is True and {st["network"] for st in steps(plan)} == {"none"}
    assert plan["carried"] == [{"path": f"sources/{name}", "what": "tensorrtllm_backend v0.8.0 (commit 41fe3a6a9daa)",
                                "origin": f"https://github.com/triton-inference-server/tensorrtllm_backend/archive/{TRTLLM_COMMIT}.tar.gz"}]

    ran = fill_stage(ctx, tmp_path / "repo")
    assert ran.returncode == 0, ran.stderr
    repo = tmp_path / "repo"
    got = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file())
    assert got == sorted(k for k in ENSEMBLE if not k.startswith("tensorrt_llm_bls/") and k != "tensorrt_llm/1/model.py")
    assert "left out tensorrt_llm/1/model.py" in ran.stdout
    trt = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    assert 'backend: "tensorrtllm"' in trt and "max_batch_size: 8" in trt and "decoupled: true" in trt
    assert 'string_value: "/engines"' in trt and 'string_value: "guaranteed_no_evict"' in trt
    assert 'string_value: "${lora_cache_optimal_adapter_size}"' in trt  # a string upstream leaves unset stays so
    pre = (repo / "preprocessing" / "config.pbtxt").read_text()
    assert 'string_value: "/models/tokenizer"' in pre and "count: 1 kind: KIND_CPU" in pre
    assert (repo / "ensemble" / "config.pbtxt").read_text().endswith("max_batch_size: 8\n")
    assert (repo / "preprocessing" / "1" / "model.py").read_text() == ENSEMBLE["preprocessing/1/model.py"]  # as it came


def test_fastertransformer_sets_its_parameters_and_the_mounted_tokenizer(tmp_path):
    ctx = tmp_path / "ctx"
    archive(ctx / "sources" / f"fastertransformer_backend-{FT_COMMIT}.tar.gz", "fastertransformer_backend", FT_COMMIT,
            "all_models/bloom", BLOOM)
    engine(FT, ctx, site=INTRANET, tp=2)
    ran = fill_stage(ctx, tmp_path / "repo")
    assert ran.returncode == 0, ran.stderr
    repo = tmp_path / "repo"
    ft = (repo / "fastertransformer" / "config.pbtxt").read_text()
    assert 'key: "tensor_para_size"\n  value: {\n    string_value: "2"' in ft
    assert 'string_value: "/models/c-model/2-gpu/"' in ft
    for side in ("preprocessing", "postprocessing"):
        assert (repo / side / "1" / "model.py").read_text() == "tokenizer = AutoTokenizer.from_pretrained('/models/tokenizer')  # test text\n"
    assert (repo / "fastertransformer" / "1").is_dir() and not any((repo / "fastertransformer" / "1").iterdir())
    assert (repo / "ensemble" / "config.pbtxt").read_text() == BLOOM["ensemble/config.pbtxt"]


def test_without_the_archive_the_fill_stage_fetches_it_through_the_sites_rewrite(tmp_path):
    g = engine(T4_08, tmp_path / "ctx", site=INTRANET)
    url = f"http://10.10.1.10/github/triton-inference-server/tensorrtllm_backend/archive/{TRTLLM_COMMIT}.tar.gz"
    run = [line for line in g.files["Dockerfile"].decode().splitlines() if line.startswith("RUN ")]
    assert run == [f"RUN python3 /tmp/envkit/fill_triton_repo.py /tmp/envkit/fill_triton_repo.json --fetch {url} --out /opt/envkit/model_repo"]
    plan = json.loads(g.files["envkit/engine.plan.json"])
    assert plan["carried"] == [] and plan["offline"] is False
    (step,) = [st for st in steps(plan) if st["network"] != "none"]
    assert (step["id"], step["network"], step["reaches"]) == ("model-repo", "site", [url])
    assert "github.com" not in "".join(run)
    direct = steps(json.loads(engine(T4_08).files["envkit/engine.plan.json"]))[0]  # no site: GitHub itself
    assert direct["network"] == "internet" and direct["reaches"][0].startswith("https://github.com/triton-inference-server/")


def test_offline_without_the_archive_is_refused_and_writes_nothing(tmp_path):
    with pytest.raises(InputError) as e:
        engine(T4_08, tmp_path / "ctx", site=INTRANET, offline=True)
    assert "--offline does not apply without the model repository's archive" in e.value.message
    assert f"{tmp_path / 'ctx'}/sources/tensorrtllm_backend-{TRTLLM_COMMIT}.tar.gz" in e.value.fix
    assert not (tmp_path / "ctx").exists()
    with pytest.raises(InputError, match="--offline does not apply"):  # a container with nothing to carry: as before
        engine({"gpu": "H200", "engine": "trtllm"}, tmp_path / "ctx", offline=True)


def test_a_site_that_does_not_mirror_github_is_refused(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[rewrite]\n"https://download.pytorch.org/whl" = "http://10.10.1.10/pytorch-whl"\n')
    with pytest.raises(InputError) as e:
        engine(FT, tmp_path / "ctx", site=str(site))
    assert "no [rewrite] for https://github.com" in e.value.message and "sources/fastertransformer_backend-" in e.value.fix


def test_the_fill_script_fetches_the_archive(tmp_path):
    ctx = tmp_path / "ctx"
    engine(T4_08, ctx)
    served = trtllm_archive(tmp_path / "www")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/{served.name}"
        ran = subprocess.run([sys.executable, str(ctx / "envkit/fill_triton_repo.py"), str(ctx / "envkit/fill_triton_repo.json"),
                              "--fetch", url, "--out", str(tmp_path / "repo")], capture_output=True, text=True)
        missing = subprocess.run([sys.executable, str(SCRIPT), str(ctx / "envkit/fill_triton_repo.json"), "--fetch", url + ".nope",
                                  "--out", str(tmp_path / "other")], capture_output=True, text=True)
    finally:
        server.shutdown()
        server.server_close()
    assert ran.returncode == 0, ran.stderr
    assert "max_batch_size: 64" in (tmp_path / "repo" / "ensemble" / "config.pbtxt").read_text()
    assert missing.returncode == 4 and "fetching" in missing.stderr and "sources/" in missing.stderr


def _fill(tmp_path: Path, tar: Path, values: dict | None = None) -> subprocess.CompletedProcess:
    if values is None:
        values = json.loads(engine(T4_08).files["envkit/fill_triton_repo.json"])
    (tmp_path / "values.json").write_text(json.dumps(values))
    return subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "values.json"), "--archive", str(tar),
                           "--out", str(tmp_path / "repo")], capture_output=True, text=True)


@pytest.mark.parametrize("kw, says", [
    ({"record": "0" * 40}, f"the archive of commit {'0' * 40}, not {TRTLLM_COMMIT}"),
    ({"link": "ensemble/1/passwd"}, "is a link, not a file"),
])
def test_the_fill_script_refuses_another_commit_and_links(tmp_path, kw, says):
    ran = _fill(tmp_path, trtllm_archive(tmp_path / "a", **kw))
    assert ran.returncode == 2 and says in ran.stderr and ran.stderr.count("\n") == 1
    assert not (tmp_path / "repo").exists()


def test_the_fill_script_refuses_a_structural_parameter_left_unfilled(tmp_path):
    values = json.loads(engine(T4_08).files["envkit/fill_triton_repo.json"])
    del values["substitute"]["decoupled_mode"]
    ran = _fill(tmp_path, trtllm_archive(tmp_path / "a"), values)
    assert ran.returncode == 2 and "tensorrt_llm/config.pbtxt: no value for decoupled_mode" in ran.stderr


def test_the_fill_script_refuses_an_archive_without_the_model_directories(tmp_path):
    tar = archive(tmp_path / "a" / "x.tar.gz", "tensorrtllm_backend", TRTLLM_COMMIT, "all_models/gpt", {"gpt/config.pbtxt": ""})
    ran = _fill(tmp_path, tar)
    assert ran.returncode == 2 and "has no all_models/inflight_batcher_llm/ensemble" in ran.stderr


@pytest.mark.skipif(not os.environ.get("ENVKIT_TRITON_ARCHIVES"), reason="ENVKIT_TRITON_ARCHIVES=DIR holds the real archives")
@pytest.mark.parametrize("flags", [T4_08, {"gpu": "V100", "engine": "triton-trtllm", "trtllm": "0.14.0"},
                                   {"gpu": "H100", "engine": "triton-trtllm", "trtllm": "0.19.0"}, FT])
def test_the_real_archives_fill_with_nothing_structural_left(tmp_path, flags):
    from envkit.inimage.fill_triton_repo import unfilled_structural

    values = json.loads(engine(flags).files["envkit/fill_triton_repo.json"])
    ran = _fill(tmp_path, Path(os.environ["ENVKIT_TRITON_ARCHIVES"]) / values["archive"]["name"], values)
    assert ran.returncode == 0, ran.stderr
    configs = list((tmp_path / "repo").rglob("config.pbtxt"))
    assert len(configs) == 4 and all(unfilled_structural(p.read_text()) == [] for p in configs)
