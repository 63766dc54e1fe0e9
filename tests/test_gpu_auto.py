"""--gpu auto: resolve for the host envkit reads, from the recorded facts of four hosts (tests/fixtures/hosts: the
H200 machine's own probe, and three public collect_env reports written in the probe's format, each with its _source):
the GPUs (their matrix row, else the arch), the NVIDIA driver, the CPU architecture and the Python, filled in where no
flag says otherwise, and said in the answer."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.config import matrix_file
from envkit.core.resolve.auto import host_flags
from envkit.errors import InputError
from envkit.model.flags import ResolveFlags
from envkit.model.host_view import HostView

ROOT = Path(__file__).resolve().parent.parent
HOSTS = ROOT / "tests" / "fixtures" / "hosts"
M = matrix_file.load()


def resolve(*args: str) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "envkit", "resolve", *args, "--json"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    return p.returncode, json.loads(p.stdout)


def facts(name: str) -> str:
    return str(HOSTS / f"{name}.json")


def test_the_h200_resolves_for_its_gpu_driver_and_python():
    rc, doc = resolve("--gpu", "auto", "--host-facts", facts("h200"))
    assert rc == 0 and doc["ok"]
    assert doc["query"] == {"gpu": "H200", "driver": "580.159.04", "platform_arch": "x86_64", "python": "3.12"}
    assert doc["host"] == {"from": f"facts file {facts('h200')}", "gpus": "NVIDIA H200 (sm_90)", "driver": "580.159.04",
                           "machine": "x86_64", "python": "3.12.3 (/opt/torch/.venv/bin/python3)"}
    sol = doc["solution"]
    assert sol["gpu"]["name"] == "H200" and sol["python"] == "3.12" and sol["toolkit"]["version"].startswith("13.")
    assert "9.0" in sol["torch"]["archs"] and "machine" not in sol


def test_an_rtx_4090_on_r535_gets_a_cuda_12_stack_its_driver_runs():
    rc, doc = resolve("--gpu", "auto", "--host-facts", facts("rtx4090-r535"))
    assert rc == 0, doc
    sol = doc["solution"]
    assert doc["query"]["gpu"] == "RTX 4090" and doc["query"]["driver"] == "535.183.01" and sol["python"] == "3.10"
    assert sol["toolkit"]["version"].startswith("12.") and {"8.6", "8.9"} & set(sol["torch"]["archs"])  # sm_86 SASS runs on sm_89


def test_a_gb200_is_an_aarch64_host_and_its_r570_driver_is_named():
    """Four GB200s on R570, aarch64: the only aarch64 CUDA builds whose arch list is measured are PyPI's cu130/cu132
    (torch 2.11 and newer), which need R580; the index's cu12x aarch64 builds exist but no source states their arch
    list. So the answer is the driver, said as such; without the driver the stack is an aarch64 one."""
    rc, doc = resolve("--gpu", "auto", "--host-facts", facts("gb200"))
    assert rc == 1
    assert doc["host"]["gpus"] == "NVIDIA GB200 (sm_100) x4" and doc["host"]["machine"] == "aarch64"
    assert doc["query"]["platform_arch"] == "aarch64"
    assert [c["rule"] for c in doc["conflicts"]] == ["driver.too-old"]
    assert "570.172.08" in doc["conflicts"][0]["message"]
    rc, upgraded = resolve("--gpu", "auto", "--host-facts", facts("gb200"), "--driver", "580.95.05")
    assert rc == 0, upgraded
    sol = upgraded["solution"]
    assert sol["machine"] == "aarch64" and "10.0" in sol["torch"]["archs"] and sol["python"] == "3.12"
    assert upgraded["query"]["driver"] == "580.95.05"  # the flag given wins over the facts


def test_an_mi300x_gets_a_rocm_stack_for_gfx942():
    rc, doc = resolve("--gpu", "auto", "--host-facts", facts("mi300x"))
    assert rc == 0, doc
    assert doc["query"]["gpu"] == "MI300X" and "driver" not in doc["query"]  # no NVIDIA driver to read
    assert doc["solution"]["platform"] == "rocm" and "gfx942" in doc["solution"]["torch"]["archs"]


def _view(*gpus: tuple[str, str, str], machine: str = "x86_64") -> HostView:
    from envkit.model.host_view import SeenGpu

    return HostView("a test host", tuple(SeenGpu(n, v, a) for n, v, a in gpus), "550.54.15", machine, "3.11.9", "/usr/bin/python3")


def test_gpus_of_two_archs_are_a_question_naming_both():
    with pytest.raises(InputError) as e:
        host_flags(M, ResolveFlags(gpu="auto"), _view(("NVIDIA A100-SXM4-80GB", "nvidia", "sm_80"), ("NVIDIA H100 80GB HBM3", "nvidia", "sm_90")))
    assert "GPUs of 2 archs" in e.value.message and "--gpu sm_80 or --gpu sm_90" in e.value.fix


def test_two_products_of_one_arch_resolve_by_the_arch_and_unknown_names_by_theirs():
    flags, read = host_flags(M, ResolveFlags(gpu="auto"), _view(("NVIDIA H100 80GB HBM3", "nvidia", "sm_90"), ("NVIDIA H200", "nvidia", "sm_90")))
    assert flags.gpu == "sm_90" and dict(read)["gpus"] == "NVIDIA H100 80GB HBM3 (sm_90), NVIDIA H200 (sm_90)"
    flags, _ = host_flags(M, ResolveFlags(gpu="auto", python="3.10"), _view(("NVIDIA GH200 480GB", "nvidia", "sm_90"), machine="aarch64"))
    assert (flags.gpu, flags.platform_arch, flags.python, flags.driver) == ("GH200", "aarch64", "3.10", "550.54.15")


def test_a_host_without_a_gpu_says_how_to_record_one():
    with pytest.raises(InputError) as e:
        host_flags(M, ResolveFlags(gpu="auto"), HostView("this host", nvml_error="libnvidia-ml.so.1 not found"))
    assert "has no GPU envkit can see (NVML: libnvidia-ml.so.1 not found)" in e.value.message
    assert "--host-facts facts.json" in e.value.fix


@pytest.mark.parametrize("args, needle", [
    (["--gpu", "H100", "--host-facts", "x.json"], "--host-facts is what --gpu auto reads"),
    (["--gpu", "auto", "--host-facts", "/nonexistent/facts.json"], "facts file"),
    (["--platform-arch", "riscv64"], "is not a CPU architecture envkit builds for"),
    (["--gpu", "GB200", "--platform-arch", "x86_64"], "is an aarch64 system"),
])
def test_bad_auto_input_is_one_line_and_exit_2(args, needle):
    p = subprocess.run([sys.executable, "-m", "envkit", "resolve", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and needle in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_auto_is_refused_where_no_host_is_read():
    from envkit.core.resolve import parse_query

    with pytest.raises(InputError, match="--gpu auto reads the GPU host's facts"):
        parse_query(M, ResolveFlags(gpu="auto"))
