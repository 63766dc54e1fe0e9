"""Where envkit's shipped data lies, named once (cibuildwheel's resources.py): matrix.toml, the Dockerfile
fragments, the rule catalogue, the JSON Schemas, and the scripts copied into images.

In a checkout matrix.toml and dockerfiles/ sit at the repository's top level; a wheel carries them under
envkit/data/ (pyproject's force-include)."""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
INIMAGE = PACKAGE / "inimage"
RULES = HERE / "rules.toml"
SCHEMAS = HERE / "schemas"


def matrix_toml() -> Path:
    for candidate in (HERE / "matrix.toml", PACKAGE.parent / "matrix.toml"):
        if candidate.is_file():
            return candidate
    return PACKAGE.parent / "matrix.toml"


def dockerfiles() -> Path:
    """The folder that holds fragments/*.Dockerfile (None of its files run in an image by themselves)."""
    for candidate in (HERE / "dockerfiles", PACKAGE.parent / "dockerfiles"):
        if (candidate / "fragments").is_dir():
            return candidate
    return PACKAGE.parent / "dockerfiles"
