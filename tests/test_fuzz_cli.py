"""Fuzzing the command line (issue 14): resolve, generate --dry-run and doctor --for with values drawn from the matrix,
mixed with hostile ones (Unicode digits, control characters, rich markup, 5000-digit numbers, near-miss spellings),
and the command line's own grammar. Every run holds `fuzzing.holds`: a documented exit code, never a traceback, one
error line; with --json one document whose `ok` matches. A solved stack honours every constraint it was given: no
flag is silently dropped (fuzz report item 9)."""
from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from envkit.config import matrix_file
from envkit.model.flags import FLAG, FLAG_ORDER
from fuzzing import HOSTILE, fuzz_settings, holds, hostile_text, run

M = matrix_file.load()
POOLS: dict[str, list[str]] = {
    "gpu": sorted({g.name for g in M.gpus}) + ["sm_80", "sm_90", "gfx942", "gfx90a", "auto"],
    "driver": ["450.80.02", "470.82.01", "525.60.13", "535.104.05", "550.54.15", "570.124.06", "580.65.06", "410.48"],
    "platform": ["cuda", "rocm", "dtk", "cpu"],
    "platform_arch": ["x86_64", "aarch64", "arm64", "amd64", "riscv64"],
    "cuda": sorted({str(c.version) for c in M.cuda}) + ["12", "11", "cu124", "cu118"],
    "rocm": sorted({str(r.version) for r in M.rocm}) + ["6", "rocm6.2"],
    "dtk": sorted({str(d.version) for d in M.dtk}) + ["24"],
    "python": sorted({str(p.version) for p in M.python}) + ["3", "3.11.4"],
    "torch": sorted({str(t.version) for t in M.torch})[-25:] + ["2", "2.4", ">=2.3,<2.5", "2.4.1+cu124", "2.13.0+cpu"],
    "flash_attn": sorted({str(f.version) for f in M.flash_attn})[-15:] + ["2", "2.7"],
    "vllm": sorted({str(v.version) for v in M.vllm})[-15:] + ["0.6", ">=0.8"],
    "flash_attn_profile": ["full", "serving", "serving:128", "serving:64,128:bf16", "serving:x", "fast"],
    "kernels": ["layer_norm", "rotary", "layer_norm,rotary"],
    "kernels_from": ["2.7.4.post1", "2.6.3", "2.8.3", "2.7"],
    "engine": ["torch", "vllm", "trtllm", "triton-trtllm", "triton-vllm", "fastertransformer", "tritn", "fastllm", "fastllm==0.1.7.1"],
    "engine_build": ["wheel", "source", "sorce"],
    "trtllm": sorted({str(r.version) for r in M.trtllm}) + ["0.8", ">=0.15", "1"],
    "triton": sorted({t.release for t in M.triton})[-10:] + ["23.10", "2405", "24.5"],
}


def flag_values(hostile_share: int = 3) -> st.SearchStrategy[dict[str, str]]:
    """Each resolve flag absent, a value users would give, or (about one time in `hostile_share`) a hostile one."""
    def value(key: str) -> st.SearchStrategy[str]:
        return st.one_of(*[st.sampled_from(POOLS[key])] * (hostile_share - 1), hostile_text())
    return st.fixed_dictionaries({}, optional={k: value(k) for k in FLAG_ORDER})


def argv_of(flags: dict[str, str]) -> list[str]:
    out: list[str] = []
    for key, value in flags.items():
        out += [FLAG[key], value]
    return out


def _release(text: str) -> tuple[int, ...] | None:
    text = re.sub(r"^(cu|rocm)", "", text.strip())
    if re.fullmatch(r"[0-9]{3}", text) and text.startswith("1"):  # cu124 -> 12.4
        text = f"{text[:2]}.{text[2]}"
    return tuple(int(p) for p in text.split(".")) if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text) else None


def honoured(flags: dict[str, str], doc: dict) -> None:
    """What a solved stack must show for each constraint it was given."""
    s = doc["solution"]
    if s is None:  # a container engine's answer
        e = doc["engine"]
        assert e["engine"] == flags["engine"].strip().lower(), (flags, e["engine"])
        if "triton" in flags and e["triton"] is not None:
            assert e["triton"]["release"] == flags["triton"].strip()
        return
    toolkits = {k: flags[k] for k in ("cuda", "rocm", "dtk") if k in flags}
    assert len(toolkits) <= 1, f"two toolkits {toolkits} solved as {s['platform']}"
    for kind, given in toolkits.items():
        assert s["platform"] == kind and s["toolkit"]["kind"] == kind, f"--{kind} {given!r} dropped: {s['platform']}"
        want = _release(given)
        if want is not None:
            got = Version(s["toolkit"]["version"]).release
            assert got[: len(want)] == want, f"--{kind} {given!r} answered {s['toolkit']['version']}"
    if flags.get("platform", "").strip() in POOLS["platform"]:
        assert s["platform"] == flags["platform"].strip()
    if "python" in flags and re.fullmatch(r"3\.[0-9]+", flags["python"].strip()):
        assert s["python"] == flags["python"].strip()
    torch = flags.get("torch", "").strip()
    if re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", torch):
        assert Version(s["torch"]["version"]) == Version(torch)
    if s["platform"] == "cpu":
        assert not toolkits
    if flags.get("engine_build", "").strip().lower() == "source":
        assert s["engine"]["build"]["from"] == "source", s["engine"]


