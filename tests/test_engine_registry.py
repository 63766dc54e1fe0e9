"""The engine registry (model/engine_specs.py) is the one list of `--engine`: the flag, the resolver's rules modules,
the matrix loader's tables and the JSON schemas all name the same engines. A new engine that misses one of them fails
here, with the place to add it."""
from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from envkit.config.matrix_file import ENGINE_TABLES
from envkit.config.matrix_file import load as load_matrix
from envkit.core.resolve import pip_engines
from envkit.core.resolve.pip_engines.common import Rules
from envkit.model.engine_specs import CONTAINER_ENGINES, ENGINE_SPECS, ENGINES, PIP_ENGINES, REGISTRY
from envkit.model.flags import RESOLVE_FLAGS

SCHEMAS = Path(__file__).resolve().parent.parent / "envkit" / "data" / "schemas"
RULES = [name for name, member in inspect.getmembers(Rules, inspect.isfunction) if not name.startswith("_")]


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))


def test_the_engine_flag_offers_the_registry_in_its_order():
    flag = next(f for f in RESOLVE_FLAGS if f.key == "engine")
    assert flag.choices == ENGINES
    for road in (PIP_ENGINES, CONTAINER_ENGINES):
        assert ", ".join(road) in flag.help


def test_names_are_unique_and_every_road_is_known():
    assert len(REGISTRY) == len(ENGINE_SPECS)
    assert {s.road for s in ENGINE_SPECS} == {"stack", "pip", "container"}


@pytest.mark.parametrize("engine", PIP_ENGINES)
def test_every_pip_engine_has_a_rules_module_that_answers_every_rule(engine):
    module = pip_engines.rules(engine)
    missing = [name for name in RULES if not callable(getattr(module, name, None))]
    assert not missing, f"core/resolve/pip_engines/{engine}.py lacks {missing} (common.Rules)"


@pytest.mark.parametrize("engine", PIP_ENGINES)
def test_every_pip_engine_reads_its_tables_and_pins_a_release_from_them(engine):
    spec = REGISTRY[engine]
    assert spec.tables and set(spec.tables) <= set(ENGINE_TABLES), \
        f"{engine}'s tables {spec.tables}: each needs an entry in config/matrix_file.py's ENGINE_TABLES"
    assert spec.modules, f"{engine}: name what the self-test imports to prove it installed"
    m = load_matrix()
    assert all(m.rows(t) for t in spec.tables), f"{engine}: a table of it has no rows in matrix.toml"
    assert pip_engines.releases(m, engine, source=False), f"{engine}: --engine {engine}==VERSION would have nothing to pin"


def test_every_engine_table_of_the_loader_belongs_to_an_engine():
    named = {t for s in ENGINE_SPECS for t in s.tables}
    assert set(ENGINE_TABLES) <= named


def test_a_rules_module_exists_for_the_pip_road_only():
    with pytest.raises(KeyError):
        pip_engines.rules("trtllm")
    modules = {p.stem for p in Path(pip_engines.__file__).parent.glob("*.py")} - {"__init__", "common"}
    assert modules == set(PIP_ENGINES), "each module under core/resolve/pip_engines/ is a registered pip engine's"


def test_the_schemas_name_the_registry():
    solution = json.dumps(_schema("solution"))
    engine_enum = re.search(r'"engine": \{"enum": (\[[^\]]*\])', solution)
    assert engine_enum and json.loads(engine_enum.group(1)) == list(PIP_ENGINES), "solution.schema.json: the pip engines' enum"
    for name in ("resolve", "plan"):
        enums = re.findall(r'"engine": \{(?:"type": "string", )?"enum": (\[[^\]]*\])', json.dumps(_schema(name)))
        assert enums and all(json.loads(e) == list(CONTAINER_ENGINES) for e in enums), f"{name}.schema.json: the container engines' enum"
    flat = _schema("resolve")["$defs"]["flat"]["properties"]
    assert set(PIP_ENGINES) <= set(flat), "resolve.schema.json's flat answer names each pip engine's version"


def _patterns(node: object) -> list[str]:
    if isinstance(node, dict):
        return ([node["pattern"]] if isinstance(node.get("pattern"), str) else []) + [p for v in node.values() for p in _patterns(v)]
    return [p for v in node for p in _patterns(v)] if isinstance(node, list) else []


def test_the_project_schema_takes_every_engine_and_a_pin_for_the_pip_road_only():
    patterns = [p for p in _patterns(_schema("project")) if "fastertransformer" in p]
    target = [p for p in patterns if "torch" in p]
    containers = [p for p in patterns if "torch" not in p]
    assert len(target) == 1 and containers, "project.schema.json: the engine's pattern, and tp's and max_batch_size's"
    for engine in ENGINES:
        assert re.fullmatch(target[0], engine) and re.fullmatch(target[0], f" {engine} ")
        assert bool(re.fullmatch(target[0], f"{engine}==1.0")) == REGISTRY[engine].pinnable, engine
        for pattern in containers:
            assert bool(re.fullmatch(pattern, engine)) == (engine in CONTAINER_ENGINES), (pattern, engine)
    assert not re.fullmatch(target[0], "tensorrt")


def test_the_refresh_schema_names_every_derived_region():
    from envkit.matrixgen.refresh import REGIONS

    enums = re.findall(r'"enum": (\[[^\]]*"flash_attn"[^\]]*\])', json.dumps(_schema("matrix-refresh")))
    assert enums and all(json.loads(e) == [r.name for r in REGIONS] for e in enums), \
        "matrix-refresh.schema.json: the regions' enum (a pip engine's table is a region)"
