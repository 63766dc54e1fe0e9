"""fastllm compiled from its source tag (--engine fastllm --engine-build source): the extraction of a tag's CMake and
setup.py facts, the flag's checks, and the plan's CMake step (the explicit arch, the portable CPU flags, the carried
archive). The resolver's answers are cited cases in tests/cases/pip_engines.toml; the Dockerfiles are the goldens
h100-fastllm-source-intranet and cpu-fastllm-source-offline; the build on a GPU is in docs/fastllm-source.md."""
from __future__ import annotations

import pytest

from envkit.config import matrix_file
from envkit.core.planner import plan
from envkit.core.resolve import parse_query, resolve
from envkit.errors import InputError
from envkit.matrixgen.ftllm_source import cmake_facts, setup_facts
from envkit.model.flags import ResolveFlags
from envkit.model.plan import CMakeStep, Options, UninstallStep
from envkit.model.site import Site

CMAKE = '''cmake_minimum_required(VERSION 3.5)
option(USE_NUMAS "use numas" ON)
option(USE_CUDA "use CUDA" OFF)
if(NOT DEFINED CUDA_ARCH)
    if(DEFINED CMAKE_CUDA_ARCHITECTURES)
        set(CUDA_ARCH "${CMAKE_CUDA_ARCHITECTURES}")
    else()
        set(CUDA_ARCH "native")
    endif()
endif()
else()
    if (MAKE_WHL_X86)
        set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -pthread --std=c++17 -O2 -mavx -mavx2 -mf16c -mfma")
    else()
        set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -pthread --std=c++17 -O2 -march=native")
    endif()
if (USE_CUDA)
    set(FASTLLM_CUDA_ARCHITECTURES ${CUDA_ARCH})
    set(FASTLLM_LINKED_LIBS ${FASTLLM_LINKED_LIBS} cublas nccl cuda)
endif()
if (USE_NUMAS)
    add_compile_definitions(USE_NUMAS)
    set(FASTLLM_LINKED_LIBS ${FASTLLM_LINKED_LIBS} numa)
endif()
COMMAND ${CMAKE_COMMAND} -E copy_directory ${CMAKE_CURRENT_SOURCE_DIR}/tools/fastllm_pytools ${CMAKE_BINARY_DIR}/tools/ftllm/.
'''

SETUP = '''server_require = ['fastapi', 'uvicorn']
webui_require = ['streamlit-chat']
all_require = server_require + webui_require
PACKAGE_INFO = {
    "release": {"name": "ftllm", "version": "0.1.7.1"},
    "nightly": {"name": "ftllm-nightly", "version": "0.0.0.3"},
}
setup(name=package_name, install_requires=['transformers', 'nvidia-nccl-cu12'] + all_require,
      extras_require={'all': all_require, 'server': server_require})
'''


def test_a_tags_cmake_facts():
    f = cmake_facts(CMAKE)
    assert f["cmake_minimum"] == "3.5"
    assert f["options"] == {"USE_NUMAS": "ON", "USE_CUDA": "OFF"}
    assert f["cuda_arch_default"] == "native" and f["cuda_arch_option"] == "CUDA_ARCH"
    assert f["cxx_march_native"] and f["portable_option"] == "MAKE_WHL_X86"
    assert f["cuda_libs"] == ["cublas", "nccl", "cuda"]
    assert f["numa_options"] == ["USE_NUMAS"]
    assert f["python_package"] == "ftllm"


def test_a_tags_setup_facts_evaluate_the_list_sums():
    f = setup_facts(SETUP)
    assert f["version"] == "0.1.7.1"  # the release's, not the nightly's
    assert f["requires"] == ["transformers", "nvidia-nccl-cu12", "fastapi", "uvicorn", "streamlit-chat"]
    assert f["base_requires"] == ["transformers", "nvidia-nccl-cu12"]
    assert f["server_requires"] == ["fastapi", "uvicorn"]


@pytest.fixture(scope="module")
def m():
    return matrix_file.load(None)


def solve(m, **flags):
    r = resolve(m, parse_query(m, ResolveFlags(**flags)))
    assert r.solution is not None, r.conflicts
    return r.solution


