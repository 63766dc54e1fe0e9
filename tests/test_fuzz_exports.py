"""The YAML exports (GitHub, GitLab, k8s) read back as exported by a YAML 1.2 reader too (fuzz report 3, D13).

GitHub Actions, GitLab and kubectl read YAML 1.2 (core schema), where `1e3` is a float and `0o17` an integer;
PyYAML writes and reads YAML 1.1, where both are strings. Hypothesis draws project files whose target names, runner
labels, tags, registry, namespace, node selector and tolerations are valid for the project file and look like other
YAML types (numbers, booleans, nulls, timestamps, sexagesimals, in both YAML versions' spellings), and a project
path of any printable text; every export must load, with ruamel.yaml (YAML 1.2) and with PyYAML (YAML 1.1), to
exactly the documents envkit built. The exports are made by the pure core (envkit/core/export.py, k8s.py) from the
parsed project file, so each case costs milliseconds; the CLI path of the same reproducers is
tests/test_hardening_files.py. Bounded (ENVKIT_FUZZ_EXAMPLES raises it; tests/fuzzing.py): well under 60 s.
"""
from __future__ import annotations

import json
import re
from typing import Any

import fuzzing
import yaml
from hypothesis import event, given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from envkit.config import project_file
from envkit.core import export as export_core
from envkit.core import k8s as k8s_core
from envkit.errors import InputError
from envkit.model.project import EnvkitRequirement

AREA = "export YAML (YAML 1.1 and 1.2 readers)"
YAML12 = YAML(typ="safe", pure=True)
INSTALL = EnvkitRequirement("pin", "envkit-gpu==0.1.0")

# plain scalars some YAML reader takes for another type: YAML 1.2 core, YAML 1.1 (PyYAML and go-yaml v2's y/n)
LOOKALIKES = ["1e3", "1E3", "1.5e3", "1e-3", "1.5e+3", "0o17", "0x1f", "0x1F", "0b101", "1_000", "1:20", "12:30:45",
              "2001-12-14", "2001-12-14t21-59-43", "0", "007", "-1", "123", "1.", "3.11", "nan", "NaN", "inf", "Inf",
              "null", "Null", "NULL", "true", "True", "FALSE", "yes", "Yes", "no", "NO", "on", "On", "off", "OFF",
              "y", "Y", "n", "N"]


def _fits(pattern: str) -> Any:
    """A lookalike that the field's own grammar admits, or a string drawn from that grammar."""
    compiled = re.compile(pattern)
    fitting = [v for v in LOOKALIKES if compiled.fullmatch(v)]
    return st.one_of(st.sampled_from(fitting), st.from_regex(compiled, fullmatch=True)) if fitting \
        else st.from_regex(compiled, fullmatch=True)


