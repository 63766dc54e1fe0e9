"""Project targets exported for CI: golden files, validated against the published schemas
(tests/schemas, sources in its README) and bake's documented file format."""
from __future__ import annotations

import json
import os
from pathlib import Path
from xml.etree import ElementTree as ET

import jsonschema
import pytest
import yaml

from envkit.errors import InputError
from envkit.core.export import FORMATS, export
from envkit.model.host import Finding
from envkit.ui.junit import doctor_cases, selftest_cases, to_xml
from envkit.config.project_file import parse, load

ROOT = Path(__file__).resolve().parent
GOLD = ROOT / "golden" / "export"
FILES = {"github": "github-workflow.yml", "gitlab": "gitlab-ci.yml", "bake": "docker-bake.json", "json": "targets.json"}
# bake's HCL/JSON target attributes, from docs.docker.com/build/bake/reference/ (target block)
BAKE_TARGET_ATTRS = {"args", "annotations", "attest", "cache-from", "cache-to", "call", "context", "contexts", "description",
                     "dockerfile-inline", "dockerfile", "entitlements", "extra-hosts", "inherits", "labels", "matrix", "name",
                     "network", "no-cache-filter", "no-cache", "output", "platforms", "pull", "secret", "shm-size", "ssh",
                     "tags", "target", "ulimits"}


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(ROOT.parent)


def _project():
    return load("tests/golden/export/envkit.toml")


@pytest.mark.parametrize("fmt", FORMATS)
def test_exports_match_their_golden_files_and_are_deterministic(fmt):
    text = export(_project(), fmt)
    assert text == export(_project(), fmt)
    path = GOLD / FILES[fmt]
    if os.environ.get("ENVKIT_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.read_text() == text


def test_github_workflow_is_valid_against_schemastore():
    doc = yaml.safe_load((GOLD / FILES["github"]).read_text())
    jsonschema.validate(doc, json.loads((ROOT / "schemas" / "github-workflows.json").read_text()))
    include = doc["jobs"]["build"]["strategy"]["matrix"]["include"]
    assert [i["target"] for i in include] == ["cpu-demo", "a6000-cu118", "h200-cu128"]


def test_gitlab_ci_is_valid_against_gitlabs_schema():
    doc = yaml.safe_load((GOLD / FILES["gitlab"]).read_text())
    jsonschema.validate(doc, json.loads((ROOT / "schemas" / "gitlab-ci.json").read_text()))
    assert [m["TARGET"] for m in doc["envkit-build"]["parallel"]["matrix"]] == ["cpu-demo", "a6000-cu118", "h200-cu128"]


def test_an_invalid_workflow_is_caught_by_the_schema():
    doc = yaml.safe_load((GOLD / FILES["github"]).read_text())
    doc["jobs"]["build"]["runs-on"] = 42
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, json.loads((ROOT / "schemas" / "github-workflows.json").read_text()))


def test_bake_file_follows_bakes_documented_json_format():
    doc = json.loads((GOLD / FILES["bake"]).read_text())
    assert set(doc) == {"group", "target"}
    assert doc["group"]["default"]["targets"] == list(doc["target"])
    for name, t in doc["target"].items():
        assert set(t) <= BAKE_TARGET_ATTRS, set(t) - BAKE_TARGET_ATTRS
        assert isinstance(t["context"], str) and isinstance(t["tags"], list) and t["network"] in ("none", "default")
    assert doc["target"]["cpu-demo"]["network"] == "none"
    assert doc["target"]["a6000-cu118"]["tags"] == ["registry.corp.example:5000/llm/envkit-a6000-cu118:seed"]


@pytest.mark.parametrize("text,needle", [
    ("[[target]]\nname = \"A b\"\nplatform = \"cpu\"\noffline = true\n", "lower-case"),
    ("[[target]]\nname = \"a\"\nplatform = \"cpu\"\n", "neither offline nor against a site mirror"),
    ("[[target]]\nname = \"a\"\nplatform = \"cpu\"\noffline = true\n[[target]]\nname = \"a\"\nplatform = \"cpu\"\noffline = true\n", "used twice"),
    ("[[target]]\nname = \"a\"\nfrobnicate = \"x\"\noffline = true\n", "unknown key"),
    ("[[target]]\nname = \"a\"\ntorch = 2.4\noffline = true\n", "must be a string"),
    ("[defaults]\nregistry = \"UPPER\"\n[[target]]\nname = \"a\"\noffline = true\n", "image name prefix"),
    ("", "no [[target]]"),
])
def test_bad_project_files_name_the_problem(text, needle):
    with pytest.raises(InputError) as e:
        parse(text, "envkit.toml")
    assert needle in e.value.message and e.value.fix


def test_junit_from_selftest_and_doctor():
    xml = to_xml("s", selftest_cases({"checks": [{"name": "torch imports", "ok": True, "detail": "2.13.0+cpu"},
                                                  {"name": "decode", "ok": False, "detail": "RuntimeError: boom"}]}))
    suite = ET.fromstring(xml).find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    assert suite.findall("testcase")[1].find("failure").get("message") == "RuntimeError: boom"
    f = Finding("error", "driver.too-old", "driver 470", "too old", "upgrade", "https://x")
    cases = doctor_cases([f])
    assert cases[0].name == "driver.too-old" and not cases[0].ok
    assert {c.classname for c in cases if c.ok} >= {"envkit.doctor.torch", "envkit.doctor.flash-attn"}
    ET.fromstring(to_xml("d", cases))


@pytest.mark.parametrize("value", ["yes", "on", "1.10", ".5", ".inf", ":", "#x", "-x", "*a", "0x1f", "~", "héllo 😀", "a: b", "", "null"])
def test_yaml_strings_round_trip(value):
    from envkit.core.export import yaml_dump

    doc = {"k": value, "l": [value, [], {}], "n": {"x": [value]}}
    assert yaml.safe_load(yaml_dump(doc)) == doc