def test_the_matrix_rows_are_the_tags_with_their_commits(m):
    newest = m.rows("ftllm_source")[0]
    assert (str(newest.version), newest.tag) == ("0.1.7.1", "v0.1.7.1")
    assert len(newest.commit) == 40 and newest.archive.endswith(f"/archive/{newest.commit}.tar.gz")
    assert newest.cuda_arch_default == "native" and newest.option("USE_CUDA") == "OFF"
    assert all(r.source.startswith(f"https://github.com/ztxz16/fastllm/blob/{r.commit}/") for r in m.rows("ftllm_source"))


@pytest.mark.parametrize("flags, message", [
    ({"engine": "sglang", "engine_build": "source"}, "chooses how fastllm is installed"),
    ({"engine_build": "source"}, "--engine is not given"),
    ({"engine": "fastllm", "engine_build": "sources"}, "is neither wheel nor source"),
    ({"engine": "fastllm==1.9.0", "engine_build": "source"}, "no fastllm source tag '1.9.0'"),
])
def test_engine_build_refuses_what_it_cannot_build(m, flags, message):
    with pytest.raises(InputError, match=message):
        parse_query(m, ResolveFlags(**flags))


def cmake_step(p) -> CMakeStep:
    steps = [s.payload for stage in p.stages for s in stage.steps if isinstance(s.payload, CMakeStep)]
    assert len(steps) == 1
    return steps[0]


def test_the_gpu_plan_names_the_arch_and_the_portable_cpu_flags(m):
    sol = solve(m, gpu="H100", engine="fastllm==0.1.7.1", engine_build="source")
    p = plan(m, sol, Site(), Options())
    step = cmake_step(p)
    assert step.cmake_args == ("-DCMAKE_BUILD_TYPE=Release", "-DUSE_CUDA=ON", "-DCUDA_ARCH=90",
                               "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc", "-DMAKE_WHL_X86=ON")
    assert (step.target, step.package_dir) == ("fastllm_tools", "tools")
    carried = {c.path: c.origin for c in p.carried}
    assert carried[f"sources/{step.archive}"] == sol.engine.build.archive
    assert not any(r.startswith(("nvidia-", "ftllm")) for r in p.requirements)  # the image's CUDA; ftllm is the build
    assert any(r.startswith("setuptools==") for r in p.requirements)             # pip installs the tools/ package offline
    assert "cmake==4.4.3" in p.requirements                                        # the CMake the H200 build used,
    assert any(s.payload == UninstallStep(("cmake",)) for s in p.stages[0].steps)  # removed before the runtime copy


def test_the_cpu_plan_turns_cuda_off_and_native_keeps_upstreams_flag_with_a_warning(m):
    sol = solve(m, platform="cpu", torch="2.13.0", engine="fastllm==0.1.7.1", engine_build="source")
    assert cmake_step(plan(m, sol, Site(), Options())).cmake_args == ("-DCMAKE_BUILD_TYPE=Release", "-DUSE_CUDA=OFF", "-DMAKE_WHL_X86=ON")
    native = plan(m, sol, Site(), Options(host_march="native"))
    assert cmake_step(native).cmake_args == ("-DCMAKE_BUILD_TYPE=Release", "-DUSE_CUDA=OFF")
    assert any("-march=native" in w for w in native.warnings)


def test_an_older_nvcc_compiles_the_newest_arch_it_knows_that_runs_on_the_gpu(m):
    sol = solve(m, gpu="RTX 4090", cuda="11.7", engine="fastllm", engine_build="source")
    assert sol.engine.cuda_arch == "87"
    assert cmake_step(plan(m, sol, Site(), Options())).cmake_args[2] == "-DCUDA_ARCH=87"
    assert any("knows no sm_89" in n for n in sol.notes)


def test_the_toolkit_wheels_cannot_link_fastllm(m):
    sol = solve(m, gpu="H100", engine="fastllm", engine_build="source")
    with pytest.raises(InputError, match="carry no NCCL"):
        plan(m, sol, Site(), Options(toolkit="pip"))
