"""Site profile parsing and the planner's refusals, on plain data."""
from __future__ import annotations

import pytest

from envkit.config import matrix_file as mx
from envkit.errors import InputError
from envkit.app.generate import solve
from envkit.model.flags import ResolveFlags
from envkit.model.plan import Options
from envkit.core.planner import plan
from envkit.core.render import check_offline
from envkit.core.resolve import parse_query, resolve
from envkit.model.site import Site
from envkit.config.site_file import parse

M = mx.load()
SEED = {"gpu": "RTX A6000", "cuda": "11.8", "python": "3.8", "torch": "2.1.2", "flash_attn": "2.2.0",
        "kernels": "layer_norm,rotary", "vllm": "0.2.7"}


def _solution(**flags):
    r = resolve(M, parse_query(M, **flags))
    assert r.solution is not None, r.conflicts
    return r.solution


def _site(text: str) -> Site:
    return parse(text, "SITE.toml", read_file=lambda p: b"-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n")


def test_site_mirrors_rewrite_and_registry_prefix():
    s = _site('[apt]\nmirror = "http://10.1.1.1/ubuntu/"\n[pip]\nindex_url = "http://10.1.1.1/simple"\n'
              '[rewrite]\n"https://download.pytorch.org/whl" = "http://10.1.1.1/torch"\n[registry]\nprefix = "reg.corp:5000"\n'
              '[images]\n"docker.io/rocm/dev-ubuntu-22.04:6.2.4" = "reg.corp:5000/rocm@sha256:abc"\n')
    assert s.apt_mirror == "http://10.1.1.1/ubuntu"
    assert s.rewrite("https://download.pytorch.org/whl/cu118") == "http://10.1.1.1/torch/cu118"
    assert s.rewrite("https://github.com/x") is None
    assert s.rewrite("http://10.1.1.1/other") == "http://10.1.1.1/other"
    assert s.image("docker.io/nvidia/cuda:12.8.1-devel") == "reg.corp:5000/nvidia/cuda:12.8.1-devel"
    assert s.image("docker.io/rocm/dev-ubuntu-22.04:6.2.4") == "reg.corp:5000/rocm@sha256:abc"


@pytest.mark.parametrize("text,needle", [
    ('[pip]\nindex_url = "http://bob:hunter2@10.1.1.1/simple"\n', "carries credentials"),
    ('[pip]\npassword = "hunter2"\n', "looks like a credential"),
    ('[mirrors]\nx = 1\n', "unknown table [mirrors]"),
    ('[apt]\nmirror = "10.1.1.1/ubuntu"\n', "must be an http(s):// URL"),
    ('[apt]\nmirror = "http://10.1.1.1/ub#untu"\n', "may not hold"),
    ('[apt]\nmirrors = "http://10.1.1.1/ubuntu"\n', "unknown key `mirrors` in [apt]"),
    ('[apt\nmirror = 1\n', "not valid TOML"),
    ('[registry]\nprefix = "https://reg.corp"\n', "without a scheme"),
    ('[apt]\nmirror = "http://10.1.1.1/a&b"\n', "may not hold"),
    ('[apt]\nmirror = "http://[::1"\n', "not a valid URL"),
    ('[dtk]\ndevel_image = "reg/dtk:1\\nADD http://evil.example/x /x"\n', "must be an image reference"),
    ('[dtk]\ndevel_image = 5\n', "must be an image reference"),
    ('[pip]\ntrusted_hosts = ["x\';cmd;\'"]\n', "is not a host name"),
    ('[proxy]\nno_proxy = ["a"]\n', "no_proxy must be"),
])
def test_bad_site_files_name_the_problem_and_the_fix(text, needle):
    with pytest.raises(InputError) as e:
        _site(text)
    assert needle in e.value.message and e.value.fix and e.value.exit_code == 2
    assert "\n" not in e.value.one_line()


def test_ca_cert_must_be_pem():
    with pytest.raises(InputError, match="not a PEM"):
        parse('[ca]\ncert = "ca.der"\n', "SITE.toml", read_file=lambda p: b"\x30\x82")


