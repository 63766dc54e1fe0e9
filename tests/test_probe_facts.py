"""The probe's host facts beyond the GPUs (collect_env's report, without torch): the parsers on recorded text
(tests/fixtures/doctor/README.md names each source), the sysfs readers on layouts written in a tmp dir, the
redaction of secret-named variables, section selection, one shared `ldconfig -p` read, the concurrent tool runs,
Host reading the new facts, and that the probe as a whole still imports no torch."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap
import time
from importlib import metadata
from pathlib import Path

import jsonschema
import pytest

from envkit.errors import InputError
from envkit.inimage import probe
from envkit.model.host import Host
from envkit.ui import report

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "doctor"
PROBE = ROOT / "envkit" / "inimage" / "probe.py"
SCHEMA = json.loads((ROOT / "envkit" / "data" / "schemas" / "facts.schema.json").read_text())


def _fixture(name: str) -> str:
    return (FIX / name).read_text()


def _valid(doc: dict) -> dict:
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    return doc


# ---------------------------------------------------------------- OS

def test_os_release_of_debian_12():
    rel = probe.parse_os_release(_fixture("os_release_debian12.txt"))
    assert rel["PRETTY_NAME"] == "Debian GNU/Linux 12 (bookworm)" and rel["ID"] == "debian" and rel["VERSION_ID"] == "12"
    assert rel["HOME_URL"] == "https://www.debian.org/"


def test_os_release_of_ubuntu_24_04_on_the_h200_machine():
    rel = probe.parse_os_release(_fixture("os_release_ubuntu2404.txt"))
    assert (rel["PRETTY_NAME"], rel["ID"], rel["ID_LIKE"], rel["VERSION_ID"], rel["VERSION_CODENAME"]) == (
        "Ubuntu 24.04.3 LTS", "ubuntu", "debian", "24.04", "noble")


def test_os_release_quotes_and_escapes():
    text = 'NAME="Ubuntu"\nVERSION_ID="24.04"\nPRETTY_NAME="Ubuntu 24.04.3 LTS"\nID=ubuntu\nID_LIKE=debian\n# a comment\n' \
           "VARIANT='Server \\\"x\\\"'\nbroken line\n"
    rel = probe.parse_os_release(text)
    assert rel == {"NAME": "Ubuntu", "VERSION_ID": "24.04", "PRETTY_NAME": "Ubuntu 24.04.3 LTS", "ID": "ubuntu", "ID_LIKE": "debian",
                   "VARIANT": 'Server "x"'}


def test_os_facts_here_name_the_kernel_machine_and_c_library():
    f = probe.os_facts()
    u = os.uname()
    assert f["kernel"] == u.release and f["machine"] == u.machine == platform.machine()
    if platform.libc_ver()[0] == "glibc":
        assert (f["libc"], f["libc_version"]) == platform.libc_ver()


def test_the_platform_string_is_platform_platforms_without_its_subprocess():
    if not sys.platform.startswith("linux"):
        pytest.skip("the probe builds the string itself on Linux only")
    assert probe.python_stack()["platform"] == platform.platform()
    assert probe.platform_string("Linux", "6.8.0-45-generic", "x86_64", "glibc", "2.39") == "Linux-6.8.0-45-generic-x86_64-with-glibc2.39"


# ---------------------------------------------------------------- CPU and NUMA

def test_cpuinfo_of_an_x86_host_with_avx512_and_amx():
    c = probe.parse_cpuinfo(_fixture("cpuinfo_x86_amx_h200.txt"))
    assert c["model"] == "Intel(R) Xeon(R) Processor" and c["vendor"] == "GenuineIntel" and (c["family"], c["model_number"]) == (6, 207)
    assert (c["logical"], c["physical"], c["sockets"]) == (16, 16, 1)
    assert {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"} <= set(c["flags"])
    assert not {"sve", "asimd", "neon"} & set(c["flags"]) and c["hypervisor"] is True


def test_cpuinfo_of_a_grace_neoverse_v2():
    c = probe.parse_cpuinfo(_fixture("cpuinfo_aarch64_grace.txt"))
    assert c["model"] == "Neoverse-V2" and c["vendor"] == "ARM" and c["part"] == "0xd4f" and c["logical"] == 1
    assert {"asimd", "sve", "sve2", "bf16", "i8mm", "svebf16"} <= set(c["flags"]) and not {"avx2", "amx_tile"} & set(c["flags"])
    assert "physical" not in c and "hypervisor" not in c  # Arm's cpuinfo tells no topology: cpu_facts reads sysfs


def test_an_unknown_arm_part_is_named_by_its_numbers():
    c = probe.parse_cpuinfo("processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: 0xfff\n")
    assert c["model"] == "ARM part 0xfff" and c["flags"] == ["asimd"]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cpu_facts_of_a_72_core_grace_take_the_topology_from_sysfs(tmp_path):
    block = _fixture("cpuinfo_aarch64_grace.txt").replace("processor\t: 71", "processor\t: {n}")
    (tmp_path / "cpuinfo").write_text("\n".join(block.format(n=n) for n in range(72)))
    cpu = tmp_path / "cpu"
    _write(cpu / "cpu0" / "topology" / "thread_siblings_list", "0\n")
    _write(cpu / "cpu0" / "topology" / "package_cpus_list", "0-71\n")
    for index, (level, kind, size) in enumerate([("1", "Data", "64K"), ("1", "Instruction", "64K"), ("2", "Unified", "1024K"),
                                                 ("3", "Unified", "116736K")]):
        for name, value in (("level", level), ("type", kind), ("size", size)):
            _write(cpu / "cpu0" / "cache" / f"index{index}" / name, value + "\n")
    _write(cpu / "vulnerabilities" / "spectre_v2", "Not affected\n")
    f = _valid({"schema": 1, "cpu": probe.cpu_facts(str(tmp_path / "cpuinfo"), str(cpu))})["cpu"]
    assert (f["model"], f["logical"], f["physical"], f["sockets"], f["threads_per_core"]) == ("Neoverse-V2", 72, 72, 1, 1)
    assert f["caches"] == {"L1d": "64K", "L1i": "64K", "L2": "1024K", "L3": "116736K"}
    assert f["vulnerabilities"] == {"spectre_v2": "Not affected"}


def test_cpu_lists_count_their_cpus():
    assert [probe.cpulist_count(t) for t in ("0-31,64-95", "0", "0-15\n", "", "3,5,7-8")] == [64, 1, 16, 0, 4]


def test_numa_nodes_of_a_grace_hopper_layout_in_a_tmp_dir(tmp_path):
    """GH200: node 0 holds the 72 Grace cores and LPDDR5X; the GPU's memory shows as nodes without CPUs."""
    node = tmp_path / "node"
    _write(node / "node0" / "cpulist", "0-71\n")
    _write(node / "node0" / "meminfo", "Node 0 MemTotal:       500770816 kB\nNode 0 MemFree:        490000000 kB\n")
    _write(node / "node1" / "cpulist", "\n")
    _write(node / "node1" / "meminfo", "Node 1 MemTotal:       100663296 kB\n")
    _write(node / "node10" / "cpulist", "\n")
    (node / "possible").write_text("0-10\n")
    (node / "has_cpu").write_text("0\n")
    f = _valid({"schema": 1, "numa": probe.numa_facts(str(node))})["numa"]
    assert f["count"] == 3 and [n["node"] for n in f["nodes"]] == [0, 1, 10]
    assert f["nodes"][0] == {"node": 0, "cpulist": "0-71", "cpus": 72, "memory_gb": 477.6}
    assert f["nodes"][1] == {"node": 1, "cpulist": "", "cpus": 0, "memory_gb": 96.0} and "memory_gb" not in f["nodes"][2]
    assert probe.numa_facts(str(tmp_path / "absent")) == {}


