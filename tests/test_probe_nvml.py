"""The probe's two NVML bindings on the same GPU data (issue 14: NVML through nvidia-ml-py where it imports, the
ctypes binding kept only for images without it; newcomer review, section 4, `probe._Nvml`).

No GPU here: the GPU is a plain-data description (NVML function name -> the values it returns), served once as a
fake `pynvml` module (injected in sys.modules) and once as a fake libnvidia-ml.so.1 (through probe._ctypes_library,
answering the ctypes calls by filling their out-parameters). Both must give the same facts document."""
from __future__ import annotations

import ctypes
import json
import sys
import types
from pathlib import Path
from typing import Any, Callable

import jsonschema
import pytest

from envkit.config import matrix_file as mx
from envkit.core.judge import judge
from envkit.inimage import probe
from envkit.model.host import Host

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "envkit" / "data" / "schemas" / "facts.schema.json").read_text())

NOT_SUPPORTED, LIBRARY_NOT_FOUND, FUNCTION_NOT_FOUND, MISMATCH = 3, 12, 13, 18
ERRORS = {NOT_SUPPORTED: "Not Supported", FUNCTION_NOT_FOUND: "Function Not Found", MISMATCH: "Driver/library version mismatch"}
UNSUPPORTED = "unsupported"  # a value: the function exists, the device answers NVML_ERROR_NOT_SUPPORTED

# one H200 as the H200 machine's NVML reported it (docs/gpu/doctor/probe-deep.json), plus power and PCIe
H200: dict[str, Any] = {
    "nvmlDeviceGetName": "NVIDIA H200", "nvmlDeviceGetCudaComputeCapability": (9, 0), "memory_total": 150754820096,
    "nvmlDeviceGetEccMode": (1, 1), "nvmlDeviceGetRemappedRows": (0, 0, 0, 0), "nvmlDeviceGetCurrentClocksEventReasons": (1,),
    "nvmlDeviceGetEnforcedPowerLimit": (700000,), "nvmlDeviceGetCurrPcieLinkGeneration": (5,), "nvmlDeviceGetCurrPcieLinkWidth": (16,),
    "nvmlDeviceGetMaxPcieLinkGeneration": (5,), "nvmlDeviceGetMaxPcieLinkWidth": (16,)}
# an older GeForce on an older driver: no remapped rows or clock *event* reasons (throttle reasons instead), ECC and
# power not supported, a remapped-rows call the library lacks
T4_OLD = {"nvmlDeviceGetName": "Tesla T4", "nvmlDeviceGetCudaComputeCapability": (7, 5), "memory_total": 16106127360,
          "nvmlDeviceGetEccMode": UNSUPPORTED, "nvmlDeviceGetCurrentClocksThrottleReasons": (4,),
          "nvmlDeviceGetEnforcedPowerLimit": UNSUPPORTED, "nvmlDeviceGetCurrPcieLinkGeneration": (1,),
          "nvmlDeviceGetCurrPcieLinkWidth": (16,), "nvmlDeviceGetMaxPcieLinkGeneration": (3,), "nvmlDeviceGetMaxPcieLinkWidth": (16,)}

HOSTS = {
    "one H200": {"driver": "580.159.04", "cuda": 13000, "gpus": [H200]},
    "two GPUs, an old driver": {"driver": "470.82.01", "cuda": 11040, "gpus": [T4_OLD, dict(T4_OLD, nvmlDeviceGetName="Tesla T4 #2")],
                                "missing": {"nvmlDeviceGetRemappedRows", "nvmlDeviceGetCurrentClocksEventReasons"}},
    "a GPU whose handle cannot be had": {"driver": "550.54.15", "cuda": 12040, "gpus": [H200, {"handle": NOT_SUPPORTED}]},
    "no CUDA driver version": {"driver": "550.54.15", "cuda": None, "gpus": []},
    "mismatch at init": {"init": MISMATCH},
    "mismatch when asked the driver": {"driver": MISMATCH, "gpus": [H200]},
    "a name the GPU will not give": {"driver": "550.54.15", "cuda": 12040, "gpus": [dict(H200, nvmlDeviceGetName=NOT_SUPPORTED)]},
    "no library": {"no_library": True},
}

DEVICE_FUNCTIONS = [k for k in {**H200, **T4_OLD} if k.startswith("nvml") and k != "nvmlDeviceGetName"]


