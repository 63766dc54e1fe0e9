"""`envkit generate` as users run it: files written all at once, plans, locks, one-line errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
H200 = ["--gpu", "H200", "--cuda", "13.0", "--flash-attn", "2.7.4.post1", "--kernels", "layer_norm,rotary"]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def _one_line_error(p: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("envkit: error: ") and "(fix: " in lines[0], p.stderr
    return lines[0]


def test_generate_writes_the_build_context(tmp_path):
    out = tmp_path / "ctx"
    p = run("generate", *H200, "-o", str(out))
    assert p.returncode == 0, p.stderr
    names = sorted(str(f.relative_to(out)) for f in out.rglob("*") if f.is_file())
    assert names == [".dockerignore", "Dockerfile", "envkit.lock.json", "envkit.plan.json", "envkit/.generated", "envkit/build_flash_attn.py",
                     "envkit/selftest.py", "envkit/solution.json"]
    text = (out / "Dockerfile").read_text()
    assert "FROM docker.io/nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04 AS build" in text
    assert "FROM docker.io/nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04 AS runtime" in text
    assert '--targets layer_norm,rotary --arch-list "9.0"' in text
    runtime = text.split("AS runtime", 1)[1]
    assert "build_flash_attn" not in runtime and "build-essential" not in runtime
    label = json.loads(json.loads('"' + text.split('io.envkit.solution="', 1)[1].split('"\nCMD', 1)[0] + '"'))
    assert label == json.loads((out / "envkit" / "solution.json").read_text())
    assert label["torch"]["pin"] == "2.14.1+cu130"


def test_dry_run_shows_the_plan_and_writes_nothing(tmp_path):
    out = tmp_path / "ctx"
    p = run("generate", *H200, "-o", str(out), "--dry-run")
    assert p.returncode == 0, p.stderr
    assert not out.exists()
    assert "stage build" in p.stdout and "stage runtime" in p.stdout and "why" in p.stdout
    assert "sources/flash_attn-2.7.4.post1.tar.gz" in p.stdout


def test_plan_json_is_stable_and_machine_readable(tmp_path):
    p = run("generate", *H200, "--dry-run", "--json")
    doc = json.loads(p.stdout)
    assert doc["schema"] == 1 and doc["out"] is None
    assert [s["name"] for s in doc["stages"]] == ["build", "runtime"]
    assert [st["id"] for st in doc["stages"][0]["steps"]] == ["build-apt", "build-venv", "build-tools", "build-torch",
                                                              "build-flash-attn", "build-kernels"]
    assert run("generate", *H200, "--dry-run", "--json").stdout == p.stdout


def test_lock_replays_to_the_same_bytes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run("generate", *H200, "-o", str(a)).returncode == 0
    p = run("generate", "--lock", str(a / "envkit.lock.json"), "-o", str(b))
    assert p.returncode == 0, p.stderr
    for name in ("envkit.plan.json", "envkit/solution.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert (a / "Dockerfile").read_text().split("\n", 3)[3] == (b / "Dockerfile").read_text().split("\n", 3)[3]


def test_a_lock_that_no_longer_resolves_the_same_is_refused(tmp_path):
    a = tmp_path / "a"
    assert run("generate", *H200, "-o", str(a)).returncode == 0
    lock = json.loads((a / "envkit.lock.json").read_text())
    lock["solution"]["torch"]["pin"] = "2.13.0+cu130"
    (a / "envkit.lock.json").write_text(json.dumps(lock))
    p = run("generate", "--lock", str(a / "envkit.lock.json"), "-o", str(tmp_path / "b"))
    assert p.returncode == 2
    assert "resolves differently" in _one_line_error(p) and "torch" in p.stderr
    assert not (tmp_path / "b").exists()


def test_lock_and_resolve_flags_together_are_refused(tmp_path):
    p = run("generate", "--lock", "x.json", "--gpu", "H200")
    assert p.returncode == 2 and "cannot be combined" in _one_line_error(p)


def test_a_directory_envkit_did_not_write_is_not_overwritten(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    p = run("generate", *H200, "-o", str(out))
    assert p.returncode == 2 and "did not write" in _one_line_error(p)
    assert (out / "notes.txt").read_text() == "keep me" and not (out / "Dockerfile").exists()


def test_regenerating_in_place_keeps_user_files_and_drops_only_stale_generated_ones(tmp_path):
    ctx = tmp_path / "ctx"
    assert run("generate", *H200, "-o", str(ctx)).returncode == 0
    (ctx / "NOTES.md").write_text("models/\n")
    (ctx / "sources").mkdir()
    (ctx / "sources" / "flash_attn-2.7.4.post1.tar.gz").write_bytes(b"sdist")
    p = run("generate", "--lock", "envkit.lock.json", "-o", ".", cwd=ctx)
    assert p.returncode == 0, p.stderr
    p = run("generate", "--platform", "cpu", "--torch", "2.13.0", "-o", ".", cwd=ctx)
    assert p.returncode == 0, p.stderr
    assert (ctx / "NOTES.md").read_text() == "models/\n"
    assert (ctx / "sources" / "flash_attn-2.7.4.post1.tar.gz").read_bytes() == b"sdist"
    assert not (ctx / "envkit" / "build_flash_attn.py").exists()  # generated before, not needed now
    assert "torch==2.13.0+cpu" in (ctx / "Dockerfile").read_text()


def test_unwritable_output_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    p = run("generate", *H200, "-o", str(tmp_path / "afile" / "sub"))
    assert p.returncode == 2 and "cannot write" in _one_line_error(p)


def test_regeneration_keeps_carried_artifacts(tmp_path):
    out = tmp_path / "ctx"
    assert run("generate", *H200, "-o", str(out)).returncode == 0
    (out / "sources").mkdir()
    (out / "sources" / "flash_attn-2.7.4.post1.tar.gz").write_bytes(b"sdist")
    assert run("generate", *H200, "--python", "3.12", "-o", str(out)).returncode == 0
    assert (out / "sources" / "flash_attn-2.7.4.post1.tar.gz").read_bytes() == b"sdist"


def test_a_url_the_site_does_not_mirror_is_refused_naming_the_step(tmp_path):
    site = tmp_path / "SITE.toml"
    site.write_text('[apt]\nmirror = "http://10.1.1.1/ubuntu"\n[pip]\nindex_url = "http://10.1.1.1/simple"\n')
    p = run("generate", *H200, "--mirror", str(site), "-o", str(tmp_path / "o"))
    assert p.returncode == 2
    assert "step `build-torch` needs https://download.pytorch.org/whl/cu130" in _one_line_error(p)
    assert not (tmp_path / "o").exists()


def test_bad_site_file_is_one_line(tmp_path):
    site = tmp_path / "SITE.toml"
    site.write_text('[pip]\nindex_url = "http://u:p@10.1.1.1/simple"\n')
    p = run("generate", *H200, "--mirror", str(site), "--dry-run")
    assert p.returncode == 2 and "credentials" in _one_line_error(p)
    p = run("generate", *H200, "--mirror", str(tmp_path / "missing.toml"), "--dry-run")
    assert p.returncode == 2 and "cannot read site file" in _one_line_error(p)


def test_no_solution_exits_1_with_the_conflict():
    p = run("generate", "--gpu", "V100", "--flash-attn", "2", "--json", "--dry-run")
    assert p.returncode == 1
    assert json.loads(p.stdout)["conflicts"][0]["rule"] == "flash-attn.gpu-arch"


def test_generate_toolkit_pip_flag_and_its_one_line_refusal(tmp_path):
    """Issue 15: --toolkit pip starts both stages from ubuntu24.04's own image; on CUDA 12.8 it is one line, exit 2."""
    p = run("generate", "--gpu", "H200", "--cuda", "13.0", "--torch", "2.11.0", "--toolkit", "pip", "-o", "-")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("FROM docker.io/library/ubuntu:24.04 AS") == 2 and "--toolkit=pip" in p.stdout
    assert "nvidia-cuda-nvcc==13.0.88" in p.stdout and "ENV CUDA_HOME=/usr/local/cuda" in p.stdout
    bad = run("generate", "--gpu", "H200", "--cuda", "12.8", "--toolkit", "pip", "-o", str(tmp_path / "ctx"))
    assert bad.returncode == 2 and "no nvcc" in _one_line_error(bad) and not (tmp_path / "ctx").exists()


def test_bundle_and_build_take_toolkit_and_refuse_it_where_it_cannot_apply(tmp_path):
    """Issue 15: bundle and build (mirror mode) hand --toolkit to the planner (12.8's refusal proves it, before any
    download or engine); an offline build of a bundle refuses it (the bundle's Dockerfile is made already)."""
    env_site = str(ROOT / "tests/golden/sites/intranet.toml")
    bundle = run("bundle", "--gpu", "H200", "--cuda", "12.8", "--toolkit", "pip", "-o", str(tmp_path / "b"))
    assert bundle.returncode == 2 and "no nvcc" in _one_line_error(bundle) and not (tmp_path / "b").exists()
    build = run("build", "--gpu", "H200", "--cuda", "12.8", "--toolkit", "pip", "--mirror", env_site, "-o", str(tmp_path / "c"))
    assert build.returncode == 2 and "no nvcc" in _one_line_error(build) and not (tmp_path / "c").exists()
    (tmp_path / "d").mkdir()
    offline = run("build", "--offline", "--bundle", str(tmp_path / "d"), "--toolkit", "pip")
    assert offline.returncode == 2 and "--toolkit" in _one_line_error(offline)