@fuzz_settings(600)
@given(flag_values())
def test_fuzz_resolve_json(flags):
    ran = run(["resolve", *argv_of(flags), "--json"], "resolve --json")
    holds(ran)
    if ran.code == 0:
        honoured(flags, ran.json())


@fuzz_settings(200)
@given(flag_values(hostile_share=2))
def test_fuzz_resolve_for_people(flags):
    """The tables for people: markup in a value is printed as text, never interpreted or crashing."""
    ran = run(["resolve", *argv_of(flags)], "resolve")
    holds(ran, as_json=False)


@fuzz_settings(150)
@given(flag_values())
def test_fuzz_generate_dry_run(flags):
    ran = run(["generate", *argv_of(flags), "--dry-run", "--json"], "generate --dry-run")
    holds(ran)
    if ran.code == 0:
        text = json.dumps(ran.json())
        assert "\n" not in "".join(flags.values()) or ran.code != 0, "a newline in a flag value was accepted"
        assert text


@pytest.fixture(scope="module")
def facts_file(tmp_path_factory):
    ran = run(["doctor", "--json"], "doctor")
    holds(ran)
    path = tmp_path_factory.mktemp("facts") / "facts.json"
    path.write_text(json.dumps(ran.json()["facts"]), encoding="utf-8")
    return str(path)


@fuzz_settings(150)
@given(flags=flag_values())
def test_fuzz_doctor_for(facts_file, flags):
    import shlex
    text = " ".join(f"{FLAG[k]} {shlex.quote(v)}" for k, v in flags.items())
    ran = run(["doctor", "--facts", facts_file, "--for", text, "--json"], "doctor --for")
    holds(ran)
    if ran.code == 2:
        assert "--facts" not in ran.err.split("(fix:")[0] or "--for" in ran.err, "a bad --for blamed on the facts file"


COMMAND_LINES = [["resolve"], ["generate", "--dry-run"], ["build", "--offline", "--dry-run"], ["doctor"], ["inspect"],
                 ["matrix", "show"], ["matrix", "check"], ["matrix", "export"], ["matrix"], []]
TOKENS = ["--json", "--gpu", "--gpus", "-g", "--cuda", "--jobs", "0", "-j", "--network", "host", "foo", "--matrix",
          "/nonexistent.toml", "--facts", "--for", "--format", "github", "--version", "-q", "-v", "--progress", "none",
          "--no-color", "--tag", "bad tag!", "--concurrency", "1,x", "--num-prompts", "-5", "--", "-", "--help=1",
          "--json=true", "--kernels", "H100", "12.4"] + HOSTILE[:30]


@fuzz_settings(300)
@given(st.sampled_from(COMMAND_LINES), st.lists(st.sampled_from(TOKENS), max_size=6))
def test_fuzz_command_line_grammar(command, tokens):
    """Any command with any tokens: a usage mistake is one envkit line and exit 2, like envkit's own errors.
    (No engine is reachable here: DOCKER_HOST points at a socket that does not exist.)"""
    if "--help" in tokens or "-h" in tokens:
        return
    ran = run([*command, *tokens], "command line")
    holds(ran, as_json=False)


@pytest.fixture(autouse=True)
def _no_engine_and_a_scratch_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/envkit-fuzz.sock")
    monkeypatch.chdir(tmp_path)


def _snapshot(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@fuzz_settings(120)
@given(flags=flag_values())
def test_fuzz_generate_writes_the_whole_context_or_leaves_the_old_one(tmp_path, flags):
    """Nothing half-written (fuzz report item 7): over one context directory, each run either replaces the whole
    context by the one its flags resolve to, or leaves the previous context byte for byte."""
    ctx = tmp_path / "ctx"
    if not ctx.exists():
        holds(run(["generate", "--platform", "cpu", "-o", str(ctx)], "generate -o"))
    before = _snapshot(ctx)
    ran = run(["generate", *argv_of(flags), "-o", str(ctx)], "generate -o")
    holds(ran, as_json=False)
    after = _snapshot(ctx)
    if ran.code != 0:
        assert after == before, f"exit {ran.code} changed the context"
        return
    lock = json.loads(after["envkit.lock.json"])
    assert json.loads(after["envkit/solution.json"]) == lock["solution"]
    assert f"# Stack: " in after["Dockerfile"].decode()
    assert not [p for p in after if ".envkit-staging" in p]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".envkit-staging")]