def test_a_site_without_apt_or_pip_mirrors_is_refused_naming_the_step():
    with pytest.raises(InputError, match=r"step `build-apt` needs ubuntu22.04's package archive") as e:
        plan(M, _solution(**SEED), _site('[pip]\nindex_url = "http://10.1.1.1/simple"\n'), Options())
    assert "[apt] mirror" in e.value.fix
    with pytest.raises(InputError, match=r"Python package index") as e:
        plan(M, _solution(**SEED), _site('[apt]\nmirror = "http://10.1.1.1/ubuntu"\n'), Options())
    assert "[pip] index_url" in e.value.fix


def test_a_site_that_does_not_mirror_the_torch_index_is_refused_naming_the_step():
    site = _site('[apt]\nmirror = "http://10.1.1.1/ubuntu"\n[pip]\nindex_url = "http://10.1.1.1/simple"\n')
    with pytest.raises(InputError) as e:
        plan(M, _solution(**SEED), site, Options())
    assert "step `build-torch`" in e.value.message and "https://download.pytorch.org/whl/cu118" in e.value.message
    assert '[rewrite] "https://download.pytorch.org"' in e.value.fix


def test_offline_plans_reach_nothing_and_list_what_to_carry():
    p = plan(M, _solution(**SEED), Site(), Options(offline=True))
    assert {st.network for s in p.stages for st in s.steps} == {"none"}
    paths = {c.path for c in p.carried}
    assert {"wheelhouse/", "debs/build/", "debs/runtime/", "sources/Python-3.8.18.tgz", "sources/flash_attn-2.2.0.tar.gz",
            "wheelhouse/vllm-0.2.7+cu118-cp38-cp38-manylinux1_x86_64.whl"} <= paths
    origin = next(c.origin for c in p.carried if c.path.startswith("wheelhouse/vllm"))
    assert origin.startswith("https://github.com/vllm-project/vllm/releases/download/v0.2.7/")
    assert ("torch==2.1.2+cu118", "https://download.pytorch.org/whl/cu118") in p.wheel_sources
    assert (origin, None) in p.wheel_sources


def test_offline_wheels_not_on_pypi_are_installed_by_path():
    p = plan(M, _solution(gpu="RTX A6000", cuda="11.8", python="3.8", torch="2.0.1", flash_attn="2.2.0"), Site(), Options(offline=True))
    step = next(st for s in p.stages for st in s.steps if st.id == "build-flash-attn")
    wheel = "flash_attn-2.2.0+cu118torch2.0cxx11abiFALSE-cp38-cp38-linux_x86_64.whl"
    assert step.payload.packages == (f"/opt/envkit/wheelhouse/{wheel}",)
    assert f"wheelhouse/{wheel}" in {c.path for c in p.carried}


def test_flash_attn_source_builds_get_git_and_say_which_archs_they_compile():
    p = plan(M, _solution(**SEED), Site(), Options())
    apt = next(st for s in p.stages for st in s.steps if st.id == "build-apt")
    assert "git" in apt.payload.packages
    fa = next(st for s in p.stages for st in s.steps if st.id == "build-flash-attn")
    assert "hard-coded sm_80/sm_90" in fa.why


def test_the_cu118_vllm_wheel_takes_its_cuda_variant_dependencies_from_torchs_index():
    p = plan(M, _solution(**SEED), Site(), Options())
    step = next(st for s in p.stages for st in s.steps if st.id == "build-vllm")
    assert step.payload.extra_index_url == "https://download.pytorch.org/whl/cu118" and step.payload.find_links is None


def test_proxies_become_the_build_args_docker_knows():
    site = _site('[apt]\nmirror = "http://10.1.1.1/ubuntu"\n[pip]\nindex_url = "http://10.1.1.1/simple"\n'
                 '[rewrite]\n"https://download.pytorch.org/whl" = "http://10.1.1.1/t"\n"https://github.com" = "http://10.1.1.1/g"\n'
                 '[proxy]\nhttp = "http://p:3128"\nno_proxy = "10.0.0.0/8"\n')
    args = dict(plan(M, _solution(**SEED), site, Options()).build_args)
    assert args == {"http_proxy": "http://p:3128", "HTTP_PROXY": "http://p:3128", "no_proxy": "10.0.0.0/8", "NO_PROXY": "10.0.0.0/8"}