# ---------------------------------------------------------------- cuDNN and NCCL

def test_cudnn_version_header():
    assert probe.parse_cudnn_header(_fixture("cudnn_version_h.txt")) == "9.19.0"
    # cuDNN 7 kept the defines in cudnn.h
    assert probe.parse_cudnn_header("#define CUDNN_MAJOR 7\n#define CUDNN_MINOR 6\n#define CUDNN_PATCHLEVEL 5\n") == "7.6.5"
    assert probe.parse_cudnn_header("#include \"cudnn_version.h\"\n") is None


def test_nccl_header_and_its_suffix():
    assert probe.parse_nccl_header(_fixture("nccl_h.txt")) == "2.28.3"
    assert probe.parse_nccl_header('#define NCCL_MAJOR 2\n#define NCCL_MINOR 29\n#define NCCL_PATCH 0\n#define NCCL_SUFFIX "-rc1"\n') == "2.29.0-rc1"


def test_rocm_version_headers():
    hip = "#define HIP_VERSION_MAJOR 6\n#define HIP_VERSION_MINOR 2\n#define HIP_VERSION_PATCH 41133\n#define HIP_VERSION_GITHASH \"dd7f95766\"\n"
    assert probe.parse_hip_version_header(hip) == "6.2.41133"
    assert probe.parse_miopen_version_header("#define MIOPEN_VERSION_MAJOR 3\n#define MIOPEN_VERSION_MINOR 2\n#define MIOPEN_VERSION_PATCH 0\n") == "3.2.0"


