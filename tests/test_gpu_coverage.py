"""matrix.toml's [[gpu]] table covers the GPUs people name (issue 27): NVIDIA's compute-capability tables from cc 6.0
(data centre, workstation, GeForce, Jetson, Grace, DGX Spark), AMD's Instinct and the Radeon cards ROCm and torch
build for, Hygon's DCUs. A sample of names (the table's own, the NVML and rocm-smi spellings, the short forms people
type) resolves to the right row, arch and vendor; every row names its source; no name or alias belongs to two rows;
Arm hosts (Grace, Jetson, DGX Spark) say so; a misspelling still gets close matches."""
from __future__ import annotations

import re

import pytest

from envkit.config import matrix_file
from envkit.core.resolve import find_gpu, parse_query, resolve
from envkit.errors import InputError
from envkit.model.matrix import CC, gpu_name_key

M = matrix_file.load()

# (what a user or NVML/rocm-smi writes, the row it names, arch, vendor)
SAMPLE = [
    ("RTX 3060", "RTX 3060", "sm_86", "nvidia"),
    ("NVIDIA GeForce RTX 3060", "RTX 3060", "sm_86", "nvidia"),
    ("3090 Ti", "RTX 3090 Ti", "sm_86", "nvidia"),
    ("3090ti", "RTX 3090 Ti", "sm_86", "nvidia"),
    ("GeForce RTX 3080 Ti", "RTX 3080 Ti", "sm_86", "nvidia"),
    ("RTX 4060 Ti", "RTX 4060 Ti", "sm_89", "nvidia"),
    ("NVIDIA GeForce RTX 4050 Laptop GPU", "RTX 4050", "sm_89", "nvidia"),
    ("RTX 5060", "RTX 5060", "sm_120", "nvidia"),
    ("RTX 2080", "RTX 2080", "sm_75", "nvidia"),
    ("GTX 1080", "GTX 1080", "sm_61", "nvidia"),
    ("NVIDIA GeForce GTX 1070 Ti", "GTX 1070 Ti", "sm_61", "nvidia"),
    ("RTX 6000 Ada", "RTX 6000 Ada", "sm_89", "nvidia"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", "sm_89", "nvidia"),
    ("NVIDIA RTX 4000 SFF Ada Generation", "RTX 4000 SFF Ada", "sm_89", "nvidia"),
    ("NVIDIA RTX A5000", "RTX A5000", "sm_86", "nvidia"),
    ("A2000", "RTX A2000", "sm_86", "nvidia"),
    ("NVIDIA RTX PRO 4000 Blackwell SFF Edition", "RTX PRO 4000 Blackwell SFF Edition", "sm_120", "nvidia"),
    ("Quadro RTX 8000", "Quadro RTX 8000", "sm_75", "nvidia"),
    ("Quadro P4000", "Quadro P4000", "sm_61", "nvidia"),
    ("Quadro GP100", "Quadro GP100", "sm_60", "nvidia"),
    ("NVIDIA T1000 8GB", "T1000", "sm_75", "nvidia"),
    ("NVIDIA TITAN RTX", "TITAN RTX", "sm_75", "nvidia"),
    ("TITAN V", "TITAN V", "sm_70", "nvidia"),
    ("Tesla P4", "Tesla P4", "sm_61", "nvidia"),
    ("Tesla P100-SXM2-16GB", "Tesla P100 SXM2", "sm_60", "nvidia"),
    ("Tesla V100-SXM2-16GB", "Tesla V100 16GB", "sm_70", "nvidia"),
    ("V100-16G", "Tesla V100 16GB", "sm_70", "nvidia"),
    ("Tesla V100S-PCIE-32GB", "Tesla V100S", "sm_70", "nvidia"),
    ("NVIDIA A40", "A40", "sm_86", "nvidia"),
    ("A16", "A16", "sm_86", "nvidia"),
    ("NVIDIA A2", "A2", "sm_86", "nvidia"),
    ("L40", "L40", "sm_89", "nvidia"),
    ("H200 NVL", "H200 NVL", "sm_90", "nvidia"),
    ("GH200", "GH200", "sm_90", "nvidia"),
    ("NVIDIA GH200 480GB", "GH200", "sm_90", "nvidia"),
    ("NVIDIA GH200 144G HBM3e", "GH200 144GB", "sm_90", "nvidia"),
    ("DGX Spark", "GB10", "sm_121", "nvidia"),
    ("NVIDIA GB10", "GB10", "sm_121", "nvidia"),
    ("Jetson AGX Orin", "Jetson AGX Orin", "sm_87", "nvidia"),
    ("Orin Nano", "Jetson Orin Nano", "sm_87", "nvidia"),
    ("Jetson Xavier NX", "Jetson Xavier NX", "sm_72", "nvidia"),
    ("Jetson TX2", "Jetson TX2", "sm_62", "nvidia"),
    ("MI60", "MI60", "gfx906", "amd"),
    ("AMD Instinct MI100", "MI100", "gfx908", "amd"),
    ("MI250", "MI250", "gfx90a", "amd"),
    ("AMD Instinct MI300A", "MI300A", "gfx942", "amd"),
    ("MI25", "MI25", "gfx900", "amd"),
    ("RX 7900 XT", "RX 7900 XT", "gfx1100", "amd"),
    ("AMD Radeon RX 7900 GRE", "RX 7900 GRE", "gfx1100", "amd"),
    ("7800 XT", "RX 7800 XT", "gfx1101", "amd"),
    ("RX 7600", "RX 7600", "gfx1102", "amd"),
    ("RX 6800 XT", "RX 6800 XT", "gfx1030", "amd"),
    ("W7800", "Radeon PRO W7800", "gfx1100", "amd"),
    ("AMD Radeon PRO W7700", "Radeon PRO W7700", "gfx1101", "amd"),
    ("Radeon AI PRO R9700", "Radeon AI PRO R9700", "gfx1201", "amd"),
    ("RX 9070 GRE", "RX 9070 GRE", "gfx1201", "amd"),
    ("Radeon VII", "Radeon VII", "gfx906", "amd"),
    ("AMD Ryzen AI Max+ PRO 395", "Radeon 8060S", "gfx1151", "amd"),
    # rows that were there before keep their names
    ("RTX 4090", "RTX 4090", "sm_89", "nvidia"),
    ("L40S", "L40S", "sm_89", "nvidia"),
    ("H200", "H200", "sm_90", "nvidia"),
    ("V100", "Tesla V100", "sm_70", "nvidia"),
    ("MI250X", "MI250X", "gfx90a", "amd"),
    ("Z100L", "Z100L", "gfx906", "hygon"),
    ("K100-AI", "K100_AI", "gfx928", "hygon"),
]


@pytest.mark.parametrize("text, row, arch, vendor", SAMPLE)
def test_a_name_people_write_finds_its_row(text: str, row: str, arch: str, vendor: str) -> None:
    g = find_gpu(M, text)
    assert (g.name, g.arch, g.vendor) == (row, arch, vendor)


@pytest.mark.parametrize("text", ["RTX 3060", "3090 Ti", "RTX 6000 Ada", "L40", "H200 NVL", "MI300A", "RX 7900 XT"])
def test_new_rows_solve_a_stack_for_their_platform(text: str) -> None:
    q = parse_query(M, gpu=text)
    r = resolve(M, q, suggest=False)
    assert r.ok, [c.message for c in r.conflicts]
    assert r.solution.platform == q.gpu.platform


@pytest.mark.parametrize("text", ["GH200", "NVIDIA GH200 144G HBM3e", "DGX Spark", "Jetson AGX Orin", "Jetson Orin Nano"])
def test_arm_hosts_solve_an_aarch64_stack(text: str) -> None:
    r = resolve(M, parse_query(M, gpu=text), suggest=False)
    assert r.ok, [c.message for c in r.conflicts]
    assert r.solution.machine == "aarch64" and r.solution.platform == "cuda"


@pytest.mark.parametrize("arch", ["sm_87", "sm_103", "sm_110", "sm_121"])
def test_the_newer_archs_are_accepted_as_gpu_queries(arch: str) -> None:
    g = find_gpu(M, arch)
    assert g.arch == arch and g.vendor == "nvidia"


def test_every_row_names_a_public_url_as_its_source() -> None:
    for g in M.gpus:
        assert re.search(r"https://\S+", g.source), g.name


def test_no_name_or_alias_belongs_to_two_rows() -> None:
    owner: dict[str, str] = {}
    for g in M.gpus:
        names = (g.name, *g.aliases)
        keys = [gpu_name_key(n) for n in names]
        assert len(set(keys)) == len(keys), f"{g.name} repeats a name: {names}"
        for k in keys:
            assert k, g.name
            assert owner.setdefault(k, g.name) == g.name, f"{k!r} is {owner[k]} and {g.name}"
    assert len(M.gpus) == len({g.name for g in M.gpus})


def test_grace_jetson_and_dgx_spark_rows_are_aarch64_hosts() -> None:
    arm = re.compile(r"GH200|GB200|GB300|GB10\b|Jetson", re.IGNORECASE)
    for g in M.gpus:
        if arm.search(g.name):
            assert g.machine == "aarch64", g.name
        else:
            assert g.machine is None, g.name


def test_nvidia_rows_are_cc_6_0_or_newer_and_archs_agree_with_vendor() -> None:
    for g in M.gpus:
        if g.vendor == "nvidia":
            assert g.cc is not None and g.cc >= CC(6, 0), g.name
        else:
            assert g.arch.startswith("gfx") and g.cc is None, g.name


@pytest.mark.parametrize("typo, expected", [
    ("RTX 3O60", "RTX 3060"),
    ("RTX 4909", "RTX 4090"),
    ("Jetson AGX Orn", "Jetson AGX Orin"),
    ("MI300", "MI300X"),
    ("RX 7900 XTT", "RX 7900 XT"),
])
def test_a_misspelling_still_lists_close_matches(typo: str, expected: str) -> None:
    with pytest.raises(InputError) as info:
        find_gpu(M, typo)
    assert f"unknown GPU '{typo}'" in info.value.message
    assert info.value.fix.startswith("did you mean") and repr(expected) in info.value.fix, info.value.fix
