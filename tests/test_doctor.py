"""The doctor on plain data: parsers on recorded real outputs (tests/fixtures/doctor/, sources in
its README), and the judge on broken hosts drawn from public reports (tests/doctor_cases/*.toml,
each citing its report)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from envkit.config import matrix_file as mx
from envkit.inimage import probe
from envkit.core.judge_for import for_findings
from envkit.model.flags import ResolveFlags, parse_flag_string
from envkit.errors import InputError
from envkit.model.host import GpuFact, Host
from envkit.core.judge import healthy, judge

ROOT = Path(__file__).resolve().parent


def _for(text: str) -> ResolveFlags:
    return parse_flag_string(text)
FIX = ROOT / "fixtures" / "doctor"
M = mx.load()


def _cases():
    out = []
    for f in sorted((ROOT / "doctor_cases").glob("*.toml")):
        for c in tomllib.loads(f.read_text())["case"]:
            out.append(pytest.param(c, id=f"{f.stem}:{c['name']}"))
    return out


CASES = _cases()


def test_there_are_at_least_ten_cited_broken_hosts():
    assert len(CASES) >= 10
    assert all(c.values[0]["source"].startswith("https://") for c in CASES)


@pytest.mark.parametrize("case", CASES)
def test_broken_host_from_a_public_report_gets_the_expected_findings(case):
    findings = judge(M, Host.from_case(case["facts"]))
    found = {f.rule for f in findings}
    assert set(case["expect"]) <= found, f"{case['source']}: expected {case['expect']}, found {sorted(found)}"
    assert not healthy(findings)
    for f in findings:
        assert f.fix and f.source and f.why


def test_a_healthy_h200_host_has_no_errors():
    h = Host(driver="580.159.04", cuda_driver="13.0", gpus=(GpuFact("NVIDIA H200", "9.0", 140.0, True),), nvcc="13.0",
             torch="2.11.0+cu130", torch_cuda="13.0", torch_archs=("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"),
             torch_cxx11abi=True, cuda_available=True)
    assert healthy(judge(M, h)), judge(M, h)


@pytest.mark.parametrize("host", [
    # an L4 (sm_89) with torch 2.1.2+cu121: sm_86 SASS runs on it
    Host(driver="535.104.05", cuda_driver="12.2", gpus=(GpuFact("NVIDIA L4", "8.9"),), torch="2.1.2+cu121", torch_cuda="12.1",
         torch_archs=("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"), torch_cxx11abi=False, cuda_available=True),
    # a system CUDA 11.8 toolkit in the ldconfig cache beside pip's CUDA 12 runtime, and an old nvcc nobody compiles with
    Host(driver="550.54.15", cuda_driver="12.4", gpus=(GpuFact("NVIDIA RTX 6000 Ada Generation", "8.9"),), nvcc="11.7",
         torch="2.4.1+cu124", torch_cuda="12.4", cuda_runtimes=("/usr/local/cuda-11.8/lib64/libcudart.so.11.0",
                                                                 "/venv/lib/python3.10/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12")),
    # an A100 on a 12.x driver running a cu118 torch (forward across minors is fine)
    Host(driver="535.104.05", cuda_driver="12.2", gpus=(GpuFact("NVIDIA A100-SXM4-80GB", "8.0"),), torch="2.1.2+cu118", torch_cuda="11.8",
         flash_attn="2.5.8", vllm="0.2.7"),
])
def test_healthy_hosts_get_no_errors_or_warnings(host):
    findings = judge(M, host)
    assert healthy(findings), [f.rule for f in findings]


def test_a_cpu_torch_on_a_gpu_host_is_found_by_deep_without_a_cpu_suffix():
    rec = {"nvidia": {"driver": "570.86.15", "cuda_driver": "12.8", "gpus": [{"name": "NVIDIA GH200 480GB", "cc": "9.0"}]},
           "python": {"torch": "2.4.0"}, "deep": {"torch": "2.4.0", "torch_cuda": None, "torch_archs": [], "cuda_available": False}}
    assert "torch.cpu-build" in {f.rule for f in judge(M, Host.from_json(rec))}


def test_a_flash_attn_wheel_for_another_cuda_major_is_found():
    h = Host(torch="2.1.2+cu121", torch_cuda="12.1", flash_attn="2.5.8",
             flash_attn_wheel="flash_attn-2.5.8+cu118torch2.1cxx11abiFALSE-cp310-cp310-linux_x86_64.whl", torch_cxx11abi=False)
    assert [f.rule for f in judge(M, h) if f.severity == "error"] == ["flash-attn.torch-mismatch"]


def test_no_gpu_at_all_is_information_not_a_failure():
    findings = judge(M, Host(nvml_error="libnvidia-ml.so.1 not found"))
    assert [f.rule for f in findings] == ["host.no-gpu"] and healthy(findings)


def test_for_explains_why_a_stack_cannot_work_here():
    h = Host(driver="470.82.01", cuda_driver="11.4", gpus=(GpuFact("Tesla V100-SXM2-32GB", "7.0"),))
    findings = for_findings(M, h, _for("--flash-attn 2"))
    assert [f.rule for f in findings] == ["flash-attn.gpu-arch"] and findings[0].severity == "error"


def test_for_says_when_a_stack_works_and_warns_about_the_hosts_nvcc():
    h = Host(driver="580.159.04", gpus=(GpuFact("NVIDIA H200", "9.0"),), nvcc="13.0")
    rules = [f.rule for f in for_findings(M, h, _for("--torch 2.4 --flash-attn 2.6 --kernels rotary"))]
    assert rules == ["kernels.nvcc-torch-cuda", "for.works"]


@pytest.mark.parametrize("host, text, expect", [
    (Host(nvml_error="libnvidia-ml.so.1 not found"), "--gpu H100 --torch 2.4", ["for.no-gpu"]),
    (Host(), "--torch 2.4 --flash-attn 2.6", ["for.no-gpu"]),
    (Host(nvml_error="Driver/library version mismatch", kernel_module="580.173.02"), "--gpu A100 --torch 2.4", ["for.no-gpu"]),
    (Host(nvcc="13.0"), "--gpu H100 --torch 2.4 --flash-attn 2.6 --kernels rotary", ["kernels.nvcc-torch-cuda", "for.no-gpu"]),
    (Host(), "--platform cpu", ["for.works"]),            # a CPU stack does work on a host without a GPU
    (Host(), "--gpu V100 --flash-attn 2", ["flash-attn.gpu-arch"]),  # a stack that cannot resolve is still an error
])
def test_newcomer_2_doctor_for_on_a_host_without_a_gpu_says_so(host, text, expect):
    """newcomer review 2: `doctor --for "--gpu H100 --torch 2.4"` on a host with no GPU said "this stack resolves on
    this host". It is a warning naming that no GPU was seen: the stack was checked against the flags alone."""
    findings = for_findings(M, host, _for(text))
    assert [f.rule for f in findings] == expect
    for f in findings:
        if f.rule == "for.no-gpu":
            assert f.severity == "warning" and "no GPU was seen on this host" in f.seen and "flags alone" in f.why
            assert (host.nvml_error or "no GPU") in f.seen and f.fix.startswith("run envkit doctor --for on the GPU host")
    assert not any("resolves on this host" in f.why for f in findings if f.rule != "for.works")
    assert healthy(findings) == (expect == ["for.works"])


