"""The resolve flags, declared once. Their order, their command-line spelling and their help text drive
every place that takes them: the options of resolve, generate, bundle and build (cli/options.py),
doctor's `--for "..."` string, a project file's target keys, the lock's `query` and the command line
written into a generated Dockerfile."""
from __future__ import annotations

import difflib
import shlex
import unicodedata
from dataclasses import dataclass
from typing import Mapping, Optional

from envkit.errors import InputError
from envkit.model.engine_specs import ENGINES, engine_help


@dataclass(frozen=True)
class FlagSpec:
    key: str
    help: str
    example: str = ""  # a value that fits the flag, for the fixes of error messages
    metavar: str = "TEXT"  # how --help shows the value
    choices: tuple[str, ...] = ()  # offered by shell completion where the values are a closed set

    @property
    def option(self) -> str:
        return "--" + self.key.replace("_", "-")


RESOLVE_FLAGS: tuple[FlagSpec, ...] = (
    FlagSpec("gpu", "GPU product name (\"RTX 4090\", H100, Z100L) or arch (sm_86, gfx942)", "H100", metavar="NAME|sm_XY|gfxNNN"),
    FlagSpec("driver", "NVIDIA driver version, e.g. 535.104.05", "535.104.05", metavar="X.Y.Z"),
    FlagSpec("platform", "cuda, rocm, dtk or cpu", "cuda", metavar="cuda|rocm|dtk|cpu", choices=("cuda", "rocm", "dtk", "cpu")),
    FlagSpec("platform_arch", "the target's CPU architecture: x86_64 (the default) or aarch64 (GH200, GB200, Jetson); "
             "--gpu auto reads it", "aarch64", metavar="x86_64|aarch64", choices=("x86_64", "aarch64")),
    FlagSpec("cuda", "CUDA toolkit X.Y (12 means the newest 12.x; cu124 is 12.4)", "12.4", metavar="X.Y"),
    FlagSpec("rocm", "ROCm X.Y (6 means the newest 6.x)", "6.2", metavar="X.Y"),
    FlagSpec("dtk", "Hygon DTK YY.MM (24 means the newest 24.x)", "24.04", metavar="YY.MM"),
    FlagSpec("python", "Python X.Y (3 means the newest 3.x)", "3.11", metavar="X.Y"),
    FlagSpec("torch", "torch version or specifier; may carry +cu118", "2.4.1", metavar="VERSION|SPEC"),
    FlagSpec("flash_attn", "flash-attn version or specifier (2 means 2.*)", "2.6.3", metavar="VERSION|SPEC"),
    FlagSpec("vllm", "vLLM version or specifier", "0.6.3", metavar="VERSION|SPEC"),
    FlagSpec("flash_attn_profile", "a flash-attn source build's kernels: full (default), or serving[:HEAD_DIMS[:DTYPES]]: the forward "
             "and split-KV kernels only (default head dims 64,128,256 in fp16,bf16); a call outside it raises a clear error",
             "serving", metavar="full|serving[:64,128,256[:bf16,fp16]]"),
    FlagSpec("kernels", "flash-attn csrc kernels to build: layer_norm,rotary", "layer_norm,rotary", metavar="layer_norm,rotary",
             choices=("layer_norm", "rotary", "layer_norm,rotary")),
    FlagSpec("kernels_from", "build --kernels from this flash-attn sdist without installing flash-attn itself", "2.7.4.post1",
             metavar="VERSION"),
    FlagSpec("engine", engine_help(), "triton-trtllm", metavar="ENGINE[==VERSION]", choices=ENGINES),
    FlagSpec("engine_build", "--engine fastllm: wheel (PyPI's, the default) or source (its release tag compiled with CMake "
             "for the GPU's arch)", "source", metavar="wheel|source", choices=("wheel", "source")),
    FlagSpec("trtllm", "TensorRT-LLM version or specifier (with --engine trtllm or triton-trtllm)", "0.8.0", metavar="VERSION|SPEC"),
    FlagSpec("triton", "Triton container release YY.MM (with --engine triton-*, fastertransformer)", "24.05", metavar="YY.MM"),
)
FLAG_ORDER: tuple[str, ...] = tuple(f.key for f in RESOLVE_FLAGS)
FLAG: dict[str, str] = {f.key: f.option for f in RESOLVE_FLAGS}
EXAMPLE: dict[str, str] = {f.key: f.example for f in RESOLVE_FLAGS}
_BY_OPTION: dict[str, str] = {f.option: f.key for f in RESOLVE_FLAGS}


