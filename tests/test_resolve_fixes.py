"""A printed fix is a working answer (issue 27): what a conflict tells the user to do, done, resolves, and what it
claims about the user's GPU is true of that GPU."""
from __future__ import annotations

import pytest

from envkit.config import matrix_file
from envkit.core.resolve import parse_query, resolve

M = matrix_file.load()


def _conflict(rule: str, **flags: str):
    r = resolve(M, parse_query(M, **flags), suggest=False)
    assert not r.ok
    (c,) = [x for x in r.conflicts if x.rule == rule]
    return c


@pytest.mark.parametrize("gpu, fa1", [("T4", True), ("RTX 2080 Ti", True), ("V100", False), ("sm_61", False)])
def test_flash_attn_2s_fix_names_flash_attention_1_for_turing_only(gpu, fa1):
    """FlashAttention 1.x runs on Turing and Ampere (its README), not on Volta or Pascal: a V100 owner was sent
    to FA 1.x (newcomer review 3, D11)."""
    c = _conflict("flash-attn.gpu-arch", gpu=gpu, flash_attn="2")
    assert ("FlashAttention 1.x" in c.fix) is fa1, c.fix
    assert "SDPA" in c.fix


def test_the_rocm_image_fix_names_a_rocm_that_resolves():
    c = _conflict("torch.no-image", gpu="MI325X", rocm="7.14", torch="2.14.0")
    rocm = c.fix.split("--rocm ", 1)[1].split()[0]
    r = resolve(M, parse_query(M, gpu="MI325X", rocm=rocm, torch="2.14.0"))
    assert r.ok and str(r.solution.toolkit) == rocm


def test_dropping_vllm_as_the_rocm_source_fix_says_resolves():
    c = _conflict("vllm.rocm-source", gpu="MI300X", platform="rocm", vllm="0.11.0")
    assert c.fix.startswith("drop --vllm")
    assert resolve(M, parse_query(M, gpu="MI300X", platform="rocm")).ok


def test_the_dtk_python_fix_names_the_wheels_python():
    c = _conflict("torch.python", gpu="Z100L", dtk="23.04", python="3.10")
    assert c.fix == "use --python 3.8" and "cp38" in c.message
    r = resolve(M, parse_query(M, gpu="Z100L", dtk="23.04", python="3.8"))
    assert r.ok and r.solution.torch.wheel.endswith("-cp38-cp38-linux_x86_64.whl")


def test_a_prebuilt_flash_attn_wheel_keeps_the_base_images_own_python():
    """Newcomer review 3, D2: the comparison took the flash-attn wheel's file name (its cpXY tag) for the stack, so a
    stack with a prebuilt wheel never took the base image's Python and compiled CPython 3.12 on Ubuntu 22.04."""
    from envkit.app.generate import Generated, generate
    from envkit.model.flags import ResolveFlags

    g = generate(ResolveFlags(gpu="A100", torch="2.4.0", flash_attn="2.6.3"))
    assert isinstance(g, Generated)
    sol = g.result.solution
    assert str(sol.python) == "3.10" and sol.flash_attn is not None and sol.flash_attn.build == "wheel"
    assert "cp310" in (sol.flash_attn.wheel or "")
    docker = g.files["Dockerfile"].decode()
    assert "[build-python]" not in docker and "RUN /usr/bin/python3.10 -m venv /opt/venv" in docker
    assert any("the base image's own (ubuntu22.04)" in n for n in g.result.notes)


def test_the_base_images_python_is_a_note_of_the_answer_not_a_warning():
    """Newcomer review 3, D11: taking the base image's own Python is a decision; it was printed as a warning."""
    from envkit.app.resolve import resolve as resolve_use_case
    from envkit.model.flags import ResolveFlags

    r = resolve_use_case(ResolveFlags(gpu="RTX 4090", cuda="11.8"), None, None)
    assert any("the base image's own" in n for n in r.notes) and not any("the base image's own" in w for w in r.warnings)
    assert r.to_json()["notes"] == list(r.notes)


@pytest.mark.parametrize("gpu, cuda, floor, cuda_minimum", [("H200", "12.8", "550", "525.60.13"), ("RTX 4090", "11.8", "520", "450.80.02")])
def test_a_gpu_whose_driver_floor_is_above_cudas_gives_one_driver_note(gpu, cuda, floor, cuda_minimum):
    """D11: the answer said both 'needs driver >= 550' and 'driver >= 525.60.13 (minor-version compatibility)'."""
    r = resolve(M, parse_query(M, gpu=gpu, cuda=cuda))
    assert r.ok and str(r.solution.min_driver) == floor
    driver_notes = [n for n in r.solution.notes if "driver >=" in n]
    assert len(driver_notes) == 1 and f">= {floor}" in driver_notes[0] and cuda_minimum in driver_notes[0], driver_notes


def test_dropping_the_gpu_is_suggested_only_where_nothing_else_solves_it():
    """D11: 'without --gpu' is no fix for the GPU a user owns; dropping --flash-attn is."""
    r = resolve(M, parse_query(M, gpu="V100", flash_attn="2"))
    assert not r.ok and [k for k, _ in r.suggestions] == ["flash_attn"]
