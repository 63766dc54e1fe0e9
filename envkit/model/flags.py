"""The resolve flags, declared once. Their order, their command-line spelling and their help text drive
every place that takes them: the options of resolve, generate, bundle and build (cli/options.py),
doctor's `--for "..."` string, a project file's target keys, the lock's `query` and the command line
written into a generated Dockerfile."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Mapping, Optional

from envkit.errors import InputError


@dataclass(frozen=True)
class FlagSpec:
    key: str
    help: str

    @property
    def option(self) -> str:
        return "--" + self.key.replace("_", "-")


RESOLVE_FLAGS: tuple[FlagSpec, ...] = (
    FlagSpec("gpu", "GPU product name (\"RTX 4090\", H100, Z100L) or arch (sm_86, gfx942)"),
    FlagSpec("driver", "NVIDIA driver version, e.g. 535.104.05"),
    FlagSpec("platform", "cuda, rocm, dtk or cpu"),
    FlagSpec("cuda", "CUDA toolkit X.Y"),
    FlagSpec("rocm", "ROCm X.Y"),
    FlagSpec("dtk", "Hygon DTK YY.MM"),
    FlagSpec("python", "Python X.Y"),
    FlagSpec("torch", "torch version or specifier; may carry +cu118"),
    FlagSpec("flash_attn", "flash-attn version or specifier (2 means 2.*)"),
    FlagSpec("vllm", "vLLM version or specifier"),
    FlagSpec("kernels", "flash-attn csrc kernels to build: layer_norm,rotary"),
)
FLAG_ORDER: tuple[str, ...] = tuple(f.key for f in RESOLVE_FLAGS)
FLAG: dict[str, str] = {f.key: f.option for f in RESOLVE_FLAGS}
_BY_OPTION: dict[str, str] = {f.option: f.key for f in RESOLVE_FLAGS}


@dataclass(frozen=True)
class ResolveFlags:
    """What a user asked for, as given (text); the resolver parses and checks it."""
    gpu: Optional[str] = None
    driver: Optional[str] = None
    platform: Optional[str] = None
    cuda: Optional[str] = None
    rocm: Optional[str] = None
    dtk: Optional[str] = None
    python: Optional[str] = None
    torch: Optional[str] = None
    flash_attn: Optional[str] = None
    vllm: Optional[str] = None
    kernels: Optional[str] = None

    @classmethod
    def from_mapping(cls, given: Mapping[str, Optional[str]]) -> "ResolveFlags":
        unknown = set(given) - set(FLAG_ORDER)
        if unknown:
            raise ValueError(f"not resolve flags: {sorted(unknown)}")
        return cls(**{k: v for k, v in given.items() if v})

    def to_dict(self) -> dict[str, str]:
        """The flags that were given, in the declared order (the lock's `query`)."""
        return {k: v for k in FLAG_ORDER if (v := getattr(self, k))}

    def any(self) -> bool:
        return bool(self.to_dict())

    def command_args(self) -> list[str]:
        return [f"{FLAG[k]}={v}" for k, v in self.to_dict().items()]


def parse_flag_string(text: str, what: str = "--for") -> ResolveFlags:
    """Resolve flags written as one string, e.g. doctor's --for "--torch 2.4 --flash-attn 2.6"."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"{what} {text!r}: {exc}", f"quote it as one string: {what} \"--torch 2.4 --flash-attn 2.6\"") from None
    given: dict[str, str] = {}
    i = 0
    while i < len(words):
        key, _, value = words[i].partition("=")
        if key not in _BY_OPTION:
            raise InputError(f"{what}: unknown resolve flag {key!r}", f"use resolve flags: {', '.join(_BY_OPTION)}")
        if not value:
            if i + 1 >= len(words):
                raise InputError(f"{what}: {key} needs a value", f"write {key} VALUE")
            value = words[i + 1]
            i += 1
        given[_BY_OPTION[key]] = value
        i += 1
    return ResolveFlags.from_mapping(given)