@dataclass(frozen=True)
class ResolveFlags:
    """What a user asked for, as given (text); the resolver parses and checks it."""
    gpu: Optional[str] = None
    driver: Optional[str] = None
    platform: Optional[str] = None
    platform_arch: Optional[str] = None
    cuda: Optional[str] = None
    rocm: Optional[str] = None
    dtk: Optional[str] = None
    python: Optional[str] = None
    torch: Optional[str] = None
    flash_attn: Optional[str] = None
    vllm: Optional[str] = None
    flash_attn_profile: Optional[str] = None
    kernels: Optional[str] = None
    kernels_from: Optional[str] = None
    engine: Optional[str] = None
    engine_build: Optional[str] = None
    trtllm: Optional[str] = None
    triton: Optional[str] = None

    @classmethod
    def from_mapping(cls, given: Mapping[str, Optional[str]]) -> "ResolveFlags":
        """None is a flag not given; an empty value is kept, for check_values to refuse (`--gpu ''` is not unset)."""
        unknown = set(given) - set(FLAG_ORDER)
        if unknown:
            raise ValueError(f"not resolve flags: {sorted(unknown)}")
        return cls(**{k: v for k, v in given.items() if v is not None})

    def to_dict(self) -> dict[str, str]:
        """The flags that were given, in the declared order (the lock's `query`)."""
        return {k: v for k in FLAG_ORDER if (v := getattr(self, k)) is not None}

    def any(self) -> bool:
        return bool(self.to_dict())

    def command_args(self) -> list[str]:
        return [f"{FLAG[k]}={v}" for k, v in self.to_dict().items()]


def shown(value: str, limit: int = 40) -> str:
    """A flag's value quoted for a message: repr (control characters escaped), cut to `limit` characters."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}...({len(value)} characters)"


# control characters, unpaired surrogates (bytes that were not UTF-8), line and paragraph separators, and
# format characters (bidi overrides, zero-width spaces): none belongs in a flag, and each would reach the
# Dockerfile, the lock and the terminal as written (fuzz report 8)
_REFUSED_CATEGORIES = {"Cc": "a control character", "Cs": "a byte that is not UTF-8", "Zl": "a line separator",
                       "Zp": "a paragraph separator", "Cf": "an invisible format character"}


def check_values(flags: ResolveFlags) -> None:
    """The one check every resolve flag's value passes before it is parsed: not empty (`--gpu ''` is not unset),
    no control character (fuzz report 8: `--python $'\\n3.11'` wrote a broken Dockerfile and exited 0)."""
    for key in FLAG_ORDER:
        value = getattr(flags, key)
        if value is None:
            continue
        option = FLAG[key]
        for ch in value:
            what = _REFUSED_CATEGORIES.get(unicodedata.category(ch))
            if what is not None:
                raise InputError(f"{option} {shown(value)} holds {what} (U+{ord(ch):04X})",
                                 f"type the value without it, e.g. {option} {EXAMPLE[key]}")
        if not value.strip():
            raise InputError(f"{option} is empty", f"give it a value, e.g. {option} {EXAMPLE[key]}, or leave {option} out")


def parse_flag_string(text: str, what: str = "--for") -> ResolveFlags:
    """Resolve flags written as one string, e.g. doctor's --for "--torch 2.4 --flash-attn 2.6"."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"{what} {text!r}: {exc}", f"quote it as one string: {what} \"--torch 2.4 --flash-attn 2.6\"") from None
    given: dict[str, str] = {}
    i = 0
    while i < len(words):
        key, eq, value = words[i].partition("=")
        if key not in _BY_OPTION:
            close = difflib.get_close_matches(key, list(_BY_OPTION), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}? " if close else ""
            raise InputError(f"{what}: unknown resolve flag {shown(key)}", f"{hint}use resolve flags: {', '.join(_BY_OPTION)}")
        if not eq:  # --torch 2.4; --torch= is an empty value, refused by check_values
            if i + 1 >= len(words):
                raise InputError(f"{what}: {key} needs a value", f"write {key} VALUE")
            value = words[i + 1]
            i += 1
        given[_BY_OPTION[key]] = value
        i += 1
    return ResolveFlags.from_mapping(given)