names = _fits(r"[a-z0-9][a-z0-9-]{0,20}")  # [[target]] name (shorter than its 63, to keep the names readable)
labels = _fits(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,15}")  # runner labels
tags = _fits(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,15}")
namespaces = _fits(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?")
label_values = st.one_of(st.just(""), _fits(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?"))
label_keys = st.one_of(_fits(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?"),
                       st.builds(lambda p, n: f"{p}/{n}", st.sampled_from(["nvidia.com", "1e3.io", "example.org"]),
                                 _fits(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?")))
registries = st.one_of(st.sampled_from(["envkit", "1e3", "0o17", "123/456", "registry.corp:5000/1e3", "localhost:5000"]),
                       _fits(r"[a-z0-9]+(/[a-z0-9]+){0,2}"))
sizes = st.sampled_from(["1000", "16Gi", "1.5", "007", "1E", "3Gi", "100000"])  # quantities of bytes
paths = st.one_of(st.sampled_from(["envkit.toml", "1e3.toml", "ci/0o17/envkit.toml", "a: b #c/envkit.toml", "日本/envkit.toml",
                                   "p\u2028q/envkit.toml", "yes", "null"]),
                  st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=20))
PLATFORMS = {"cpu": 'platform = "cpu"\ntorch = "2.13.0"\n', "cuda": 'platform = "cuda"\ngpu = "H100"\n',
             "rocm": 'platform = "rocm"\ngpu = "MI300X"\n', "triton": 'engine = "triton-trtllm"\ngpu = "H100"\n'}


def _toml(value: Any) -> str:
    """A TOML value of strings, integers and inline tables (JSON's string escapes are TOML's)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


@st.composite
def projects(draw: Any, triton: bool) -> tuple[str, str, dict[str, str]]:
    """(project file text, its path, the GPU platform of each GPU target) of 1 to 3 targets."""
    kinds = list(PLATFORMS) if triton else ["cpu", "cuda", "rocm"]
    targets = draw(st.lists(st.tuples(names, st.sampled_from(kinds)), min_size=1, max_size=3, unique_by=lambda t: t[0]))
    text = f"[defaults]\nregistry = {_toml(draw(registries))}\n"
    gpu: dict[str, str] = {}
    for name, kind in targets:
        text += f"[[target]]\nname = {_toml(name)}\n{PLATFORMS[kind]}offline = true\n"
        if draw(st.booleans()):
            text += f"tag = {_toml(draw(tags))}\n"
        if draw(st.booleans()):
            runner = draw(st.lists(labels, min_size=1, max_size=3, unique=True))
            text += f"runner = {_toml(runner if len(runner) > 1 else runner[0])}\n"
        if kind == "triton":
            tp = draw(st.integers(1, 8))
            text += f"tp = {_toml(str(tp)) if draw(st.booleans()) else tp}\n"
        if kind != "cpu":
            gpu[name] = "cuda" if kind == "triton" else kind
        if draw(st.booleans()):
            text += f"[target.k8s]\nnode_selector = {_toml(draw(st.dictionaries(label_keys, label_values, max_size=2)))}\n"
    text += f"[ci]\nenvkit = \"envkit-gpu==0.1.0\"\nrunner = {_toml(draw(labels))}\ngpu_runner = {_toml(draw(labels))}\n"
    k8s: dict[str, Any] = {"model_pvc": "models-pvc:/mnt"}
    if draw(st.booleans()):
        k8s["namespace"] = draw(namespaces)
    if draw(st.booleans()):
        k8s["node_selector"] = draw(st.dictionaries(label_keys, label_values, max_size=3))
    if draw(st.booleans()):
        k8s["shm_size"] = draw(sizes)
    if draw(st.booleans()):
        k8s["tolerations"] = [{"key": draw(label_keys), "operator": "Equal", "value": draw(label_values), "effect": "NoSchedule"}]
    text += "[k8s]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in k8s.items())
    return text, draw(paths), gpu


def _reads_back(text: str, expected: list[Any], what: str) -> None:
    """Both readers load exactly `expected`: YAML 1.2 (ruamel.yaml) and YAML 1.1 (PyYAML)."""
    for reader, docs in (("YAML 1.2", list(YAML12.load_all(text))), ("YAML 1.1", list(yaml.safe_load_all(text)))):
        assert [d for d in docs if d is not None] == expected, f"{what}: {reader} reads another value\n{text}"


@fuzzing.fuzz_settings(150)
@given(projects(triton=False))
def test_github_and_gitlab_exports_read_back_identically_in_yaml_1_1_and_1_2(case):
    text, path, gpu = case
    fuzzing.CASES[AREA] += 1
    p = project_file.parse(text, path)
    labels_of = export_core.runners(p, gpu)
    for fmt, build in (("github", export_core.github), ("gitlab", export_core.gitlab)):
        out = export_core.export(p, fmt, install=INSTALL, gpu_targets=gpu)
        _reads_back(out, [build(p, INSTALL, labels_of, gpu)], fmt)


@fuzzing.fuzz_settings(150)
@given(projects(triton=True))
def test_k8s_manifests_read_back_identically_in_yaml_1_1_and_1_2(case):
    text, path, gpu = case
    fuzzing.CASES[AREA] += 1
    p = project_file.parse(text, path)
    try:
        out = export_core.export(p, "k8s", gpu_targets=gpu)
    except InputError as exc:  # two targets whose Kubernetes names meet ("a" and "a-"): refused, in one line
        assert "\n" not in exc.one_line() and "would both be" in exc.message
        event("names meet")
        return
    _reads_back(out, k8s_core.manifests(p, gpu), "k8s")
