"""The JSON Schemas shipped in envkit/data/schemas/: each is a valid draft 2020-12 schema, they refer only to
each other, and the documents envkit really prints and writes follow them (run here: resolve, generate and its
context files, bundle's no-solution answer, build --all --dry-run, the self-test, the serving sweep against a
loopback server, doctor, matrix check/refresh/export), as do the recorded documents in docs/ and the user files
in tests/ and the guides (docs/guide/). Wrong types and missing keys are refused; the site and project schemas refuse what
their parsers refuse.

Documents that need a container engine or a GPU (bundle, build, inspect, selftest --image) are validated in the
integration tests through schema_check.validate; here only a sample of each, written from the code that prints it."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator, ValidationError

import schema_check
from schema_check import BASE, errors, load, names, validate
from servers import EventStream, serve

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
SITES = ROOT / "tests" / "golden" / "sites"
EXPORT_PROJECT = ROOT / "tests" / "golden" / "export" / "envkit.toml"

# The schema of each document (the docs/json-schemas.md table); site and project describe TOML files.
DOCUMENTS = {"resolve", "generate", "plan", "lock", "solution", "bundle", "manifest", "build", "selftest", "sweep", "doctor",
             "facts", "inspect", "matrix-check", "matrix-refresh", "matrix-export", "error", "matrix-show", "serve", "push", "compare", "run-plan"}
USER_FILES = {"site", "project"}
WITHOUT_VERSION_KEY = {"solution", "site", "project"}  # the solution sits inside versioned documents; the TOML files have none


def envkit(*args: str, cwd: Path = ROOT, codes: tuple = (0,)) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "envkit", *args], capture_output=True, text=True, timeout=300, cwd=cwd)
    assert p.returncode in codes, f"envkit {' '.join(args)}: exit {p.returncode}\n{p.stderr[-3000:]}"
    return p


def envkit_json(*args: str, cwd: Path = ROOT, codes: tuple = (0,)) -> dict:
    return json.loads(envkit(*args, cwd=cwd, codes=codes).stdout)


def strict(doc: dict, name: str) -> dict:
    """Valid, and refused once its version key is missing, another version, or a string."""
    validate(doc, name)
    if name not in WITHOUT_VERSION_KEY:
        assert doc.get("schema") == 1, f"{name}: the document has no schema key 1"
        for bad in ({k: v for k, v in doc.items() if k != "schema"}, {**doc, "schema": 2}, {**doc, "schema": "1"},
                    {**doc, "schema": True}):
            assert errors(bad, name), f"{name}: a document with schema={bad.get('schema', '(missing)')!r} was accepted"
    return doc


def refused(doc, name: str, why: str = "") -> None:
    found = errors(doc, name)
    assert found, f"{name}: an invalid document was accepted ({why})"
    with pytest.raises(ValidationError):
        validate(doc, name)


# ---------------------------------------------------------------- the schemas themselves

@pytest.mark.parametrize("name", names())
def test_every_schema_is_a_valid_draft_2020_12_schema_with_its_id(name):
    s = load(name)
    Draft202012Validator.check_schema(s)
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert s["$id"] == f"{BASE}{name}.schema.json"
    assert s["title"].strip() and len(s["description"]) > 40


def _refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def test_the_shipped_set_is_what_the_docs_table_lists():
    assert set(names()) == DOCUMENTS | USER_FILES | {"lock"}
    table = (ROOT / "docs" / "json-schemas.md").read_text(encoding="utf-8")
    for name in names():
        assert f"{name}.schema.json" in table, f"docs/json-schemas.md does not list {name}.schema.json"


def test_schemas_refer_only_to_each_other_and_every_reference_resolves():
    ids = {load(n)["$id"] for n in names()}
    resolver = schema_check.registry().resolver()
    seen = 0
    for name in names():
        s = load(name)
        assert "/work/" not in json.dumps(s) and "/home/" not in json.dumps(s)
        for r in _refs(s):
            seen += 1
            target = r if r.startswith("http") else (s["$id"] + r if r.startswith("#") else BASE + r)
            assert target.split("#")[0] in ids, f"{name}: $ref {r} leaves the shipped schemas"
            resolver.lookup(target)  # raises when the pointer names nothing
    assert seen > 10


def test_every_versioned_document_schema_requires_schema_1():
    for name in sorted(DOCUMENTS - WITHOUT_VERSION_KEY):
        def messages(errs):
            for e in errs:
                yield e.message
                yield from messages(e.context)

        found = set(messages(schema_check.validator(name).iter_errors({})))
        assert "'schema' is a required property" in found, name


# ---------------------------------------------------------------- resolve

def test_resolve_document_carries_the_toolkit_wheels_pinned_to_the_release():
    """Issue 15: the resolve document lists the CUDA release's toolkit wheels, each pinned (nvvm 13.5.37 broke ptxas)."""
    doc = strict(envkit_json("resolve", "--gpu", "H200", "--cuda", "13.0", "--torch", "2.11.0", "--json"), "resolve")
    wheels = doc["solution"]["toolkit"]["wheels"]
    assert {w["pin"] for w in wheels} == {"nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-runtime==13.0.88", "nvidia-cuda-cccl==13.0.85",
                                          "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88"}
    assert all(w["source"].startswith(f"pkg:pypi/{w['name']}@{w['version']} ") for w in wheels)
    validate(doc["solution"], "solution")
    for why, change in (("a wheel without its pin", lambda w: w.pop("pin")), ("an unknown key", lambda w: w.update(sha="x")),
                        ("a source that is not its PyPI page", lambda w: w.update(source="pip install")),
                        ("an unpinned requirement", lambda w: w.update(pin="nvidia-nvvm"))):
        broken = copy.deepcopy(doc)
        change(broken["solution"]["toolkit"]["wheels"][0])
        refused(broken, "resolve", why)
    broken = copy.deepcopy(doc)
    broken["solution"]["toolkit"]["wheels"] = []
    refused(broken, "resolve", "an empty wheel list (absent where not known)")
    old = envkit_json("resolve", "--gpu", "A100", "--cuda", "11.8", "--json")
    assert "wheels" not in old["solution"]["toolkit"]  # the matrix records no wheel set for 11.8: none is guessed


