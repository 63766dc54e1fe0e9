"""A project file's named targets, its [ci] settings and its [k8s] settings, as values."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

from envkit.errors import InputError

DISTRIBUTION = "envkit-gpu"
"""envkit's distribution name (pyproject.toml's [project] name). The import package and the command are `envkit`;
the name `envkit` on PyPI belongs to an unrelated project, so nothing envkit writes ever installs that."""


@dataclass(frozen=True)
class Toleration:
    """One Kubernetes toleration as the project file gives it (already checked): `operator` Equal or Exists, `effect`
    None for every effect, `key` None (with Exists) for every taint."""
    operator: str = "Equal"
    key: Optional[str] = None
    value: Optional[str] = None
    effect: Optional[str] = None


@dataclass(frozen=True)
class ModelVolume:
    """A PersistentVolumeClaim holding models, and where the pod mounts it ([k8s] model_pvc = "CLAIM:/PATH")."""
    claim: str
    mount: str


@dataclass(frozen=True)
class K8sSettings:
    """[k8s] of the project file, or a target's [target.k8s]: None is a key not given (the target's value, then the
    file's, then the export's default: envkit/core/k8s.py)."""
    gpus: Optional[int] = None
    namespace: Optional[str] = None
    runtime_class: Optional[str] = None
    tolerations: Optional[tuple[Toleration, ...]] = None
    node_selector: Optional[tuple[tuple[str, str], ...]] = None
    shm_size: Optional[str] = None
    model_pvc: Optional[ModelVolume] = None
    model_repository: Optional[str] = None

    def over(self, base: "K8sSettings") -> "K8sSettings":
        """These settings where given, `base`'s elsewhere."""
        return K8sSettings(**{f.name: (mine if (mine := getattr(self, f.name)) is not None else getattr(base, f.name))
                              for f in fields(self)})


@dataclass(frozen=True)
class Target:
    name: str
    flags: tuple[tuple[str, str], ...]
    offline: bool
    mirror: Optional[str]
    image: str
    runner: Optional[tuple[str, ...]] = None  # the CI runner labels of this target's job ([[target]] runner)
    serve: Optional["ServeTarget"] = None  # a serving image ([[target]] serve = "MODEL_DIR" and its keys)
    k8s: K8sSettings = K8sSettings()  # [target.k8s]: over the file's [k8s]
    tp: Optional[int] = None  # a container engine's tensor-parallel size ([[target]] tp, as --tp); None: not given
    max_batch_size: Optional[int] = None  # a container engine's max batch size ([[target]] max_batch_size, as --max-batch-size)

    def flag_dict(self) -> dict[str, str]:
        return dict(self.flags)


@dataclass(frozen=True)
class ServeTarget:
    """A target's serving keys as written: the model directory (resolved against the project file), the served name,
    the server's arguments, and whether the site mounts the weights."""
    model: str
    name: Optional[str] = None
    args: tuple[str, ...] = ()
    mount: bool = False


@dataclass(frozen=True)
class EnvkitRequirement:
    """How CI gets envkit ([ci] envkit): a wheel committed to the user's repository (`wheel`: its path as
    written, relative to the project file), a VCS URL pinned to a tag or commit (`vcs`), or an exact
    version of DISTRIBUTION from the user's index (`pin`). `text` is the value as written."""
    kind: str  # wheel | vcs | pin
    text: str


@dataclass(frozen=True)
class CiSettings:
    """[ci]: what the exported workflows install, and where their jobs run. `runner` None: the CI system's
    default (GitHub: ubuntu-latest; GitLab: no tags, so its shared runners)."""
    envkit: Optional[EnvkitRequirement] = None
    runner: Optional[tuple[str, ...]] = None
    gpu_runner: Optional[tuple[str, ...]] = None


@dataclass(frozen=True)
class WheelInstall:
    """A wheel for CI to install, checked at export time: its path from where the export ran (the
    repository root) and its sha256, which the install step verifies before pip sees the file."""
    path: str
    sha256: str


@dataclass(frozen=True)
class Project:
    path: str
    targets: tuple[Target, ...]
    ci: CiSettings = CiSettings()
    k8s: K8sSettings = K8sSettings()

    def target(self, name: str) -> Target:
        for t in self.targets:
            if t.name == name:
                return t
        raise InputError(f"{self.path} has no target {name!r}", f"use one of: {', '.join(t.name for t in self.targets)}")
