"""PEP 751 lock files from a pinned envkit lock (issue 29): one pylock.STEP.toml per pip step, the set the image holds
after that step, each wheel by its wheelhouse path and sha256; read back by the standard library's TOML reader and
validated by packaging.pylock. uv installing one offline from a real bundle: tests/integration/test_lock_roundtrip.py."""
from __future__ import annotations

import tomllib
from dataclasses import replace

import pytest
from packaging.markers import default_environment
from packaging.pylock import Pylock

from envkit.core.pylock import pylock_files, pylocks, to_toml
from envkit.model.lock import Lock, LockedWheel
from envkit.model.solution import SolutionRecord

SOLUTION = SolutionRecord(platform="cpu", python="3.11", torch_pin="2.13.0+cpu", torch_cxx11abi=True, toolkit=None,
                          flash_attn=None, flash_attn_wheel=None, vllm=None, doc={})


def wheel(filename: str, step: str) -> LockedWheel:
    name, version = filename.split("-")[:2]
    return LockedWheel(name, version, filename, (name + version).encode().hex().ljust(64, "0")[:64], step, None)


def lock_of(*wheels: LockedWheel) -> Lock:
    return Lock(envkit="0", matrix_sha256="0" * 64, query=None, offline=True, site=None, host_march="x86-64-v2",  # type: ignore[arg-type]
                solution=SOLUTION, toolkit="image", wheels=wheels, images=())


LOCK = lock_of(wheel("packaging-24.0-py3-none-any.whl", "build-tools"), wheel("ninja-1.11.1-py3-none-manylinux1_x86_64.whl", "build-tools"),
               wheel("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "build-torch"),
               wheel("packaging-25.0-py3-none-any.whl", "build-torch"),            # a later step upgrades an earlier wheel
               wheel("Jinja2-3.1.6-py3-none-any.whl", "build-torch"))


def read(text: str) -> Pylock:
    return Pylock.from_dict(tomllib.loads(text))


def test_one_file_per_step_in_install_order_each_the_set_the_image_holds_after_it():
    files = pylock_files(LOCK)
    assert list(files) == ["pylock.build-tools.toml", "pylock.build-torch.toml"]
    tools, torch = (read(files[n].decode()) for n in files)
    assert [(str(p.name), str(p.version)) for p in tools.packages] == [("ninja", "1.11.1"), ("packaging", "24.0")]
    assert [(str(p.name), str(p.version)) for p in torch.packages] == [("jinja2", "3.1.6"), ("ninja", "1.11.1"),
                                                                       ("packaging", "25.0"), ("torch", "2.13.0+cpu")]


def test_each_wheel_is_its_wheelhouse_path_and_sha256_and_the_python_is_the_images():
    doc = read(pylock_files(LOCK)["pylock.build-torch.toml"].decode())
    by_name = {str(p.name): p for p in doc.packages}
    (w,) = by_name["torch"].wheels or ()
    original = LOCK.wheels[2]
    assert (w.name, w.path, dict(w.hashes)) == (original.filename, f"wheelhouse/{original.filename}", {"sha256": original.sha256})
    assert w.url is None and str(doc.requires_python) == "==3.11.*" and doc.created_by == "envkit"
    assert doc.tool == {"envkit": {"version": doc.tool["envkit"]["version"], "step": "build-torch", "platform": "cpu",
                                   "torch": "2.13.0+cpu"}}


def test_what_is_written_reads_back_as_the_same_document():
    for doc in pylocks(LOCK).values():
        assert read(to_toml(doc)).to_dict() == doc.to_dict()


def test_an_installer_selects_every_package_for_the_images_python_on_linux():
    doc = read(pylock_files(LOCK)["pylock.build-torch.toml"].decode())
    env = {**default_environment(), "python_version": "3.11", "python_full_version": "3.11.2", "sys_platform": "linux",
           "platform_machine": "x86_64"}
    chosen = sorted(str(p.name) for p, _ in doc.select(environment=env))
    assert chosen == ["jinja2", "ninja", "packaging", "torch"]


@pytest.mark.parametrize("odd", ['a "quoted" value', "back\\slash", "tab\there", "ünïcode"])
def test_strings_that_need_escaping_survive_the_writer(odd):
    doc = pylocks(LOCK)["pylock.build-tools.toml"]
    doc = Pylock(lock_version=doc.lock_version, created_by=odd, packages=doc.packages, tool={"envkit": {odd: odd}})
    back = read(to_toml(doc))
    assert back.created_by == odd and back.tool == {"envkit": {odd: odd}}


def test_a_lock_that_pins_no_wheel_has_no_pylock():
    assert pylock_files(replace(LOCK, wheels=())) == {}