def test_resolve_documents_ok_and_no_solution():
    ok = strict(envkit_json("resolve", "--gpu", "RTX 4090", "--cuda", "11.8", "--torch", "2.1.2", "--vllm", "0.2.7", "--json"), "resolve")
    assert ok["ok"] is True and ok["solution"]["platform"] == "cuda"
    for args in (["--gpu", "MI300X", "--rocm", "6.2"], ["--gpu", "Z100L", "--dtk", "24.04"], ["--platform", "cpu"],
                 ["--gpu", "H200", "--cuda", "13.0", "--flash-attn", "2.7.4.post1", "--kernels", "layer_norm,rotary"]):
        assert strict(envkit_json("resolve", *args, "--json"), "resolve")["ok"] is True, args
    bad = strict(envkit_json("resolve", "--gpu", "V100", "--flash-attn", "2", "--json", codes=(1,)), "resolve")
    assert bad["ok"] is False and bad["conflicts"] and bad["suggestions"]
    # wrong types, missing keys, a shape that mixes the two
    refused({**ok, "ok": "true"}, "resolve", "ok as a string")
    refused({k: v for k, v in ok.items() if k != "warnings"}, "resolve", "no warnings")
    refused({**ok, "solution": None}, "resolve", "ok without a solution")
    refused({**bad, "conflicts": []}, "resolve", "no solution and no conflict")
    refused({**ok, "query": {"cuda": 11.8}}, "resolve", "a query value that is not a string")
    refused({**ok, "query": {"colour": "red"}}, "resolve", "an unknown flag")
    broken = copy.deepcopy(ok)
    broken["solution"]["platform"] = "tpu"
    refused(broken, "resolve", "platform tpu")
    broken = copy.deepcopy(bad)
    del broken["conflicts"][0]["fix"]
    refused(broken, "resolve", "a conflict without its fix")
    broken = copy.deepcopy(bad)
    broken["suggestions"][0]["drop"] = "gpu"
    refused(broken, "resolve", "a suggestion that names no flag")


def _cases():
    for path in sorted((ROOT / "tests" / "cases").glob("*.toml")):
        for case in tomllib.loads(path.read_text(encoding="utf-8"))["case"]:
            if case["expect"] in ("ok", "conflict"):
                yield path.stem, case


def test_every_resolver_case_answers_with_a_valid_document():
    """The resolver's whole range (tests/cases: every platform, conflict rule and suggestion), in process."""
    from envkit.config import matrix_file
    from envkit.core.resolve import parse_query, resolve

    m = matrix_file.load()
    bad, n, rules = [], 0, set()
    for stem, case in _cases():
        doc = json.loads(json.dumps(resolve(m, parse_query(m, **case["args"])).to_json()))
        n += 1
        rules |= {c["rule"] for c in doc["conflicts"]}
        bad += [f"{stem}:{case['id']}: {e}" for e in errors(doc, "resolve")]
        if doc["solution"] is not None:
            validate(doc["solution"], "solution")
    assert not bad, "\n".join(bad[:20])
    assert n >= 150 and len(rules) >= 10
    validate(doc, "resolve")


# ---------------------------------------------------------------- generate and the context it writes

GENERATE_CASES = {
    "seed-intranet": (["--gpu", "RTX A6000", "--cuda", "11.8", "--python", "3.8", "--torch", "2.1.2", "--flash-attn", "2.2.0",
                       "--kernels", "layer_norm,rotary", "--vllm", "0.2.7", "--mirror", str(SITES / "intranet.toml")]),
    "h200-cuda13-offline": ["--gpu", "H200", "--cuda", "13.0", "--flash-attn", "2.7.4.post1", "--kernels", "layer_norm,rotary", "--offline"],
    "h200-cuda12-vllm": ["--gpu", "H200", "--cuda", "12.8", "--flash-attn", "2.7.4.post1", "--vllm", "0.9", "--max-jobs", "4",
                         "--nvcc-threads", "2"],
    "rocm-mi300x": ["--gpu", "MI300X", "--rocm", "6.2"],
    "dtk-z100l": ["--gpu", "Z100L", "--dtk", "24.04", "--mirror", str(SITES / "dtk.toml")],
    "cpu-offline": ["--platform", "cpu", "--torch", "2.13.0", "--offline"],
}


def _label(dockerfile: str) -> dict:
    raw = dockerfile.split('io.envkit.solution="', 1)[1].split('"\n', 1)[0]
    return json.loads(json.loads('"' + raw.replace("\\$", "$") + '"'))


@pytest.mark.parametrize("case", sorted(GENERATE_CASES))
def test_generate_json_and_the_plan_lock_solution_and_label_it_writes(case, tmp_path):
    flags = GENERATE_CASES[case]
    out = tmp_path / "ctx"
    dry = strict(envkit_json("generate", *flags, "--dry-run", "--json"), "generate")
    assert dry["out"] is None and not out.exists()
    doc = strict(envkit_json("generate", *flags, "-o", str(out), "--json"), "generate")
    assert doc["out"] == str(out) and doc["files"] == dry["files"]
    plan = strict(json.loads((out / "envkit.plan.json").read_text()), "plan")
    lock = strict(json.loads((out / "envkit.lock.json").read_text()), "lock")
    solution = validate(json.loads((out / "envkit" / "solution.json").read_text()), "solution")
    label = validate(_label((out / "Dockerfile").read_text()), "solution")
    assert label == solution == lock["solution"]
    assert {k: v for k, v in doc.items() if k not in ("command", "out", "files")} == plan
    same_site = [f for i, f in enumerate(flags) if f in ("--offline", "--mirror") or (i > 0 and flags[i - 1] == "--mirror")]
    replay = strict(envkit_json("generate", "--lock", str(out / "envkit.lock.json"), "--dry-run", "--json", *same_site), "generate")
    assert replay["stack"] == plan["stack"]
    # the plan file is closed: generate's own keys do not belong in it, and its keys are typed
    refused({**plan, "command": doc["command"]}, "plan", "generate's command in the plan file")
    refused({**plan, "offline": "no"}, "plan", "offline as a string")
    refused({k: v for k, v in plan.items() if k != "stages"}, "plan", "no stages")
    broken = copy.deepcopy(plan)
    broken["stages"][0]["steps"][0]["network"] = "sometimes"
    refused(broken, "plan", "a step's network outside none|site|internet")
    refused({k: v for k, v in doc.items() if k != "files"}, "generate", "no files")
    refused({**lock, "matrix_sha256": "abc"}, "lock", "a short sha256")
    refused({k: v for k, v in lock.items() if k != "solution"}, "lock", "no solution")
    refused({**solution, "python": 3.11}, "solution", "python as a number")
    refused({k: v for k, v in solution.items() if k != "torch"}, "solution", "no torch")