# ---------------------------------------------------------------- the fake pynvml module

def fake_pynvml(host: dict[str, Any], calls: list[str]) -> types.ModuleType:
    """nvidia-ml-py's call surface, answered from `host`: plain return values, pynvml.NVMLError on failure."""
    nv = types.ModuleType("pynvml")
    missing = host.get("missing", set())

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return f"NVML Error with code {self.value}"

    def fn(name: str, body: Callable[..., Any]) -> None:
        if name in missing:  # an old driver: pynvml answers Function Not Found
            def absent(*args: Any) -> Any:
                raise NVMLError(FUNCTION_NOT_FOUND)
            setattr(nv, name, absent)
            return

        def call(*args: Any) -> Any:
            calls.append(name)
            return body(*args)
        setattr(nv, name, call)

    def answer(value: Any) -> Any:
        if isinstance(value, int) or value == UNSUPPORTED:
            raise NVMLError(NOT_SUPPORTED if value == UNSUPPORTED else value)
        return value

    def init() -> None:
        if host.get("no_library"):
            raise NVMLError(LIBRARY_NOT_FOUND)
        if host.get("init"):
            raise NVMLError(host["init"])

    def device(name: str, scalar: bool) -> Callable[[int], Any]:
        def get(h: int) -> Any:
            v = host["gpus"][h].get(name, UNSUPPORTED)
            v = answer(v)
            return v[0] if scalar else (list(v) if name == "nvmlDeviceGetEccMode" else v)
        return get

    def handle(i: int) -> int:
        answer(host["gpus"][i].get("handle", ()))
        return i

    def cuda() -> int:
        if host.get("cuda") is None:
            raise NVMLError(NOT_SUPPORTED)
        return int(host["cuda"])

    nv.NVMLError = NVMLError  # type: ignore[attr-defined]
    nv.NVML_ERROR_LIBRARY_NOT_FOUND = LIBRARY_NOT_FOUND  # type: ignore[attr-defined]
    fn("nvmlInit", init)
    fn("nvmlShutdown", lambda: None)
    fn("nvmlErrorString", lambda code: ERRORS.get(code, f"code {code}"))
    fn("nvmlSystemGetDriverVersion", lambda: answer(host["driver"]))
    fn("nvmlSystemGetCudaDriverVersion_v2", cuda)
    fn("nvmlDeviceGetCount", lambda: len(host["gpus"]))
    fn("nvmlDeviceGetHandleByIndex", handle)
    fn("nvmlDeviceGetName", lambda h: answer(host["gpus"][h]["nvmlDeviceGetName"]))
    fn("nvmlDeviceGetMemoryInfo", lambda h: types.SimpleNamespace(total=host["gpus"][h]["memory_total"], free=0, used=0))
    for name in DEVICE_FUNCTIONS:
        fn(name, device(name, scalar=name not in ("nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetEccMode", "nvmlDeviceGetRemappedRows")))
    return nv


# ---------------------------------------------------------------- the fake libnvidia-ml.so.1 for the ctypes binding

class FakeLibrary:
    """libnvidia-ml.so.1's C surface, answered from `host`: return codes, out-parameters filled through byref."""

    def __init__(self, host: dict[str, Any], calls: list[str]) -> None:
        self.host, self.calls = host, calls

    def _gpu(self, h: ctypes.c_void_p) -> dict[str, Any]:
        return self.host["gpus"][int(h.value or 0) - 1]

    @staticmethod
    def _fill(refs: tuple[Any, ...], values: Any) -> int:
        if isinstance(values, int) or values == UNSUPPORTED:
            return NOT_SUPPORTED if values == UNSUPPORTED else values
        for ref, v in zip(refs, values):
            ref._obj.value = v  # a ctypes.byref() points at its object through _obj
        return 0

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml") or name in self.host.get("missing", set()):
            raise AttributeError(name)  # ctypes.CDLL: undefined symbol
        host = self.host

        def text(value: Any, buf: Any, size: Any) -> int:
            if isinstance(value, int):
                return value
            buf.value = value.encode()
            return 0

        def call(*args: Any) -> Any:
            self.calls.append(name)
            if name == "nvmlInit_v2":
                return host.get("init", 0)
            if name == "nvmlShutdown":
                return 0
            if name == "nvmlErrorString":
                return ERRORS.get(args[0], f"code {args[0]}").encode()
            if name == "nvmlSystemGetDriverVersion":
                return text(host["driver"], *args)
            if name == "nvmlSystemGetCudaDriverVersion_v2":
                return NOT_SUPPORTED if host.get("cuda") is None else self._fill(args, (host["cuda"],))
            if name == "nvmlDeviceGetCount_v2":
                return self._fill(args, (len(host["gpus"]),))
            if name == "nvmlDeviceGetHandleByIndex_v2":
                index, ref = args
                if "handle" in host["gpus"][index.value]:
                    return host["gpus"][index.value]["handle"]
                ref._obj.value = index.value + 1
                return 0
            gpu = self._gpu(args[0])
            if name == "nvmlDeviceGetName":
                return text(gpu["nvmlDeviceGetName"], *args[1:])
            if name == "nvmlDeviceGetMemoryInfo":
                args[1]._obj.total = gpu["memory_total"]
                return 0
            return self._fill(args[1:], gpu.get(name, UNSUPPORTED))
        return call


