"""A project file's named targets as values."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from envkit.errors import InputError


@dataclass(frozen=True)
class Target:
    name: str
    flags: tuple[tuple[str, str], ...]
    offline: bool
    mirror: Optional[str]
    image: str

    def flag_dict(self) -> dict[str, str]:
        return dict(self.flags)


@dataclass(frozen=True)
class Project:
    path: str
    targets: tuple[Target, ...]

    def target(self, name: str) -> Target:
        for t in self.targets:
            if t.name == name:
                return t
        raise InputError(f"{self.path} has no target {name!r}", f"use one of: {', '.join(t.name for t in self.targets)}")