def test_check_offline_names_the_step_that_reaches_a_url():
    text = "FROM x AS build\n\n# [build-vllm] vLLM: why\nRUN pip install https://github.com/v.whl\n"
    with pytest.raises(InputError, match=r"step `build-vllm` reaches https://github.com/v.whl"):
        check_offline(text)
    with pytest.raises(InputError, match="syntax"):
        check_offline("# syntax=docker/dockerfile:1\nFROM x\n")
    with pytest.raises(InputError, match=r"step `build-x` reaches http://evil.example/x"):
        check_offline("FROM x\n\n# [build-x] x: y\nADD http://evil.example/x /x\n")
    check_offline('FROM x\nLABEL io.envkit.solution="{\\"source\\":\\"https://index.example\\"}"\n')  # a URL in a label reaches nothing


def test_vllm_on_rocm_is_refused_with_an_alternative():
    sol = _solution(gpu="MI300X", rocm="6.2")
    from dataclasses import replace
    v = next(x for x in M.vllm if str(x.version) == "0.11.0")
    with pytest.raises(InputError, match="Dockerfile.rocm"):
        plan(M, replace(sol, vllm=v), Site(), Options())


def test_dtk_needs_the_site_to_name_its_image():
    with pytest.raises(InputError) as e:
        plan(M, _solution(gpu="Z100L", dtk="24.04"), Site(), Options())
    assert "[dtk] devel_image" in e.value.fix


def test_without_python_flag_the_base_images_python_is_preferred_when_torch_stays():
    flags = {"gpu": "H200", "cuda": "13.0", "flash_attn": "2.7.4.post1"}
    newest = resolve(M, parse_query(M, **flags, python="3.13")).solution
    core = resolve(M, parse_query(M, **flags))
    result, used = solve(M, ResolveFlags.from_mapping(flags), Site())
    assert str(newest.python) == "3.13"  # the newest Python has the same stack...
    assert str(core.solution.python) == "3.12" and core.python_from_image is not None  # ...the resolver takes the image's
    assert str(result.solution.python) == "3.12" and used.python == "3.12"  # the use case's lock records it
    assert result.solution.torch == newest.torch == core.solution.torch


def test_distro_python_when_it_fits_else_the_carried_tarball():
    assert plan(M, _solution(gpu="H200", cuda="13.0", python="3.12"), Site(), Options()).python_source == "distro"
    p = plan(M, _solution(**SEED), Site(), Options())
    assert p.python_source == "tarball" and any(c.path == "sources/Python-3.8.18.tgz" for c in p.carried)


def test_bad_host_march_is_refused():
    with pytest.raises(InputError, match="-march"):
        plan(M, _solution(gpu="H200", cuda="13.0"), Site(), Options(host_march="x86 64; rm -rf /"))


@pytest.mark.parametrize("flags", [
    dict(gpu="H100", cuda="12.4", python="3.10", torch="2.4", flash_attn="2.6.3", kernels="rotary"),  # prebuilt wheel + kernels
    dict(gpu="Z100L", dtk="24.04"),  # CPython from the tarball
    SEED,
])
def test_every_plan_that_compiles_gets_a_compiler_and_python_headers(flags):
    site = _site('[apt]\nmirror = "http://10.1.1.1/ubuntu"\n[pip]\nindex_url = "http://10.1.1.1/simple"\n'
                 '[rewrite]\n"https://download.pytorch.org/whl" = "http://10.1.1.1/t"\n"https://github.com" = "http://10.1.1.1/g"\n'
                 '[dtk]\ndevel_image = "reg/dtk:24.04"\nos = "ubuntu20.04"\n')
    p = plan(M, _solution(**flags), site, Options())
    apt = next(st for s in p.stages for st in s.steps if st.id == "build-apt").payload.packages
    assert "build-essential" in apt
    assert any(x.endswith("-dev") for x in apt)
