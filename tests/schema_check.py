"""Validate envkit's JSON documents against the JSON Schemas shipped in envkit/data/schemas/.

    from schema_check import validate
    validate(json.loads(p.stdout), "build")      # raises jsonschema.ValidationError naming the path

The schemas refer to each other by their $id (https://envkit.dev/schemas/NAME.schema.json); every reference
is resolved from the shipped files, never fetched."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource

from envkit import data

SCHEMA_DIR = Path(data.SCHEMAS)
BASE = "https://envkit.dev/schemas/"


def names() -> list[str]:
    """Every shipped schema, by name (the file name less .schema.json)."""
    return sorted(p.name[: -len(".schema.json")] for p in SCHEMA_DIR.glob("*.schema.json"))


def load(name: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))


def _no_remote(uri: str):
    raise LookupError(f"{uri} is not one of envkit's shipped schemas (references are never fetched)")


@lru_cache(maxsize=None)
def registry() -> Registry:
    resources = [(s["$id"], Resource.from_contents(s)) for s in map(load, names())]
    return Registry(retrieve=_no_remote).with_resources(resources)


@lru_cache(maxsize=None)
def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(load(name), registry=registry(), format_checker=Draft202012Validator.FORMAT_CHECKER)


# Every (document, schema) pair that validate() was given in this process: test_schemas.py checks that every shipped
# schema was exercised by a real document.
SEEN: set[str] = set()


def validate(doc: Any, name: str) -> Any:
    """Raise jsonschema.ValidationError (the most relevant error) when `doc` does not follow schema `name`; return doc."""
    v = validator(name)
    found = list(v.iter_errors(doc))
    if found:
        raise best_match(found)
    SEEN.add(name)
    return doc


def errors(doc: Any, name: str) -> list[str]:
    """Every reason `doc` does not follow schema `name` ("path: message"), empty when it does."""
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in validator(name).iter_errors(doc)]


def valid_json(text: str, name: str) -> Any:
    """json.loads, then validate against the named schema: for the integration tests' real documents."""
    doc = json.loads(text)
    validate(doc, name)
    return doc