def test_ldconfig_lines_and_library_file_names():
    entries = probe.parse_ldconfig(_fixture("ldconfig_p_h200.txt"))
    assert len(entries) == 24 and entries[0] == ("libnccl.so.2", "/lib/x86_64-linux-gnu/libnccl.so.2")
    assert ("libcudnn.so.9", "/lib/x86_64-linux-gnu/libcudnn.so.9") in entries
    assert probe.library_version("/usr/lib/x86_64-linux-gnu/libcudnn.so.9.14.0", "libcudnn") == "9.14.0"
    assert probe.library_version("/x/libnccl.so.2.28.3", "libnccl") == "2.28.3"
    assert probe.library_version("/x/libcudnn.so.9", "libcudnn") == "9"
    assert probe.library_version("/x/libcudnn_ops.so.9.14.0", "libcudnn") is None
    assert probe.library_version("/x/libcudnn.so", "libcudnn") is None


@pytest.fixture
def cuda_host(tmp_path, monkeypatch):
    """The H200 machine's three places of cuDNN and NCCL, laid out in a tmp dir: pip wheels, the loader's cache
    (its recorded lines pointed at files here) and the system headers."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for real, links in (("libcudnn.so.9.14.0", ("libcudnn.so.9", "libcudnn.so")), ("libcudnn_ops.so.9.14.0", ("libcudnn_ops.so.9",)),
                        ("libnccl.so.2.28.3", ("libnccl.so.2", "libnccl.so"))):
        (lib / real).write_bytes(b"\x7fELF")
        for link in links:
            (lib / link).symlink_to(real)
    lines = _fixture("ldconfig_p_h200.txt").replace("/lib/x86_64-linux-gnu", str(lib))
    entries = [e for e in probe.parse_ldconfig(lines) if (lib / os.path.basename(e[1])).exists()]
    include = tmp_path / "cuda" / "include"
    _write(include / "cudnn_version.h", "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 14\n#define CUDNN_PATCHLEVEL 0\n")
    _write(include / "nccl.h", _fixture("nccl_h.txt"))
    dists = {"nvidia-cudnn-cu13": ("nvidia_cudnn_cu13", "9.19.0.56", "/site/nvidia_cudnn_cu13-9.19.0.56.dist-info"),
             "nvidia-nccl-cu13": ("nvidia_nccl_cu13", "2.28.9", "/site/nvidia_nccl_cu13-2.28.9.dist-info"),
             "nvidia-cudnn-frontend": ("nvidia_cudnn_frontend", "1.14.0", "/site/nvidia_cudnn_frontend-1.14.0.dist-info")}
    monkeypatch.setattr(probe, "ldconfig_cache", lambda: entries)
    monkeypatch.setattr(probe, "distributions", lambda: dists)
    monkeypatch.setattr(probe, "_header_dirs", lambda *env: [str(include)])
    for var in ("LD_LIBRARY_PATH", "CONDA_PREFIX", "CUDNN_LIBRARY"):
        monkeypatch.delenv(var, raising=False)
    return lib


def test_cudnn_and_nccl_without_torch_each_with_its_source(cuda_host):
    cudnn, nccl = probe.cudnn(), probe.nccl()
    assert (cudnn["version"], cudnn["source"]) == ("9.19.0.56", "pip")  # what torch's pip wheels load
    assert [(f["version"], f["source"]) for f in cudnn["found"]] == [("9.19.0.56", "pip"), ("9.14.0", "ldconfig"), ("9.14.0", "header")]
    assert cudnn["found"][0]["distribution"] == "nvidia-cudnn-cu13" and cudnn["found"][1]["path"] == str(cuda_host / "libcudnn.so.9.14.0")
    assert [(f["version"], f["source"]) for f in nccl["found"]] == [("2.28.9", "pip"), ("2.28.3", "ldconfig"), ("2.28.3", "header")]
    h = Host.from_json({"toolkit": {"cudnn": cudnn, "nccl": nccl}})
    assert h.cudnn == "9.19.0.56" and h.cudnn_found == (("9.19.0.56", "pip"), ("9.14.0", "ldconfig"))
    assert h.nccl == "2.28.9" and h.nccl_found == (("2.28.9", "pip"), ("2.28.3", "ldconfig"))


def test_ld_library_path_comes_before_the_cache_and_a_major_only_name_is_not_the_version(cuda_host, tmp_path, monkeypatch):
    monkeypatch.setattr(probe, "distributions", lambda: {})
    own = tmp_path / "own"
    own.mkdir()
    (own / "libcudnn.so.9").write_bytes(b"\x7fELF")  # a copied library, no versioned name behind it
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{own}:/nonexistent")
    cudnn = probe.cudnn()
    assert [(f["version"], f["source"]) for f in cudnn["found"]] == [("9", "LD_LIBRARY_PATH"), ("9.14.0", "ldconfig"), ("9.14.0", "header")]
    assert (cudnn["version"], cudnn["source"]) == ("9.14.0", "ldconfig")


def test_no_cudnn_anywhere_is_no_key(monkeypatch):
    monkeypatch.setattr(probe, "ldconfig_cache", lambda: [])
    monkeypatch.setattr(probe, "distributions", lambda: {})
    monkeypatch.setattr(probe, "_header_dirs", lambda *env: [])
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.delenv("CUDNN_LIBRARY", raising=False)
    assert probe.cudnn() == {} and "cudnn" not in probe.toolkits()


def test_one_ldconfig_read_serves_every_library_lookup(monkeypatch):
    if probe._ldconfig_read() == []:
        pytest.skip("no ldconfig here")
    calls = []
    real_run = probe._run

    def run(cmd, timeout=20):
        if os.path.basename(cmd[0]) == "ldconfig":
            calls.append(cmd)
        return real_run(cmd, timeout)

    monkeypatch.setattr(probe, "_run", run)
    facts = probe.collect()
    assert len(calls) == 1 and {"toolkit", "amd"} <= set(facts)
    probe.collect()
    assert len(calls) == 2  # and read afresh by the next collect()


# ---------------------------------------------------------------- the Python stack

def test_the_distribution_listing_is_what_importlib_metadata_finds():
    mine = probe._distributions_read()
    theirs: dict = {}
    for d in metadata.distributions():
        theirs.setdefault(probe._normalize(d.metadata["Name"]), d.version)
    assert {k: v[1] for k, v in mine.items()} == theirs


def test_python_packages_keep_envkits_names_and_add_collect_envs(monkeypatch):
    dists = {"torch": ("torch", "2.11.0+cu130", "/s"), "flash-attn": ("flash_attn", "2.8.3", "/s"), "numpy": ("numpy", "2.5.2", "/s"),
             "nvidia-cudnn-cu13": ("nvidia_cudnn_cu13", "9.19.0.56", "/s"), "mypy-extensions": ("mypy_extensions", "1.1.0", "/s"),
             "botorch": ("botorch", "0.18.1", "/s"), "requests": ("requests", "2.32.0", "/s"), "onnx-ir": ("onnx_ir", "1.0.0", "/s")}
    monkeypatch.setattr(probe, "distributions", lambda: dists)
    pk = probe.python_stack()["packages"]
    assert list(pk)[:2] == ["torch", "flash-attn"]
    assert pk == {"torch": "2.11.0+cu130", "flash-attn": "2.8.3", "botorch": "0.18.1", "mypy-extensions": "1.1.0", "numpy": "2.5.2",
                  "nvidia-cudnn-cu13": "9.19.0.56", "onnx-ir": "1.0.0"}  # collect_env's list on the H200 machine has the same


def test_python_facts_name_the_bits_and_the_build(tmp_path, monkeypatch):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text("__version__ = '2.11.0+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\n"
                                                    "git_version = '70d99e998b8955e9d1ed8ea3fd7e7e1ab4faba94'\nhip: Optional[str] = None\n"
                                                    "xpu: Optional[str] = None\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + sys.path)
    py = probe.python_stack()
    assert py["bits"] == 64 and py["version_full"] == sys.version.replace("\n", " ") and py["implementation"] == sys.implementation.name
    assert (py["torch"], py["torch_cuda"], py["torch_debug"], py["torch_git_version"]) == ("2.11.0+cu130", "13.0", False,
                                                                                           "70d99e998b8955e9d1ed8ea3fd7e7e1ab4faba94")
    assert "torch_xpu" not in py and "torch_hip" not in py


def test_conda_packages_from_conda_meta(tmp_path, monkeypatch):
    meta = tmp_path / "conda-meta"
    meta.mkdir()
    for name in ("pytorch-2.5.1-py3.11_cuda12.4_cudnn9.1.0_0.json", "mkl-2023.1.0-h213fc3f_46344.json", "cudatoolkit-11.8.0-h6a678d5_0.json",
                 "zlib-1.2.13-h5eee18b_1.json", "history"):
        (meta / name).write_text("{}")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert probe.conda_packages() == {"conda_prefix": str(tmp_path),
                                      "conda_packages": {"cudatoolkit": "11.8.0", "mkl": "2023.1.0", "pytorch": "2.5.1"}}


# ---------------------------------------------------------------- compilers and build tools

@pytest.mark.parametrize("banner, version", [
    ("gcc (Ubuntu 13.3.0-6ubuntu2~24.04.1) 13.3.0\nThis is free software; see the source for copying conditions.\n", "13.3.0"),  # the H200 machine (one line of its banner left out)
    ("g++ (Debian 12.2.0-14+deb12u1) 12.2.0\n", "12.2.0"),
    ("Ubuntu clang version 18.1.3 (1ubuntu1)\nTarget: x86_64-pc-linux-gnu\n", "18.1.3"),
    ("clang version 19.1.7 (https://github.com/llvm/llvm-project cd708029e0b2869e80abe31ddb175f7c35361f90)\n", "19.1.7"),
    ("cmake version 4.4.3\n\nCMake suite maintained and supported by Kitware (kitware.com/cmake).\n", "4.4.3"),
    ("1.13.2.git.kitware.jobserver-pipe-1\n", "1.13.2"),  # PyPI's ninja on the H200 machine
    ("1.11.1\n", "1.11.1"),
    ("no version here\n", None),
])
def test_tool_version_banners(banner, version):
    assert probe.parse_tool_version(banner) == version


def _tool_script(path: Path, banner: str, sleep: float = 0.0) -> None:
    path.write_text(f"#!/bin/sh\n{'sleep ' + str(sleep) if sleep else ''}\necho '{banner}'\n")
    path.chmod(0o755)


def test_the_tools_run_at_once_not_one_after_another(tmp_path, monkeypatch):
    for name, banner in (("gcc", "gcc (GCC) 14.2.0"), ("g++", "g++ (GCC) 14.2.0"), ("clang", "clang version 19.1.7"),
                         ("cmake", "cmake version 3.31.6"), ("ninja", "1.12.1")):
        _tool_script(tmp_path / name, banner, sleep=0.4)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")  # each tool found here first; sleep from /usr/bin
    start = time.monotonic()
    got = probe.compilers()
    took = time.monotonic() - start
    assert {k: v["version"] for k, v in got.items()} == {"gcc": "14.2.0", "g++": "14.2.0", "clang": "19.1.7", "cmake": "3.31.6",
                                                        "ninja": "1.12.1"}
    assert took < 1.4, f"five tools of 0.4 s each took {took:.2f} s: not concurrent"
    assert Host.from_json({"compilers": got}).compilers == (("gcc", "14.2.0"), ("g++", "14.2.0"), ("clang", "19.1.7"),
                                                            ("cmake", "3.31.6"), ("ninja", "1.12.1"))


def test_a_pypi_console_script_is_skipped_for_the_binary_it_would_exec(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    script = venv / "bin" / "cmake"
    script.write_text("#!/nonexistent/python3\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom cmake import cmake\n"
                      "if __name__ == '__main__':\n    sys.exit(cmake())\n")
    script.chmod(0o755)
    binary = venv / "lib" / "python3.12" / "site-packages" / "cmake" / "data" / "bin" / "cmake"
    binary.parent.mkdir(parents=True)
    _tool_script(binary, "cmake version 4.4.3")
    _tool_script(tmp_path / "gcc", "gcc (GCC) 14.2.0")
    monkeypatch.setenv("PATH", f"{venv / 'bin'}:{tmp_path}")
    got = probe.compilers()
    assert got["cmake"] == {"path": str(script), "binary": str(binary), "version": "4.4.3", "line": "cmake version 4.4.3"}
    assert "binary" not in got["gcc"]


def test_a_tool_that_fails_is_recorded_not_raised(tmp_path, monkeypatch):
    (tmp_path / "clang").write_text("#!/bin/sh\necho 'clang: error: broken install' >&2\nexit 1\n")
    (tmp_path / "clang").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    got = probe.compilers()
    assert got == {"clang": {"path": str(tmp_path / "clang"), "error": "clang: error: broken install"}}
    assert Host.from_json({"compilers": got}).compilers == ()


# ---------------------------------------------------------------- environment variables: secrets redacted

SECRET_VALUE = "s3cr3t-value-that-must-not-appear"


def test_secret_named_variables_are_redacted():
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_IB_HCA": "mlx5", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
           "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64", "VIRTUAL_ENV": "/opt/venv", "CONDA_PREFIX": "/opt/conda",
           "NVIDIA_API_KEY": SECRET_VALUE, "TORCH_HUB_TOKEN": SECRET_VALUE, "HIP_SECRET": SECRET_VALUE, "NCCL_PASSWORD": SECRET_VALUE,
           "CUDA_auth_header": SECRET_VALUE, "TRITON_CREDENTIALS": SECRET_VALUE, "NVIDIA_URL": f"https://user:{SECRET_VALUE}@nvcr.io/v2",
           "HF_TOKEN": SECRET_VALUE, "AWS_SECRET_ACCESS_KEY": SECRET_VALUE, "HOME": "/root"}
    got = probe.env_facts(env)
    assert SECRET_VALUE not in json.dumps(got)
    assert got["vars"]["NVIDIA_API_KEY"] == got["vars"]["CUDA_auth_header"] == probe.REDACTED
    assert got["redacted"] == ["CUDA_auth_header", "HIP_SECRET", "NCCL_PASSWORD", "NVIDIA_API_KEY", "TORCH_HUB_TOKEN", "TRITON_CREDENTIALS"]
    assert got["vars"]["NVIDIA_URL"] == "https://<redacted>@nvcr.io/v2"
    assert got["vars"]["CUDA_VISIBLE_DEVICES"] == "0,1" and got["vars"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert {"HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "HOME"}.isdisjoint(got["vars"])  # not named by a prefix: not collected at all
    _valid({"schema": 1, "env": got})


def test_no_secret_reaches_the_probes_output(tmp_path):
    env = {**os.environ, "NVIDIA_API_KEY": SECRET_VALUE, "TORCH_TOKEN": SECRET_VALUE, "NCCL_SOCKET_PASSWORD": SECRET_VALUE,
           "CUDA_URL": f"https://me:{SECRET_VALUE}@host/x", "HF_TOKEN": SECRET_VALUE}
    p = subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert SECRET_VALUE not in p.stdout and SECRET_VALUE not in p.stderr
    assert json.loads(p.stdout)["env"]["vars"]["NVIDIA_API_KEY"] == probe.REDACTED


# ---------------------------------------------------------------- sections

def test_sections_select_what_is_collected(monkeypatch):
    called = []
    for name, fn in probe.COLLECTORS.items():
        monkeypatch.setattr(probe, fn, lambda name=name: called.append(name) or {"from": name})
    monkeypatch.setattr(probe, "deep", lambda: {"deep": True})
    assert probe.collect(sections=("python",)) == {"schema": 1, "sections": ["python"], "python": {"from": "python"}}
    assert called == ["python"]
    got = probe.collect(deep_mode=True, sections="os,python")
    assert list(got) == ["schema", "sections", "python", "os", "deep"] and got["sections"] == ["python", "os"]
    assert "deep" not in probe.collect(deep_mode=True, sections=["cpu", "numa"])  # deep is the interpreter's, with python
    whole = probe.collect()
    assert list(whole) == ["schema", *probe.SECTIONS] and "sections" not in whole
    with pytest.raises(ValueError, match="unknown probe section gpus"):
        probe.collect(sections=("gpus",))
    with pytest.raises(ValueError):
        probe.collect(sections=())


def test_a_collector_that_raises_or_hangs_is_its_sections_probe_error(monkeypatch):
    monkeypatch.setattr(probe, "cpu_facts", lambda: 1 / 0)
    monkeypatch.setattr(probe, "numa_facts", lambda: time.sleep(5) or {})
    monkeypatch.setattr(probe, "SECTION_TIMEOUT", 0.5)
    start = time.monotonic()
    got = probe.collect(sections=("cpu", "numa", "env"))
    assert time.monotonic() - start < 3
    assert got["cpu"] == {"probe_error": "ZeroDivisionError: division by zero"}
    assert got["numa"]["probe_error"].startswith("TimeoutError") and "vars" in got["env"]


def test_the_command_line_prints_only_the_sections_asked_for():
    p = subprocess.run([sys.executable, str(PROBE), "--section", "python", "--section=os"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    doc = _valid(json.loads(p.stdout))
    assert list(doc) == ["schema", "sections", "python", "os"] and doc["python"]["executable"] == sys.executable
    bad = subprocess.run([sys.executable, str(PROBE), "--section", "gpus"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown probe section gpus" in bad.stderr and not bad.stdout
    assert subprocess.run([sys.executable, str(PROBE), "--frobnicate"], capture_output=True, text=True, timeout=60).returncode == 2


# ---------------------------------------------------------------- the probe as a whole: no torch, stdlib only

SITECUSTOMIZE = """
import sys
class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            open({marker!r}, "a").write(name + "\\n")
            raise ImportError("the probe imported " + name)
        return None