# ---------------------------------------------------------------- the two paths

def via_pynvml(monkeypatch: pytest.MonkeyPatch, host: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(host, calls))
    monkeypatch.setattr(probe, "_ctypes_library", lambda: pytest.fail("the ctypes binding ran while pynvml imports"))
    return probe.nvml(), calls


def via_ctypes(monkeypatch: pytest.MonkeyPatch, host: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", None)  # an image without nvidia-ml-py: `import pynvml` fails

    def library() -> FakeLibrary:
        if host.get("no_library"):
            raise OSError("libnvidia-ml.so.1: cannot open shared object file: No such file or directory")
        return FakeLibrary(host, calls)

    monkeypatch.setattr(probe, "_ctypes_library", library)
    return probe.nvml(), calls


def _without_via(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "nvml"}


@pytest.mark.parametrize("name", HOSTS)
def test_both_bindings_give_the_same_facts_for_the_same_gpus(name, monkeypatch):
    """newcomer review section 4 (probe._Nvml): pynvml where it imports, ctypes only without it, one document."""
    host = HOSTS[name]
    a, a_calls = via_pynvml(monkeypatch, host)
    b, b_calls = via_ctypes(monkeypatch, host)
    assert a["nvml"] == {"via": "pynvml"} and b["nvml"] == {"via": "ctypes"}
    assert _without_via(a) == _without_via(b)
    assert a_calls and (b_calls or host.get("no_library")), "each binding was asked"
    for doc in (a, b):
        jsonschema.validate({"schema": 1, "nvidia": {**doc, "source": "nvml"}}, SCHEMA)


def test_the_h200_facts_are_what_the_h200_machine_recorded_plus_power_and_pcie(monkeypatch):
    doc, _ = via_pynvml(monkeypatch, HOSTS["one H200"])
    recorded = json.loads((ROOT / "docs" / "gpu" / "doctor" / "probe-deep.json").read_text())["nvidia"]
    assert doc["driver"] == recorded["driver"] and doc["cuda_driver"] == recorded["cuda_driver"] == "13.0"
    assert doc["gpus"] == [{**recorded["gpus"][0], "power_limit_w": 700.0, "pcie": {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16}}]


def test_an_old_driver_falls_back_to_throttle_reasons_and_leaves_out_what_it_lacks(monkeypatch):
    doc, _ = via_ctypes(monkeypatch, HOSTS["two GPUs, an old driver"])
    assert [g["name"] for g in doc["gpus"]] == ["Tesla T4", "Tesla T4 #2"]
    g = doc["gpus"][0]
    assert g["clock_event_reasons"] == 4 and g["cc"] == "7.5" and g["memory_gb"] == 15.0
    assert not {"ecc", "remapped_rows", "power_limit_w"} & set(g) and g["pcie"] == {"gen": 1, "width": 16, "max_gen": 3, "max_width": 16}


@pytest.mark.parametrize("name, error", [("mismatch at init", "Driver/library version mismatch"),
                                         ("mismatch when asked the driver", "Driver/library version mismatch"),
                                         ("a name the GPU will not give", "Not Supported"),
                                         ("no library", "libnvidia-ml.so.1 not found (no NVIDIA driver user-space library)")])
@pytest.mark.parametrize("path", [via_pynvml, via_ctypes])
def test_an_nvml_that_cannot_answer_is_the_librarys_own_text(name, error, path, monkeypatch):
    doc, _ = path(monkeypatch, HOSTS[name])
    assert _without_via(doc) == {"nvml_error": error}


@pytest.mark.parametrize("path", [via_pynvml, via_ctypes])
def test_the_doctor_judges_either_bindings_facts_alike(path, monkeypatch):
    """The mismatch is found whichever binding read it, and a healthy H200 gives the same findings."""
    m = mx.load()
    for name, rules in (("mismatch at init", {"driver.library-mismatch"}), ("one H200", set())):
        doc, _ = path(monkeypatch, HOSTS[name])
        found = {f.rule for f in judge(m, Host.from_json({"schema": 1, "nvidia": doc})) if f.severity != "info"}
        assert found == rules, (name, found)


def test_the_unknown_nvml_error_code_still_reads_as_text(monkeypatch):
    doc, _ = via_pynvml(monkeypatch, {"init": 999})
    assert doc["nvml_error"] == "code 999"


def test_nvidia_reports_its_source_and_binding_on_success(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(HOSTS["one H200"], []))
    doc = probe.nvidia()
    assert doc["source"] == "nvml" and doc["nvml"] == {"via": "pynvml"} and doc["gpus"][0]["name"] == "NVIDIA H200"


def test_a_pynvml_that_raises_on_import_leaves_nvml_to_the_ctypes_binding(monkeypatch, tmp_path):
    """Not only ImportError: a broken install (here one that raises RuntimeError) must not cost the facts."""
    (tmp_path / "pynvml.py").write_text("raise RuntimeError('a broken install')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    calls: list[str] = []
    monkeypatch.setattr(probe, "_ctypes_library", lambda: FakeLibrary(HOSTS["one H200"], calls))
    doc = probe.nvml()
    assert doc["nvml"] == {"via": "ctypes"} and doc["gpus"][0]["name"] == "NVIDIA H200" and "nvmlInit_v2" in calls


def test_the_fakes_speak_the_real_call_surface(monkeypatch):
    """Every call the probe made of the fake module exists in the installed nvidia-ml-py, and every C function it
    asked of the fake library is one nvidia-ml-py itself looks up in libnvidia-ml.so.1: the fakes cannot drift."""
    import importlib

    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    real = importlib.import_module("pynvml")
    source = Path(real.__file__).read_text()
    py_calls: set[str] = set()
    c_calls: set[str] = set()
    for host in HOSTS.values():
        py_calls |= set(via_pynvml(monkeypatch, host)[1])
        c_calls |= set(via_ctypes(monkeypatch, host)[1])
    assert len(py_calls) >= 15 and len(c_calls) >= 15
    assert not {n for n in py_calls if not callable(getattr(real, n, None))}
    # nvidia-ml-py starts NVML with nvmlInitWithFlags; nvmlInit_v2 is what the ctypes binding ran on the H200 machine
    assert {n for n in c_calls if f'"{n}"' not in source} <= {"nvmlInit_v2"}
    assert real.NVML_ERROR_LIBRARY_NOT_FOUND == LIBRARY_NOT_FOUND and issubclass(real.NVMLError, Exception)


def test_on_the_host_nvml_is_read_through_nvidia_ml_py(monkeypatch):
    """nvidia-ml-py is envkit's dependency: the host's probe (in-process) takes it, GPU or not."""
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    assert probe.nvidia()["nvml"] == {"via": "pynvml"}


def test_the_h200_machines_two_documents_agree_but_for_the_binding():
    """docs/doctor-h200.md: `doctor --json` on the H200 machine with nvidia-ml-py and with it hidden."""
    docs = {via: json.loads((ROOT / "docs" / "gpu" / "doctor" / f"doctor-nvml-{via}.json").read_text()) for via in ("pynvml", "ctypes")}
    nv = {via: d["facts"]["nvidia"] for via, d in docs.items()}
    assert {via: n["nvml"]["via"] for via, n in nv.items()} == {"pynvml": "pynvml", "ctypes": "ctypes"}
    assert _without_via(nv["pynvml"]) == _without_via(nv["ctypes"])
    assert nv["ctypes"]["gpus"][0]["power_limit_w"] == 700.0 and nv["ctypes"]["gpus"][0]["pcie"]["max_gen"] == 5
    for d in docs.values():
        jsonschema.validate(d["facts"], SCHEMA)
        assert d["ok"] is True and d["findings"] == []