def test_generate_and_bundle_print_resolves_no_solution_document(tmp_path):
    for cmd in (["generate", "--dry-run"], ["bundle", "-o", str(tmp_path / "b")]):
        doc = strict(envkit_json(*cmd, "--gpu", "V100", "--flash-attn", "2", "--json", codes=(1,)), cmd[0] if cmd[0] == "bundle" else "generate")
        validate(doc, "resolve")
        assert doc["ok"] is False and doc["conflicts"][0]["rule"] == "flash-attn.gpu-arch"
    assert not (tmp_path / "b").exists()


def test_the_manifest_the_bundle_writer_writes(tmp_path):
    """write_manifest (envkit bundle's last step) over a generated offline context with a fake saved image."""
    from envkit.adapters.bundle_dir import MANIFEST, verify, write_manifest

    out = tmp_path / "bundle"
    envkit("generate", "--platform", "cpu", "--torch", "2.13.0", "--offline", "-o", str(out))
    for c in json.loads((out / "envkit.plan.json").read_text())["context"]:  # what bundle would fetch, as stand-ins
        p = out / c["path"] / "stand-in" if c["path"].endswith("/") else out / c["path"]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"stand-in")
    (out / "images").mkdir()
    (out / "images" / "debian_bookworm-slim.tar").write_bytes(b"not really an image")
    write_manifest(out, [{"ref": "docker.io/library/debian:bookworm-slim", "file": "images/debian_bookworm-slim.tar",
                          "id": "sha256:" + "0" * 64}])
    doc = strict(json.loads((out / MANIFEST).read_text()), "manifest")
    assert verify(out) == [] and len(doc["files"]) > 5
    some = next(iter(doc["files"]))
    broken = copy.deepcopy(doc)
    broken["files"][some]["size"] = "5"
    refused(broken, "manifest", "a size as a string")
    broken = copy.deepcopy(doc)
    del broken["files"][some]["sha256"]
    refused(broken, "manifest", "a file without its sha256")


# ---------------------------------------------------------------- build --all (a dry run: preflight only)

def test_build_all_dry_run_document(tmp_path):
    (tmp_path / "envkit.toml").write_text(f'[defaults]\nmirror = "{SITES / "intranet.toml"}"\n\n'
                                          '[[target]]\nname = "cpu-a"\nplatform = "cpu"\ntorch = "2.13.0"\n')
    doc = strict(envkit_json("build", "--project", "envkit.toml", "--all", "--dry-run", "--json", cwd=tmp_path, codes=(0, 4)), "build")
    (t,) = doc["targets"]
    assert t["name"] == "cpu-a" and t["image"] == "envkit/envkit-cpu-a:latest"
    refused({**doc, "targets": []}, "build", "--all with no target row")
    refused({**doc, "targets": [{k: v for k, v in t.items() if k != "exit"}]}, "build", "a row without its exit status")


def test_build_dry_run_and_no_solution_documents(tmp_path):
    """A single build's --dry-run prints its document once the preflight passed (the preflight asks the Docker
    Engine the README's test command starts); with no solution, build prints resolve's no-solution document."""
    site = str(SITES / "intranet.toml")
    out = str(tmp_path / "ctx")
    doc = strict(envkit_json("build", "--mirror", site, "--platform", "cpu", "--torch", "2.13.0", "-o", out, "--dry-run", "--json"),
                 "build")
    assert doc["dry_run"] is True and doc["context"] == out
    refused({**doc, "dry_run": False}, "build", "a dry run that says it is not one")
    none = strict(envkit_json("build", "--mirror", site, "--gpu", "V100", "--flash-attn", "2", "-o", str(tmp_path / "x"), "--json",
                              codes=(1,)), "build")
    assert none["ok"] is False and none["conflicts"][0]["rule"] == "flash-attn.gpu-arch"
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------- selftest and the serving sweep

def test_selftest_document_here_and_from_the_in_image_script(tmp_path):
    doc = strict(envkit_json("selftest", "--quick", "--json", "--report", str(tmp_path / "rep"), codes=(0, 1)), "selftest")
    assert strict(json.loads((tmp_path / "rep" / "selftest.json").read_text()), "selftest")["checks"] == doc["checks"]
    p = subprocess.run([sys.executable, str(ROOT / "envkit" / "inimage" / "selftest.py"), "--quick", "--json"], capture_output=True,
                       text=True, timeout=600, cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    strict(json.loads(p.stdout), "selftest")
    refused({**doc, "ok": True, "checks": [{"name": "x", "ok": False, "detail": ""}]}, "selftest", "ok with a failed check")
    refused({**doc, "checks": [{"name": "x", "ok": "yes", "detail": ""}]}, "selftest", "a check's ok as a string")
    refused({k: v for k, v in doc.items() if k != "checks"}, "selftest", "no checks")


@pytest.mark.parametrize("path", sorted((ROOT / "docs" / "gpu" / "selftest-2026-11-30").glob("*.json")), ids=lambda p: p.name)
def test_recorded_gpu_selftest_documents(path):
    doc = strict(json.loads(path.read_text()), "selftest")
    assert doc["device"] == "cuda" and doc["decode"]["tokens_per_s"] > 0
    refused({**doc, "device": "tpu"}, "selftest", "a device outside cpu|cuda")
    for i in range(len(doc["models"][:1])):
        broken = copy.deepcopy(doc)
        broken["models"][i]["engine"] = "tensorrt"
        refused(broken, "selftest", "an engine outside hf|hf-static|vllm")
        broken = copy.deepcopy(doc)
        del broken["models"][i]["tokens_per_s"]
        refused(broken, "selftest", "a model row without tokens/s")


class _OpenAI(EventStream):
    """/v1/completions streaming three tokens and the usage chunk, as vLLM's server does."""
    chunks = [(0.0, b'data: {"choices": [{"text": "x"}]}\n\n')] * 3 + [
        (0.0, b'data: {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3}}\n\n'), (0.0, b"data: [DONE]\n\n")]


class _OutOfMemory(_OpenAI):
    """The warm-up (2 tokens) fits; the sweep's requests run out of memory."""
    def failure(self, request):
        return (500, b"CUDA out of memory") if request["max_tokens"] > 2 else None


def test_serving_sweep_document_and_its_report_file(tmp_path):
    with serve(_OpenAI) as srv:
        doc = strict(envkit_json("selftest", "--engine", f"openai:http://127.0.0.1:{srv.server_port}", "--concurrency", "1,2",
                                 "--num-prompts", "3", "--input-len", "4", "--output-len", "3", "--json", "--report", str(tmp_path)),
                     "sweep")
    assert doc["ok"] is True and [lv["concurrency"] for lv in doc["levels"]] == [1, 2]
    assert strict(json.loads((tmp_path / "sweep.json").read_text()), "sweep") == doc
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "hello there", "output_tokens": 3}\n')
    with serve(_OutOfMemory) as srv:
        failed = strict(envkit_json("selftest", "--engine", f"openai:http://127.0.0.1:{srv.server_port}", "--concurrency", "2",
                                    "--num-prompts", "2", "--dataset", str(data), "--json", codes=(1,)), "sweep")
    assert failed["ok"] is False and failed["input_len"] is None and failed["levels"][0]["out_of_memory"] is True
    strict(json.loads((ROOT / "docs" / "serving-cpu" / "sweep.json").read_text()), "sweep")
    refused({**doc, "levels": []}, "sweep", "no level")
    broken = copy.deepcopy(doc)
    broken["levels"][0]["mean_ttft_ms"] = "fast"
    refused(broken, "sweep", "a latency as a string")
    broken = copy.deepcopy(doc)
    del broken["levels"][0]["failed"]
    refused(broken, "sweep", "a level without its failures")