def test_newcomer_2_doctor_for_without_a_gpu_through_the_cli(tmp_path):
    f = tmp_path / "facts.json"
    f.write_text(json.dumps({"schema": 1, "nvidia": {"nvml": {"via": "pynvml"}, "nvml_error": "libnvidia-ml.so.1 not found"}}))
    p = subprocess.run([sys.executable, "-m", "envkit", "doctor", "--facts", str(f), "--for", "--gpu H100 --torch 2.4", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert sorted(x["rule"] for x in doc["findings"]) == ["for.no-gpu", "host.no-gpu"] and doc["ok"] is False


@pytest.mark.parametrize("text", ["--torch", "--gpu H100 --frobnicate 3", "--torch '2.4"])
def test_bad_for_strings_are_input_errors(text):
    with pytest.raises(InputError):
        _for(text)


# ---------------------------------------------------------------- parsers on recorded outputs

def _fixture(name: str) -> str:
    path = FIX / name
    assert path.is_file(), f"fixture {name} is missing (see tests/fixtures/doctor/README.md)"
    return path.read_text()


def test_both_nvidia_smi_banners_parse():
    old = probe.parse_nvidia_smi(_fixture("nvidia_smi_old_banner.txt"))
    new = probe.parse_nvidia_smi(_fixture("nvidia_smi_new_banner.txt"))
    for parsed in (old, new):
        assert parsed["driver"].count(".") >= 1 and parsed["cuda_driver"].count(".") == 1


def test_the_version_mismatch_output_is_recognised():
    parsed = probe.parse_nvidia_smi(_fixture("nvidia_smi_version_mismatch.txt"))
    assert "mismatch" in parsed["nvml_error"].lower()
    findings = judge(M, Host(nvml_error=parsed["nvml_error"]))
    assert findings[0].rule == "driver.library-mismatch" and findings[0].severity == "error"


def test_the_mismatch_finding_names_both_versions_from_the_same_host():
    smi = probe.parse_nvidia_smi(_fixture("nvidia_smi_version_mismatch.txt"))
    kmod = probe.parse_proc_version(_fixture("proc_driver_nvidia_version.txt"))["driver"]
    h = Host.from_json({"nvidia": {**smi, "kernel_module": kmod}})
    f = judge(M, h)[0]
    assert f.rule == "driver.library-mismatch" and "NVML library 580.178" in f.seen and "kernel module 580.173.02" in f.seen


def test_rocm_smi_json_names_the_card_and_its_gfx():
    parsed = probe.parse_rocm_json(_fixture("rocm_smi_json.txt"))
    assert parsed["gpus"] == [{"name": "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2", "arch": "gfx9010"}]


def test_hy_smi_counts_the_dcus():
    assert probe.parse_hy_smi(_fixture("hy_smi.txt")) == {"dcu_count": 4}


def test_proc_driver_version_parses():
    assert probe.parse_proc_version(_fixture("proc_driver_nvidia_version.txt"))["driver"].count(".") >= 1


def test_torch_version_py_is_read_without_importing_torch():
    text = "__version__ = '2.11.0+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n"
    assert probe.parse_torch_version_py(text) == {"torch": "2.11.0+cu130", "torch_cuda": "13.0"}


def test_nvcc_banner_parses():
    text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n"
    assert probe.parse_nvcc(text) == {"nvcc": "13.0", "nvcc_full": "13.0.88"}


def test_the_probe_runs_with_the_standard_library_only_and_never_imports_torch(tmp_path):
    # a fake torch that records being imported: the default probe must not import it
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    (tmp_path / "torch" / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n")
    code = ("import sys, json, importlib.util as u; s = u.spec_from_file_location('p', sys.argv[1]); m = u.module_from_spec(s); "
            "s.loader.exec_module(m); print(json.dumps(m.collect()))")
    p = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT.parent / "envkit" / "inimage" / "probe.py")], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["schema"] == 1 and {"nvidia", "amd", "toolkit", "python"} <= set(rec)
    assert rec["python"]["torch"] == "2.11.0+cu130" and rec["python"]["torch_cuda"] == "13.0"  # read from version.py
    assert rec["nvidia"]["nvml"] == {"via": "ctypes"}  # no nvidia-ml-py on this path: the probe's own ctypes binding
    assert not (tmp_path / "imported").exists()


def test_doctor_cli_on_recorded_facts_exits_1_with_json(tmp_path):
    rec = {"schema": 1, "nvidia": {"driver": "470.82.01", "cuda_driver": "11.4", "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "cc": "8.0"}]},
           "python": {"packages": {"torch": "2.4.1"}, "torch": "2.4.1+cu124", "torch_cuda": "12.4"}}
    f = tmp_path / "facts.json"
    f.write_text(json.dumps(rec))
    p = subprocess.run([sys.executable, "-m", "envkit", "doctor", "--facts", str(f), "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert doc["ok"] is False and doc["findings"][0]["rule"] == "driver.too-old"


@pytest.mark.parametrize("facts", ['{"nvidia": "x"}', '{"nvidia": {"gpus": "abc"}}', '{"nvidia": {"gpus": [{"name": "A", "cc": 8.0}]}}',
                                   '{"toolkit": {"ld_library_path": null}}', '{"deep": {"import_errors": []}}', "[1, 2]"])
def test_doctor_cli_on_mistyped_facts_is_one_line(tmp_path, facts):
    (tmp_path / "f.json").write_text(facts)
    p = subprocess.run([sys.executable, "-m", "envkit", "doctor", "--facts", str(tmp_path / "f.json")], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in p.stderr and p.returncode in (0, 1, 2), p.stderr
    if p.returncode == 2:
        assert p.stderr.startswith("envkit: error: ")


def test_doctor_cli_bad_facts_file_is_one_line(tmp_path):
    (tmp_path / "f.json").write_text("{not json")
    p = subprocess.run([sys.executable, "-m", "envkit", "doctor", "--facts", str(tmp_path / "f.json")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("envkit: error: cannot read facts file") and "Traceback" not in p.stderr


def test_selftest_arch_check_accepts_sass_of_the_same_major_and_ptx():
    from envkit.inimage.selftest import arch_runs

    cu121 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    assert arch_runs((8, 9), cu121)            # L4 / RTX 4090: sm_86 SASS runs
    assert not arch_runs((12, 0), cu121)       # RTX 5090: no sm_12x, no PTX
    assert arch_runs((12, 0), cu121 + ["compute_90"])
    assert not arch_runs((7, 0), ["sm_75", "sm_80"])


# ---------------------------------------------------------------- doctor --deep says what it waits for

class _Said:
    """A Reporter that records what is said, beside the probe's own events (app.reporter.Silent otherwise)."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def say(self, message: str) -> None:
        self.events.append("say: " + message)

    def __getattr__(self, name: str):
        return lambda *a, **k: None


@pytest.mark.parametrize("deep, said", [(True, True), (False, False)])
def test_newcomer_1_7_doctor_deep_says_it_waits_for_the_subprocess_before_it_starts(deep, said, monkeypatch):
    """newcomer review 1.7: doctor --deep showed nothing while a subprocess imported torch (up to 120 s)."""
    from envkit.app import doctor as app_doctor

    events: list[str] = []
    def collect(deep_mode=False, sections=None):
        events.append(f"probe deep={deep_mode} {'host' if sections and 'python' not in sections else 'python'}")
        return {"schema": 1, "python": {"python": "3.11.7", "executable": sys.executable}}

    monkeypatch.setattr(app_doctor.probe, "collect", collect)
    app_doctor.run(deep=deep, reporter=_Said(events), pythons=(sys.executable,), images=False)  # envkit's own: read in-process
    if said:
        assert len(events) == 3 and events[1:] == ["probe deep=False host", "probe deep=True python"], events
        assert events[0].startswith("say: doctor --deep: importing torch") and f"at most {probe.DEEP_TIMEOUT:.0f} s" in events[0]
    else:
        assert events == ["probe deep=False host", "probe deep=False python"]


def test_newcomer_1_7_doctor_deep_status_line_goes_to_stderr_and_quiet_drops_it():
    cmd = [sys.executable, "-m", "envkit"]
    p = subprocess.run(cmd + ["doctor", "--deep", "--json"], capture_output=True, text=True, timeout=200)
    assert p.returncode in (0, 1), p.stderr
    assert json.loads(p.stdout)["facts"]["deep"] is not None and "doctor --deep: importing torch" in p.stderr
    q = subprocess.run(cmd + ["-q", "doctor", "--deep", "--json"], capture_output=True, text=True, timeout=200)
    assert q.returncode == p.returncode and "importing torch" not in q.stderr, q.stderr