sys.meta_path.insert(0, _NoTorch())
"""


def test_the_whole_probe_imports_no_torch_and_only_the_standard_library(tmp_path):
    marker = tmp_path / "torch-imported"
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE.format(marker=str(marker)))
    code = textwrap.dedent(f"""
        import json, sys, runpy
        before = set(sys.modules)
        sys.argv = ["probe.py"]
        g = runpy.run_path({str(PROBE)!r}, run_name="probe_main")
        facts = g["collect"]()
        new = sorted(m.split(".")[0] for m in set(sys.modules) - before)
        print(json.dumps({{"facts": facts, "modules": new}}))
    """)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert not marker.exists(), marker.read_text()
    assert {"os", "cpu", "numa", "compilers", "env", "python", "toolkit"} <= set(out["facts"])
    foreign = {m for m in out["modules"] if m not in sys.stdlib_module_names and not m.startswith("_")} - {"pynvml", "sitecustomize"}
    assert not foreign, foreign
    _valid(out["facts"])


def test_this_hosts_record_validates_and_host_reads_it():
    facts = _valid(probe.collect())
    h = Host.from_json(facts)
    assert h.kernel == os.uname().release and h.machine == os.uname().machine
    assert h.cpu_count == facts["cpu"]["logical"] >= 1 and h.numa_nodes == (facts["numa"] or {}).get("count")


# ---------------------------------------------------------------- Host: the new facts, typed

H200 = {"os": {"name": "Ubuntu 24.04.3 LTS", "kernel": "6.18.44-fc-v973-gpu", "machine": "x86_64", "libc": "glibc", "libc_version": "2.39"},
        "cpu": {"model": "Intel(R) Xeon(R) Processor", "logical": 16, "flags": ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]},
        "numa": {"count": 1, "nodes": [{"node": 0, "cpulist": "0-15", "cpus": 16}]},
        "compilers": {"gcc": {"version": "13.3.0"}, "g++": {"version": "13.3.0"}, "cmake": {"version": "4.4.3"}},
        "toolkit": {"cudnn": {"version": "9.19.0.56", "source": "pip", "found": [{"version": "9.19.0.56", "source": "pip"},
                                                                                 {"version": "9.14.0", "source": "ldconfig"}]}}}


def test_host_reads_the_new_facts():
    h = Host.from_json(H200)
    assert (h.os_name, h.glibc, h.kernel, h.machine) == ("Ubuntu 24.04.3 LTS", "2.39", "6.18.44-fc-v973-gpu", "x86_64")
    assert (h.cpu_model, h.cpu_count, h.numa_nodes, h.numa_cpus) == ("Intel(R) Xeon(R) Processor", 16, 1, ("0-15",))
    assert h.compilers == (("gcc", "13.3.0"), ("g++", "13.3.0"), ("cmake", "4.4.3")) and h.cudnn == "9.19.0.56" and h.nccl is None
    assert Host.from_json({"os": {"libc": "musl", "libc_version": "1.2.5"}}).glibc is None


@pytest.mark.parametrize("facts, key", [
    ({"os": {"name": 24}}, "os.name"), ({"os": "Ubuntu"}, "os"), ({"cpu": {"logical": "16"}}, "cpu.logical"),
    ({"cpu": {"logical": True}}, "cpu.logical"), ({"cpu": {"flags": "avx2"}}, "cpu.flags"), ({"numa": {"count": -1}}, "numa.count"),
    ({"numa": {"nodes": [{"cpulist": 5}]}}, "numa.nodes[0].cpulist"), ({"compilers": {"gcc": "13.3.0"}}, "compilers.gcc"),
    ({"compilers": {"gcc": {"version": 13}}}, "compilers.gcc.version"), ({"toolkit": {"cudnn": {"version": 9}}}, "toolkit.cudnn.version"),
    ({"toolkit": {"nccl": {"found": {"version": "2"}}}}, "toolkit.nccl.found"),
])
def test_a_new_fact_of_the_wrong_type_is_an_input_error_naming_its_key(facts, key):
    with pytest.raises(InputError, match=f"facts key {key.replace('[', '.').replace(']', '.')}"):
        Host.from_json(facts)


def test_a_failed_compilers_collector_reads_as_no_compilers():
    assert Host.from_json({"compilers": {"probe_error": "RuntimeError: x"}}).compilers == ()


OLD_RECORDS = ("probe-deep.json", "doctor-deep.json", "doctor-nvml-pynvml.json", "doctor-nvml-ctypes.json")


@pytest.mark.parametrize("name", OLD_RECORDS)
def test_recorded_facts_of_before_still_read(name):
    doc = json.loads((ROOT / "docs" / "gpu" / "doctor" / name).read_text())
    h = Host.from_json(doc.get("facts", doc))
    assert h.gpus and h.os_name is None and h.compilers == () and h.cudnn is None


def test_the_h200_machines_record_of_the_host_facts():
    """docs/gpu/doctor/probe-host-facts.json: `python probe.py` on the H200 machine (docs/doctor-h200.md)."""
    doc = _valid(json.loads((ROOT / "docs" / "gpu" / "doctor" / "probe-host-facts.json").read_text()))
    before = json.loads((ROOT / "docs" / "gpu" / "doctor" / "probe-deep.json").read_text())
    assert set(before) - {"deep"} <= set(doc) and all(set(before[k]) <= set(doc[k]) for k in ("nvidia", "toolkit", "python"))
    h = Host.from_json(doc)
    assert (h.os_name, h.glibc, h.machine, h.cpu_count, h.numa_nodes) == ("Ubuntu 24.04.3 LTS", "2.39", "x86_64", 16, 1)
    assert h.cudnn_found == (("9.19.0.56", "pip"), ("9.14.0", "ldconfig")) and h.nccl_found == (("2.28.9", "pip"), ("2.28.3", "ldconfig"))
    assert h.compilers == (("gcc", "13.3.0"), ("g++", "13.3.0"), ("cmake", "4.4.3"), ("ninja", "1.13.2"))
    assert doc["compilers"]["cmake"]["binary"].endswith("site-packages/cmake/data/bin/cmake")  # PyPI's cmake, run without its script
    assert {"amx_tile", "amx_bf16", "avx512_bf16"} <= set(doc["cpu"]["flags"])


def test_the_report_shows_the_host_facts_in_a_few_lines():
    from rich.console import Console

    h = Host.from_json({**H200, "toolkit": {**H200["toolkit"], "nccl": {"version": "2.28.9", "found": [
        {"version": "2.28.9", "source": "pip"}, {"version": "2.28.3", "source": "header"}]}}})
    c = Console(record=True, width=200, color_system=None)
    report.print_doctor(h, [], None, c)
    text = c.export_text()
    lines = [l.rstrip() for l in text.splitlines()]
    assert "OS         Ubuntu 24.04.3 LTS, glibc 2.39, kernel 6.18.44-fc-v973-gpu, x86_64" in lines
    assert "CPU        Intel(R) Xeon(R) Processor, 16 CPUs, 1 NUMA node; avx2 avx512f avx512_bf16 amx_bf16" in lines
    assert "build      gcc 13.3.0, g++ 13.3.0, cmake 4.4.3" in lines
    assert "libraries  cuDNN 9.19.0.56 (pip), also 9.14.0 (ldconfig); NCCL 2.28.9 (pip), also 2.28.3 (header)" in lines
    assert len(lines) <= 7
    c = Console(record=True, width=200, color_system=None)
    report.print_doctor(Host(), [], None, c)
    assert "OS " not in c.export_text() and "CPU " not in c.export_text()