def test_compare_document_against_two_loopback_servers(tmp_path):
    """envkit compare --json: a completions server and one whose requests run out of memory after the warm-up."""
    with serve(_OpenAI) as a, serve(_OutOfMemory) as b:
        doc = strict(envkit_json("compare", "--engine", f"vllm=openai:http://127.0.0.1:{a.server_port}", "--engine",
                                 f"other=openai:http://127.0.0.1:{b.server_port}", "--concurrency", "2", "--num-prompts", "2",
                                 "--input-len", "4", "--output-len", "3", "--dtype", "float32", "--json"), "compare")
    assert doc["ok"] is True and doc["concurrency"] == [1, 2] and doc["model"] == "tiny"    # out of memory is a finding
    vllm, other = doc["engines"]
    assert vllm["single_batch"]["output_tokens"] == 6 and vllm["single_batch"]["output_chars"] == 6
    assert other["single_batch"]["tokens_per_s"] is None and other["levels"][1]["out_of_memory"] is True
    refused({**doc, "engines": []}, "compare", "no engine")
    broken = copy.deepcopy(doc)
    broken["engines"][0]["kind"] = "triton"
    refused(broken, "compare", "an unknown kind")
    broken = copy.deepcopy(doc)
    del broken["engines"][0]["single_batch"]["chars_per_s"]
    refused(broken, "compare", "a single batch without characters/s")
    broken = copy.deepcopy(doc)
    broken["engines"][0]["levels"] = []
    refused(broken, "compare", "a server without levels")
    hf = {**copy.deepcopy(vllm), "kind": "hf", "target": "/models/tiny", "endpoint": None, "device": "cpu", "levels": []}
    validate({**doc, "engines": [hf]}, "compare")
    refused({**doc, "engines": [{**hf, "levels": vllm["levels"]}]}, "compare", "hf with a concurrency sweep")


# ---------------------------------------------------------------- doctor and the probe's facts

RECORD = {"schema": 1, "nvidia": {"driver": "470.82.01", "cuda_driver": "11.4", "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "cc": "8.0"}]},
          "python": {"packages": {"torch": "2.4.1"}, "torch": "2.4.1+cu124", "torch_cuda": "12.4"}}


def test_doctor_documents_on_recorded_facts_this_host_and_for(tmp_path):
    f = tmp_path / "facts.json"
    f.write_text(json.dumps(RECORD))
    doc = strict(envkit_json("doctor", "--facts", str(f), "--json", codes=(1,)), "doctor")
    assert doc["ok"] is False and doc["findings"][0]["rule"] == "driver.too-old" and doc["facts"] == RECORD
    recorded = ROOT / "docs" / "gpu" / "doctor" / "probe-deep.json"  # a real H200 host
    strict(json.loads(recorded.read_text()), "facts")
    strict(envkit_json("doctor", "--facts", str(recorded), "--for", "--torch 2.4 --flash-attn 2.6", "--json", codes=(0, 1)), "doctor")
    strict(json.loads((ROOT / "docs" / "gpu" / "doctor" / "doctor-deep.json").read_text()), "doctor")
    here = strict(envkit_json("doctor", "--json", codes=(0, 1)), "doctor")
    strict(here["facts"], "facts")
    probe = subprocess.run([sys.executable, str(ROOT / "envkit" / "inimage" / "probe.py")], capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    strict(json.loads(probe.stdout), "facts")
    # the ok flag follows the findings; severities and rules are closed forms
    refused({**doc, "ok": True}, "doctor", "ok with an error finding")
    broken = copy.deepcopy(doc)
    broken["findings"][0]["severity"] = "fatal"
    refused(broken, "doctor", "severity fatal")
    broken = copy.deepcopy(doc)
    del broken["findings"][0]["fix"]
    refused(broken, "doctor", "a finding without its fix")
    refused({k: v for k, v in doc.items() if k != "image_facts"}, "doctor", "no image_facts")


def test_deep_facts_of_a_cpu_torch_follow_the_schema():
    """A CPU wheel's torch.backends.cudnn.version() is None: the probe writes null (doctor --image --deep of a CPU
    image failed CI on this), and the schema takes it; a number where a string belongs is still refused."""
    cpu = {"schema": 1, "deep": {"import_errors": {}, "torch": "2.13.0+cpu", "torch_cuda": None, "torch_hip": None,
                                 "torch_cxx11abi": True, "torch_archs": [], "cuda_available": False, "torch_debug": False,
                                 "torch_cudnn": None, "xnnpack": True, "xpu_available": False, "cuda_module_loading": None}}
    strict(cpu, "facts")
    refused({**cpu, "deep": {**cpu["deep"], "torch_cudnn": 91900}}, "facts", "cudnn as a number")


@pytest.mark.parametrize("facts", ['{"nvidia": "x"}', '{"nvidia": {"gpus": "abc"}}', '{"nvidia": {"gpus": [{"name": "A", "cc": 8.0}]}}',
                                   '{"toolkit": {"ld_library_path": null}}', '{"deep": {"import_errors": []}}', "[1, 2]"])
def test_mistyped_facts_are_refused_by_the_schema(facts, tmp_path):
    """test_doctor.py's mistyped facts files; doctor itself refuses all but an empty list of import errors."""
    if "import_errors" not in facts:
        (tmp_path / "f.json").write_text(facts)
        assert envkit("doctor", "--facts", str(tmp_path / "f.json"), "--json", codes=(2,)).stderr.startswith("envkit: error:")
    doc = json.loads(facts)
    refused(doc if isinstance(doc, list) else {"schema": 1, **doc}, "facts", facts)


# ---------------------------------------------------------------- matrix check, refresh, export

def test_matrix_check_document():
    doc = strict(envkit_json("matrix", "check", "--json"), "matrix-check")
    assert doc["rows"]["torch"] > 0
    refused({**doc, "rows": {**doc["rows"], "tpu": 1}}, "matrix-check", "a table that does not exist")
    refused({**doc, "inferred": -1}, "matrix-check", "a negative count")


def test_matrix_refresh_documents_check_differs_and_rewrite(tmp_path):
    same = strict(envkit_json("matrix", "refresh", "--check", "--json"), "matrix-refresh")
    assert same["ok"] is True and same["differs"] == []
    text = (ROOT / "matrix.toml").read_text(encoding="utf-8")
    begin, end = text.index("# >>> derived: flash_attn"), text.index("# <<< derived: flash_attn")
    region = re.sub(r'python = "[^"]*"', 'python = ">=3.7"', text[begin:end], count=1)
    assert region != text[begin:end]
    m = tmp_path / "matrix.toml"
    m.write_text(text[:begin] + region + text[end:], encoding="utf-8")
    src = str(ROOT / "data" / "sources")
    differs = strict(envkit_json("matrix", "refresh", "--matrix", str(m), "--sources", src, "--check", "--json", codes=(1,)), "matrix-refresh")
    assert differs["ok"] is False and differs["differs"][0]["region"] == "flash_attn"
    rewritten = strict(envkit_json("matrix", "refresh", "--matrix", str(m), "--sources", src, "--json"), "matrix-refresh")
    assert rewritten["rewritten"] == [{"region": "flash_attn", "rows": 1}]
    refused({**same, "ok": False}, "matrix-refresh", "not ok with nothing that differs")
    refused({**differs, "ok": True}, "matrix-refresh", "ok while a region differs")
    refused({**rewritten, "rewritten": [{"region": "pytorch", "rows": 1}]}, "matrix-refresh", "an unknown region")
    refused({**same, "rewritten": []}, "matrix-refresh", "both shapes at once")


def test_matrix_export_json_documents(tmp_path):
    doc = strict(json.loads(envkit("matrix", "export", "--format", "json", "--project", str(EXPORT_PROJECT.relative_to(ROOT))).stdout),
                 "matrix-export")
    assert doc == json.loads((ROOT / "tests" / "golden" / "export" / "targets.json").read_text())
    guide = tmp_path / "envkit.toml"
    guide.write_text(_guide_block("ci.md", "[[target]]"))
    strict(json.loads(envkit("matrix", "export", "--format", "json", "--project", str(guide)).stdout), "matrix-export")
    broken = copy.deepcopy(doc)
    broken["targets"][0]["mirror"] = "site.toml"  # the offline target
    refused(broken, "matrix-export", "an offline target with a mirror")
    broken = copy.deepcopy(doc)
    broken["targets"][1]["flags"]["torch"] = 2.1
    refused(broken, "matrix-export", "a flag that is not a string")


# ---------------------------------------------------------------- documents that need an engine or a GPU: samples
# The integration tests (tests/integration/) validate the real ones; these samples are written from the code that
# prints them (envkit/cli, envkit/app) so the schemas are exercised, and broken, in every run.

BUNDLE_SAMPLE = {"schema": 1, "ok": True, "out": "envkit-bundle", "complete_already": False, "files": 14, "bytes": 912345678,
                 "downloaded": ["wheelhouse/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "debs/build/ (12 packages)",
                                "images/docker.io_library_debian_bookworm-slim.tar"], "reused": [],
                 "pip_host_sources": ["find-links = /opt/wheels (PIP_FIND_LINKS)"]}
BUILD_SAMPLE = {"schema": 1, "ok": True, "image": "envkit-test/cpu:offline", "id": "sha256:" + "ab" * 32, "size": 1234567890,
                "seconds": 81.4, "network": "none", "stages": [{"name": "build", "seconds": 70.2}, {"name": "runtime", "seconds": 11.2}]}


def test_bundle_and_build_samples():
    strict(BUNDLE_SAMPLE, "bundle")
    strict(BUILD_SAMPLE, "build")
    refused({**BUNDLE_SAMPLE, "files": "14"}, "bundle", "files as a string")
    refused({k: v for k, v in BUNDLE_SAMPLE.items() if k != "reused"}, "bundle", "no reused")
    refused({**BUNDLE_SAMPLE, "pip_host_sources": [""]}, "bundle", "an empty pip source line")
    refused({**BUILD_SAMPLE, "network": "wifi"}, "build", "a network outside none|bridge|host")
    refused({k: v for k, v in BUILD_SAMPLE.items() if k != "image"}, "build", "no image")
    refused({**BUILD_SAMPLE, "targets": []}, "build", "both shapes at once")


def test_inspect_sample_from_a_generated_label_and_doctors_findings(tmp_path):
    out = tmp_path / "ctx"
    envkit("generate", "--platform", "cpu", "--torch", "2.13.0", "-o", str(out))
    sol = _label((out / "Dockerfile").read_text())
    doc = {"schema": 1, "ok": True, "image": "envkit-test/cpu:offline",
           "labels": {"org.opencontainers.image.title": "envkit cpu image", "io.envkit.version": "0.1.0"},
           "solution": sol, "findings": [{"severity": "info", "rule": "host.no-gpu", "seen": "no GPU found", "why": "GPU checks were skipped",
                                          "fix": "run envkit doctor on the GPU host", "source": "doc:envkit doctor"}]}
    strict(doc, "inspect")
    refused({**doc, "labels": {"io.envkit.version": 1}}, "inspect", "a label value that is not a string")
    refused({**doc, "solution": {**sol, "torch": None}}, "inspect", "a solution without torch")
    refused({**doc, "findings": [{**doc["findings"][0], "severity": "error"}]}, "inspect", "ok with an error finding")


@pytest.mark.parametrize("args", [
    ("--gpu", "H100", "--engine", "triton-trtllm", "--driver", "570.124.06"),
    ("--gpu", "H200", "--engine", "trtllm"),
    ("--gpu", "V100", "--engine", "fastertransformer", "--tp", "2"),
    ("--gpu", "H100", "--engine", "trtllm", "--trtllm", "0.20", "--from-wheel"),
    ("--gpu", "H100", "--engine", "triton-vllm"),
])
def test_generate_json_of_a_container_engine_and_its_plan(args, tmp_path):
    """generate --json of a container engine: its answer, its plan (every stage and step with its network) and the
    files, the plan equal to the envkit/engine.plan.json it wrote."""
    out = tmp_path / "ctx"
    doc = strict(envkit_json("generate", *args, "-o", str(out), "--json"), "generate")
    assert doc["plan"] == json.loads((out / "envkit" / "engine.plan.json").read_text())
    assert doc["plan"]["stages"][-1]["name"] == "runtime" and "envkit/engine.plan.json" in doc["files"]
    refused({**doc, "plan": {**doc["plan"], "stages": []}}, "generate", "a plan without stages")


@pytest.mark.parametrize("driver, gpus, rules", [
    ("570.124.06", (("NVIDIA H100 80GB HBM3", "9.0"),), ["image.engine-ok"]),
    ("535.104.05", (("NVIDIA H100 80GB HBM3", "9.0"),), ["image.engine-driver"]),
    ("570.124.06", (("Tesla T4", "7.5"),), ["image.engine-arch"]),
    (None, (), ["image.engine-no-gpu"]),
])
def test_inspect_of_a_container_engines_image_judges_its_label_on_the_host(driver, gpus, rules):
    """A container engine's image carries io.envkit.solution like every image envkit writes (resolve's engine document);
    inspect judges it against the host's driver and GPUs, and its document is valid."""
    from envkit.core.judge_image import engine_image_findings
    from envkit.model.host import GpuFact, Host

    dockerfile = envkit("generate", "--gpu", "H100", "--engine", "triton-trtllm", "--driver", "570.124.06", "-o", "-").stdout
    sol = _label(dockerfile)
    assert sol["engine"] == "triton-trtllm" and sol["min_driver"] == "570.124.06"
    host = Host(driver=driver, gpus=tuple(GpuFact(name, cc) for name, cc in gpus))
    findings = engine_image_findings(sol, host)
    assert [f.rule for f in findings] == rules
    ok = all(f.severity == "info" for f in findings)
    doc = {"schema": 1, "ok": ok, "image": "envkit/triton-trtllm:test",
           "labels": {"org.opencontainers.image.title": "envkit triton-trtllm image"},
           "solution": sol, "findings": [f.to_json() for f in findings]}
    strict(doc, "inspect")
    if rules == ["image.engine-driver"]:
        assert ">= 570.124.06" in findings[0].fix and "--driver 535.104.05" in findings[0].fix


def test_selftest_with_image_sample():
    """selftest --image adds gpus_passed, and a failed check when the engine could not pass the GPUs in."""
    doc = json.loads((ROOT / "docs" / "gpu" / "selftest-2026-11-30" / "quick.json").read_text())
    strict({**doc, "gpus_passed": True}, "selftest")
    no_gpus = {**doc, "gpus_passed": False, "ok": False,
               "checks": doc["checks"] + [{"name": "GPUs passed into the container", "ok": False, "detail": "no GPU runtime"}]}
    strict(no_gpus, "selftest")
    refused({**doc, "gpus_passed": "yes"}, "selftest", "gpus_passed as a string")


@pytest.mark.parametrize("platform, host", [
    ("cuda", {"nvidia_nodes": ("/dev/nvidiactl",), "nvidia_runtime": True}), ("cuda", {}),
    ("rocm", {"kfd": True, "dri": ("/dev/dri/renderD128",), "render_gids": (109,)}),
    ("dtk", {"kfd": True, "mkfd": True, "hyhal": True, "dri": ("/dev/dri/renderD128",)}), ("cpu", {}), (None, {})])
def test_run_plan_documents_for_every_vendor(platform, host):
    """--dry-run of selftest --image, doctor --image and serve; and the selftest document of a GPU image that carries
    its target, the GPUs it saw and its container."""
    from envkit.app.containers import PlannedRun
    from envkit.core.devices import container
    from envkit.inimage import selftest as script
    from envkit.model.container import DeviceHost

    spec = container("img:1", ["python", "/opt/envkit/selftest.py", "--json"], platform, DeviceHost(**host), dtk="24.04")
    sol = {"platform": platform, "gpu": {"name": "X", "arch": "gfx942" if platform in ("rocm", "dtk") else "sm_90"},
           "torch": {"pin": "2.11.0", "archs": ["gfx942"] if platform in ("rocm", "dtk") else ["9.0"]}}
    target = script.built_for(sol)
    strict(PlannedRun("envkit selftest --image", spec, target).to_json(), "run-plan")
    refused({**PlannedRun("envkit serve", spec, target).to_json(), "for": "envkit build"}, "run-plan", "another command")
    doc = json.loads((ROOT / "docs" / "gpu" / "selftest-2026-11-30" / "quick.json").read_text())
    if target is not None:
        seen = {"backend": "hip" if platform in ("rocm", "dtk") else "cuda", "devices": [], "nodes": []}
        check = script.target_check(target, seen)
        strict({**doc, "target": target, "gpus": seen, "checks": [*doc["checks"], check], "ok": False,
                "gpus_passed": False, "container": spec.to_json()}, "selftest")


# ---------------------------------------------------------------- the user files: SITE.toml and envkit.toml

def _guide_block(page: str, marker: str) -> str:
    text = (ROOT / "docs" / "guide" / page).read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    (block,) = [b for b in blocks if marker in b]
    return block


def _docstring_example(module) -> str:
    doc = module.__doc__
    lines = doc.split("\n\n", 1)[1]
    return textwrap.dedent(lines.split('"""')[0])


def _sites() -> dict[str, str]:
    from envkit.config import site_file

    out = {p.name: p.read_text(encoding="utf-8") for p in sorted(SITES.glob("*.toml"))}
    out["docs/guide/sites.md"] = _guide_block("sites.md", "[apt]")
    out["site_file.py docstring"] = _docstring_example(site_file)
    return out


def _projects() -> dict[str, str]:
    from envkit.config import project_file

    return {"golden export": EXPORT_PROJECT.read_text(encoding="utf-8"), "docs/guide/ci.md": _guide_block("ci.md", "[[target]]"),
            "project_file.py docstring": _docstring_example(project_file)}


@pytest.mark.parametrize("name", sorted(_sites()))
def test_site_schema_accepts_every_site_file(name, tmp_path):
    from envkit.config import site_file

    text = _sites()[name]
    raw = tomllib.loads(text)
    assert raw, name
    validate(raw, "site")
    site_file.parse(text, str(tmp_path / "SITE.toml"), read_file=lambda p: b"-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n")  # the parser agrees


BAD_SITES = [
    ("[mirrors]\napt = \"http://10.0.0.5/ubuntu\"\n", "unknown table"),
    ("[apt]\nmirrors = \"http://10.0.0.5/ubuntu\"\n", "unknown key `mirrors`"),
    ("[apt]\nremove_vendor_lists = \"yes\"\n", "true or false"),
    ("[apt]\nmirror = \"ftp://10.0.0.5/ubuntu\"\n", "http(s):// URL"),
    ("[apt]\nmirror = \"http://user:secret@10.0.0.5/ubuntu\"\n", "carries credentials"),
    ("[apt]\nmirror = \"http://10.0.0.5/ubuntu;rm\"\n", "may not hold"),
    ("[pip]\nindex_url = 5\n", "http(s):// URL"),
    ("[pip]\ntrusted_hosts = \"10.0.0.5\"\n", "list of strings"),
    ("[pip]\ntrusted_hosts = [\"http://10.0.0.5\"]\n", "not a host name"),
    ("[pip]\ntoken = \"abc\"\n", "looks like a credential"),
    ("[rewrite]\n\"https://github.com\" = \"github-mirror\"\n", "http(s):// URL"),
    ("[proxy]\nno_proxy = \"a b\"\n", "comma-separated"),
    ("[registry]\nprefix = \"https://registry.corp:5000\"\n", "without a scheme"),
    ("[images]\n\"nvidia/cuda:12.8\" = \"has space\"\n", "image reference"),
    ("[dtk]\nos = \"Ubuntu 20.04\"\n", "os like"),
    ("apt = \"http://10.0.0.5/ubuntu\"\n", "must be a table"),
]


@pytest.mark.parametrize("text,needle", BAD_SITES, ids=[n for _, n in BAD_SITES])
def test_site_schema_refuses_what_the_parser_refuses(text, needle):
    from envkit.config import site_file
    from envkit.errors import InputError

    with pytest.raises(InputError) as e:
        site_file.parse(text, "SITE.toml")
    assert needle in e.value.message
    refused(tomllib.loads(text), "site", needle)


@pytest.mark.parametrize("name", sorted(_projects()))
def test_project_schema_accepts_every_project_file(name, tmp_path):
    from envkit.config import project_file

    text = _projects()[name]
    validate(tomllib.loads(text), "project")
    assert project_file.parse(text, str(tmp_path / "envkit.toml")).targets  # the parser agrees


BAD_PROJECTS = [
    ("[[target]]\nname = \"A b\"\nplatform = \"cpu\"\noffline = true\n", "lower-case"),
    ("[[target]]\nname = \"a\"\nplatform = \"cpu\"\n", "neither offline nor against a site mirror"),
    ("[[target]]\nname = \"a\"\nfrobnicate = \"x\"\noffline = true\n", "unknown key"),
    ("[[target]]\nname = \"a\"\ntorch = 2.4\noffline = true\n", "must be a string"),
    ("[[target]]\nname = \"a\"\noffline = \"yes\"\n", "true or false"),
    ("[[target]]\nname = \"a\"\noffline = true\nmirror = \"SITE.toml\"\n", "exclude each other"),
    ("[[target]]\nname = \"a\"\noffline = true\ntag = \"no spaces allowed\"\n", "valid image tag"),
    ("[defaults]\nregistry = \"UPPER\"\n[[target]]\nname = \"a\"\noffline = true\n", "image name prefix"),
    ("[defaults]\nmirror = 3\n[[target]]\nname = \"a\"\n", "path string"),
    ("[defaults]\ncolour = \"red\"\n[[target]]\nname = \"a\"\noffline = true\n", "unknown key"),
    ("[targets]\nname = \"a\"\n", "unknown table"),
    ("", "no [[target]]"),
]


@pytest.mark.parametrize("text,needle", BAD_PROJECTS, ids=[n for _, n in BAD_PROJECTS])
def test_project_schema_refuses_what_the_parser_refuses(text, needle):
    from envkit.config import project_file
    from envkit.errors import InputError

    with pytest.raises(InputError) as e:
        project_file.parse(text, "envkit.toml")
    assert needle in e.value.message
    refused(tomllib.loads(text), "project", needle)


def test_a_target_with_a_mirror_needs_no_defaults_and_a_default_mirror_covers_every_target():
    validate(tomllib.loads('[[target]]\nname = "a"\nmirror = "SITE.toml"\n'), "project")
    validate(tomllib.loads('[defaults]\nmirror = "SITE.toml"\n[[target]]\nname = "a"\n[[target]]\nname = "b"\noffline = true\n'), "project")
    refused(tomllib.loads('[[target]]\nname = "a"\nplatform = "tpu"\noffline = true\n'), "project", "platform tpu")
    refused(tomllib.loads('[[target]]\nname = "a"\nkernels = "softmax"\noffline = true\n'), "project", "kernels softmax")


# ---------------------------------------------------------------- every schema is exercised

@pytest.mark.parametrize("args, kind, code", [
    (("resolve", "--gpus", "A100", "--json"), "usage", 2),
    (("resolve", "--gpu", "no-such-gpu", "--json"), "input", 2),
    (("resolve", "--gpu", "H100", "--matrix", "tests/no-such-matrix.toml", "--json"), "input", 2),
    (("doctor", "--facts", "tests/no-such-facts.json", "--json"), "input", 2),
])
def test_error_documents_on_stdout_with_json(args, kind, code):
    p = envkit(*args, codes=(code,))
    doc = json.loads(p.stdout)
    schema_check.validate(doc, "error")
    assert doc["error"]["kind"] == kind and doc["error"]["exit_code"] == code
    assert doc["error"]["message"] in p.stderr


def test_matrix_show_documents_every_table_and_one_by_its_cli_spelling():
    every = envkit_json("matrix", "show", "--json")
    strict(every, "matrix-show")
    assert set(every["tables"]) == {"cuda", "gpu", "torch", "rocm", "dtk", "flash_attn", "vllm", "python", "os"}
    for t in every["tables"].values():
        assert all(len(row) == len(t["columns"]) for row in t["rows"])
    one = envkit_json("matrix", "show", "flash-attn", "--json")
    strict(one, "matrix-show")
    assert list(one["tables"]) == ["flash_attn"] and one["tables"]["flash_attn"] == every["tables"]["flash_attn"]


def test_serve_and_push_documents_of_their_outcomes():
    """Issue 18: envkit serve's and push's JSON, from their outcome objects (the integration tests print real ones)."""
    from envkit.app.serving import Pushed, Running

    run = Running("envkit-test/serve:tiny", "envkit-serve-0123abcd", "envkit-serve-0123abcd", "http://172.18.0.2:8000", "tiny",
                  "a" * 64, "1000", False, 61.8)
    validate(run.to_json(), "serve")
    assert errors({**run.to_json(), "user": 1000}, "serve")
    pushed = Pushed("envkit-test/serve:tiny", "127.0.0.1:5000/envkit/tiny:v1", "sha256:" + "b" * 64, "tiny", "a" * 64)
    assert validate(pushed.to_json(), "push")["pull"] == "127.0.0.1:5000/envkit/tiny@sha256:" + "b" * 64
    assert errors({**pushed.to_json(), "digest": "latest"}, "push")


EXERCISED_BY = {
    "resolve": ["test_resolve_documents_ok_and_no_solution", "test_every_resolver_case_answers_with_a_valid_document"],
    "solution": ["test_generate_json_and_the_plan_lock_solution_and_label_it_writes", "test_every_resolver_case_answers_with_a_valid_document"],
    "generate": ["test_generate_json_and_the_plan_lock_solution_and_label_it_writes", "test_generate_and_bundle_print_resolves_no_solution_document"],
    "plan": ["test_generate_json_and_the_plan_lock_solution_and_label_it_writes"],
    "lock": ["test_generate_json_and_the_plan_lock_solution_and_label_it_writes"],
    "bundle": ["test_generate_and_bundle_print_resolves_no_solution_document", "test_bundle_and_build_samples"],
    "manifest": ["test_the_manifest_the_bundle_writer_writes"],
    "build": ["test_build_all_dry_run_document", "test_build_dry_run_and_no_solution_documents", "test_bundle_and_build_samples"],
    "selftest": ["test_selftest_document_here_and_from_the_in_image_script", "test_recorded_gpu_selftest_documents",
                 "test_selftest_with_image_sample"],
    "sweep": ["test_serving_sweep_document_and_its_report_file"],
    "compare": ["test_compare_document_against_two_loopback_servers"],
    "doctor": ["test_doctor_documents_on_recorded_facts_this_host_and_for"],
    "facts": ["test_doctor_documents_on_recorded_facts_this_host_and_for", "test_mistyped_facts_are_refused_by_the_schema"],
    "inspect": ["test_inspect_sample_from_a_generated_label_and_doctors_findings"],
    "matrix-check": ["test_matrix_check_document"],
    "matrix-refresh": ["test_matrix_refresh_documents_check_differs_and_rewrite"],
    "matrix-export": ["test_matrix_export_json_documents"],
    "error": ["test_error_documents_on_stdout_with_json"],
    "matrix-show": ["test_matrix_show_documents_every_table_and_one_by_its_cli_spelling"],
    "site": ["test_site_schema_accepts_every_site_file", "test_site_schema_refuses_what_the_parser_refuses"],
    "project": ["test_project_schema_accepts_every_project_file", "test_project_schema_refuses_what_the_parser_refuses"],
    "serve": ["test_serve_and_push_documents_of_their_outcomes"],
    "push": ["test_serve_and_push_documents_of_their_outcomes"],
    "run-plan": ["test_run_plan_documents_for_every_vendor"],
}
RAN: set[str] = set()


@pytest.fixture(autouse=True)
def _record(request):
    yield
    RAN.add(request.node.originalname)


def test_every_shipped_schema_has_tests_that_validate_against_it():
    assert set(EXERCISED_BY) == set(names())
    here = sys.modules[__name__]
    for name, tests in EXERCISED_BY.items():
        for t in tests:
            assert callable(getattr(here, t, None)), f"{name}: no test {t}"


def test_zz_every_schema_whose_tests_ran_was_validated_against():
    """Runs last (file order): each schema whose tests ran in this process saw at least one valid document."""
    ran = {name for name, tests in EXERCISED_BY.items() if set(tests) & RAN}
    assert ran, "no schema test ran before this one"
    assert not ran - schema_check.SEEN, f"never validated a document: {sorted(ran - schema_check.SEEN)}"


def test_the_schemas_name_the_resolve_flags_model_flags_declares():
    """The flags are declared once (envkit/model/flags.py); where a schema lists them, it lists exactly those."""
    from envkit.model.flags import FLAG, FLAG_ORDER

    def key_lists(node):
        if isinstance(node, dict):
            if "propertyNames" in node and "enum" in node["propertyNames"]:
                yield "keys", node["propertyNames"]["enum"]
            if "drop" in node.get("properties", {}):
                yield "options", node["properties"]["drop"]["enum"]
            for value in node.values():
                yield from key_lists(value)
        elif isinstance(node, list):
            for value in node:
                yield from key_lists(value)

    seen = {name: list(key_lists(load(name))) for name in ("resolve", "lock", "matrix-export", "project")}
    assert all(seen[name] for name in ("resolve", "lock", "matrix-export")), seen
    for name, lists in seen.items():
        for kind, values in lists:
            assert values == (list(FLAG_ORDER) if kind == "keys" else list(FLAG.values())), (name, kind)
    target = load("project")["properties"]["target"]["items"]["properties"]
    assert set(FLAG_ORDER) <= set(target) and set(target) - set(FLAG_ORDER) == {"name", "offline", "mirror", "tag", "runner", "serve", "served_model_name",
                                                                      "serve_args", "model_mount", "k8s", "tp", "max_batch_size"}
