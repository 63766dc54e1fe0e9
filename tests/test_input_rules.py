"""The resolve flags' input rules (issue 14): one version grammar for every flag, ASCII digits only, arch names
checked against the matrix, contradictory flags refused with the flag to drop, control characters refused, and
what `resolve` says about the Python the image gets. Each test names the report item it answers (fuzz report
8-11, newcomer review 1.4, D6, D7)."""
from __future__ import annotations

import json
import re

import pytest
from fuzzing import run
from packaging.version import Version

from envkit.app.doctor import for_flags
from envkit.app.generate import generate
from envkit.app.matrix import export_project
from envkit.config import matrix_file
from envkit.core.judge_for import for_findings
from envkit.core.resolve import parse_query, resolve
from envkit.core.resolve.checks import driver_floor
from envkit.errors import InputError
from envkit.model.flags import FLAG, FLAG_ORDER, ResolveFlags, parse_flag_string
from envkit.model.host import GpuFact, Host
from envkit.model.matrix import CC, parse_arch

M = matrix_file.load()


def _refused(**args: str) -> InputError:
    with pytest.raises(InputError) as info:
        parse_query(M, **args)
    err = info.value
    assert "\n" not in err.one_line() and err.fix, err.one_line()
    return err


def _solve(**args: str):
    r = resolve(M, parse_query(M, **args), suggest=False)
    assert r.ok, [c.message for c in r.conflicts]
    return r


# ---------------------------------------------------------------- fuzz report 10: Unicode digits

UNICODE_DIGITS = ["１２.４", "١٢.٤", "12.４", "３", "²"]
VERSION_FLAGS = ["cuda", "rocm", "dtk", "python", "driver", "torch", "flash_attn", "vllm"]


@pytest.mark.parametrize("value", UNICODE_DIGITS)
@pytest.mark.parametrize("key", VERSION_FLAGS)
def test_fuzz_report_10_unicode_digits_are_bad_input_naming_the_flag(key, value):
    err = _refused(**{key: value})
    assert FLAG[key] in err.message or key in err.message.lower(), err.one_line()


@pytest.mark.parametrize("key", ["cuda", "rocm", "dtk", "python", "driver", "torch"])
def test_fuzz_report_10_doctor_for_refuses_unicode_digits(key):
    with pytest.raises(InputError) as info:
        for_flags(M, f"{FLAG[key]} １２.４")
    assert info.value.message.startswith("--for")


def test_fuzz_report_10_a_lock_query_with_unicode_digits_is_bad_input(tmp_path):
    lock = json.loads(generate(ResolveFlags(platform="cpu", torch="2.13.0")).files["envkit.lock.json"])
    lock["query"] = {"cuda": "１２.４"}
    path = tmp_path / "envkit.lock.json"
    path.write_text(json.dumps(lock), encoding="utf-8")
    with pytest.raises(InputError, match="--cuda"):
        generate(ResolveFlags(), lock=str(path))


def test_fuzz_report_10_a_project_target_with_unicode_digits_is_bad_input(tmp_path):
    project = tmp_path / "envkit.toml"
    project.write_text('[[target]]\nname = "t"\noffline = true\ngpu = "A100"\ncuda = "１２.４"\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"target t: .*--cuda"):
        export_project(str(project), "json", "contexts", None)


# ---------------------------------------------------------------- fuzz report 11, newcomer D7: GPU archs

@pytest.mark.parametrize("text", ["sm_5", "sm_0", "sm5", "sm_", "sm", "sm_05", "gfx", "gfx9", "sm_" + "9" * 5000])
def test_fuzz_report_11_malformed_archs_are_bad_input_with_the_fix(text):
    err = _refused(gpu=text)
    assert err.message.startswith("--gpu") and "sm_86" in err.fix


@pytest.mark.parametrize("text, near", [("sm_99", "sm_90"), ("sm_130", ""), ("gfx9999", "gfx9"), ("9.9", "sm_90")])
def test_newcomer_d7_an_arch_no_row_of_the_matrix_names_is_refused_with_the_known_ones(text, near):
    err = _refused(gpu=text)
    assert err.message.startswith("unknown arch")
    assert "the matrix knows" in err.fix and near in err.fix
    family = "sm_80" if text.startswith(("sm", "9")) else "gfx942"
    assert family in err.fix


@pytest.mark.parametrize("text, arch", [("sm_86", "sm_86"), ("sm86", "sm_86"), ("8.6", "sm_86"), ("sm_90a", "sm_90"),
                                        ("sm-120", "sm_120"), ("sm_52", "sm_52"), ("gfx1101", "gfx1101"), ("GFX942", "gfx942")])
def test_archs_the_matrix_names_are_accepted_even_without_a_gpu_row(text, arch):
    """sm_52 (Maxwell) and gfx1101 have no [[gpu]] row but torch builds and driver families name them."""
    assert parse_query(M, gpu=text).gpu.arch == arch


@pytest.mark.parametrize("text", ["sm_5", "sm_0", "sm5", "sm_00", "sm_1234"])
def test_fuzz_report_11_cc_parse_refuses_one_digit_archs_with_a_value_error(text):
    with pytest.raises(ValueError, match="not a compute capability"):
        CC.parse(text)
    with pytest.raises(ValueError):
        parse_arch(text)


@pytest.mark.parametrize("text", ["A100", "4090", "RTX 4090", "smart"])
def test_product_names_are_not_archs(text):
    assert parse_arch(text) is None


@pytest.mark.parametrize("value", ["", " ", "\t "])
def test_newcomer_d7_an_empty_gpu_is_refused_not_unset(value):
    err = _refused(gpu=value)
    assert "empty" in err.message or "control" in err.message


@pytest.mark.parametrize("text", ["--gpu ''", "--gpu=", "--gpu= --torch 2.4"])
def test_an_empty_flag_in_a_flag_string_is_refused(text):
    with pytest.raises(InputError):
        parse_query(M, parse_flag_string(text))


def test_an_empty_kernels_list_is_refused():
    _refused(kernels=",")


# ---------------------------------------------------------------- fuzz report 9, newcomer D7: contradictions

CONTRADICTIONS = [
    ({"platform": "cpu", "cuda": "12.0"}, "--platform", "--cuda"),
    ({"cuda": "12.1", "rocm": "5.7"}, "--cuda", "--rocm"),
    ({"rocm": "6.2", "dtk": "23.10"}, "--rocm", "--dtk"),
    ({"cuda": "12.4", "dtk": "24.04"}, "--cuda", "--dtk"),
    ({"platform": "rocm", "cuda": "12.4"}, "--platform", "--cuda"),
    ({"platform": "dtk", "rocm": "6.2"}, "--platform", "--rocm"),
    ({"platform": "cpu", "gpu": "H100"}, "--platform", "--gpu"),
    ({"torch": "2.4.0+cpu", "gpu": "H100"}, "--torch", "--gpu"),
    ({"torch": "2.4.0+cu124", "rocm": "6.1"}, "--torch", "--rocm"),
    ({"torch": "2.4.0+cu121", "cuda": "12.4"}, "--torch", "--cuda"),
    ({"platform": "cuda", "torch": "2.4.0+cpu"}, "--platform", "--torch"),
]


@pytest.mark.parametrize("args, first, second", CONTRADICTIONS)
def test_fuzz_report_9_contradictory_flags_are_refused_naming_both_and_what_to_drop(args, first, second):
    err = _refused(**args)
    assert first in err.message and second in err.message, err.one_line()
    assert err.fix.startswith(("drop", "use")), err.fix


@pytest.mark.parametrize("args", [CONTRADICTIONS[0][0], CONTRADICTIONS[1][0], CONTRADICTIONS[6][0]])
def test_fuzz_report_9_contradictions_exit_2_with_one_line_and_a_json_document(args):
    argv = [x for k, v in args.items() for x in (FLAG[k], v)]
    ran = run(["resolve", *argv, "--json"], "resolve --json")
    assert ran.code == 2 and json.loads(ran.out)["ok"] is False
    lines = [line for line in ran.err.splitlines() if line.startswith("envkit: error: ")]
    assert len(lines) == 1 and "drop" in lines[0]


@pytest.mark.parametrize("args, platform", [
    ({"platform": "cuda", "cuda": "12.4"}, "cuda"),
    ({"torch": "2.4.0+cu124", "cuda": "12.4"}, "cuda"),
    ({"torch": "2.4.0+cu124", "cuda": "12"}, "cuda"),
    ({"platform": "rocm", "rocm": "6.1"}, "rocm"),
    ({"platform": "cpu", "torch": "2.4.0+cpu"}, "cpu"),
    ({"torch": "2.4.0+cpu"}, "cpu"),
    ({"gpu": "H100", "torch": "2.4.0+cu124"}, "cuda"),
])
def test_flags_that_agree_still_solve(args, platform):
    assert _solve(**args).solution.platform == platform


@pytest.mark.parametrize("args, asked, vendor, fix", [
    ({"gpu": "mi300x", "cuda": "12.4"}, "--cuda 12.4", "an AMD GPU", "drop --cuda"),
    ({"gpu": "mi300x", "platform": "cuda"}, "--platform cuda", "an AMD GPU", "use --platform rocm"),
    ({"gpu": "mi300x", "torch": "2.4.0+cu124"}, "--torch 2.4.0+cu124", "an AMD GPU", "drop the +cu124 of --torch"),
    ({"gpu": "H100", "rocm": "6.2"}, "--rocm 6.2", "an NVIDIA GPU", "drop --rocm"),
    ({"gpu": "Z100", "rocm": "6.2"}, "--rocm 6.2", "a Hygon GPU", "drop --rocm"),
])
def test_newcomer_d7_a_gpu_of_another_vendor_is_a_conflict_worded_after_the_flag_given(args, asked, vendor, fix):
    r = resolve(M, parse_query(M, **args), suggest=False)
    c = next(x for x in r.conflicts if x.rule == "platform.gpu")
    assert asked in c.message and vendor in c.message and " a amd" not in c.message
    assert c.fix.startswith(fix), c.fix


# ---------------------------------------------------------------- newcomer 1.4 / D7: one version grammar

def _newest_torch_for_each(key: str, versions: list[str], **rest: str) -> Version:
    best = Version("0")
    for v in versions:
        try:
            r = resolve(M, parse_query(M, **{key: v}, **rest), suggest=False)
        except InputError:
            continue
        if r.ok:
            best = max(best, r.solution.torch.version)
    return best


@pytest.mark.parametrize("key, prefix, rest", [
    ("cuda", "12", {"gpu": "A100"}),
    ("cuda", "11", {"gpu": "RTX 4090", "vllm": "0.2.7"}),
    ("rocm", "6", {"gpu": "MI300X"}),
    ("dtk", "24", {"gpu": "K100"}),
    ("python", "3", {"gpu": "H100", "flash_attn": "2.6"}),
])
def test_newcomer_1_4_a_major_alone_means_the_newest_of_that_major_the_rest_allows(key, prefix, rest):
    sol = _solve(**{key: prefix}, **rest).solution
    got = Version(sol.toolkit_text if key != "python" else str(sol.python))
    assert got.release[0] == int(prefix)
    table = {"cuda": [str(c.version) for c in M.cuda], "rocm": [str(r.version) for r in M.rocm],
             "dtk": [str(d.version) for d in M.dtk], "python": [str(p.version) for p in M.python]}[key]
    same_major = [v for v in table if Version(v).release[0] == int(prefix)]
    assert sol.torch.version == _newest_torch_for_each(key, same_major, **rest)


@pytest.mark.parametrize("key, tag, plain", [("cuda", "cu124", "12.4"), ("cuda", "cu118", "11.8"), ("cuda", "cuda12.4", "12.4"),
                                             ("rocm", "rocm6.2", "6.2"), ("python", "cp311", "3.11"), ("dtk", "dtk24.04", "24.04")])
def test_newcomer_1_4_wheel_tag_spellings_read_as_the_version(key, tag, plain):
    assert getattr(parse_query(M, **{key: tag}), key) == getattr(parse_query(M, **{key: plain}), key)


def test_newcomer_1_4_a_python_patch_release_is_read_as_its_minor_and_the_result_says_so():
    r = _solve(gpu="A100", python="3.11.4")
    assert str(r.solution.python) == "3.11"
    assert any("--python 3.11.4 is read as Python 3.11" in w for w in r.warnings), r.warnings


def test_a_cuda_patch_release_is_read_as_its_minor_and_the_result_says_so():
    r = _solve(cuda="12.4.0")
    assert str(r.solution.toolkit) == "12.4"
    assert any("--cuda 12.4.0 is read as CUDA 12.4" in w for w in r.warnings), r.warnings


@pytest.mark.parametrize("key, example, foreign", [
    ("vllm", "0.6.3", "+cu118"), ("flash_attn", "2.6.3", "+cu118"), ("torch", "2.4.1", "0.6.3"),
    ("cuda", "12.4", "3.10"), ("rocm", "6.2", "12.4"), ("dtk", "24.04", "12.4"), ("python", "3.11", "12.4"),
])
def test_newcomer_1_4_error_examples_fit_the_flag(key, example, foreign):
    err = _refused(**{key: "latest"})
    assert err.message.startswith(FLAG[key]) and example in err.fix and foreign not in err.fix, err.one_line()


@pytest.mark.parametrize("key, spelled, plain", [("torch", "torch==2.4.0", "==2.4.0"), ("vllm", "vllm>=0.6", ">=0.6"),
                                                 ("flash_attn", "flash-attn==2.6.3", "==2.6.3")])
def test_pip_requirement_spellings_are_read(key, spelled, plain):
    assert getattr(parse_query(M, **{key: spelled}), key) == getattr(parse_query(M, **{key: plain}), key)


def test_a_vllm_local_tag_is_refused_with_where_its_cuda_goes():
    err = _refused(vllm="0.2.7+cu118")
    assert "--vllm 0.2.7 --cuda 11.8" in err.fix


@pytest.mark.parametrize("key", ["cuda", "torch", "vllm", "driver", "python", "gpu"])
def test_a_5000_digit_number_is_bad_input_and_not_echoed_whole(key):
    err = _refused(**{key: "9" * 5000})
    assert len(err.one_line()) < 600


# ---------------------------------------------------------------- fuzz report 8: control characters

CONTROL = ["\n3.11", "3.11\n", "12.4\r", "\x00", "\x1b[31m", "\u2028", "\u0085", "\u202e12.4", "\udcff"]


@pytest.mark.parametrize("value", CONTROL)
@pytest.mark.parametrize("key", FLAG_ORDER)
def test_fuzz_report_8_a_control_character_in_any_flag_is_refused(key, value):
    err = _refused(**{key: value})
    assert err.message.startswith(FLAG[key]) and " holds " in err.message and "U+" in err.message


def test_fuzz_report_8_generate_with_a_newline_in_a_flag_writes_nothing(tmp_path):
    out = tmp_path / "g3"
    with pytest.raises(InputError, match="--python"):
        generate(ResolveFlags(platform="cpu", torch="2.13.0", python="\n3.11"), out=str(out))
    assert not out.exists()


# ---------------------------------------------------------------- newcomer 1.4: the smallest driver upgrade

def test_newcomer_1_4_a_too_old_driver_is_told_the_smallest_upgrade_that_gives_a_stack():
    r = resolve(M, parse_query(M, gpu="A100", driver="410.48"), suggest=False)
    c = next(x for x in r.conflicts if x.rule == "driver.too-old")
    named = re.search(r">= ([0-9.]+), the smallest upgrade", c.fix)
    assert named, c.fix
    smallest = named.group(1)
    assert smallest == "450.80.02", c.fix  # CUDA 11.x minor-version compatibility
    assert resolve(M, parse_query(M, gpu="A100", driver=smallest), suggest=False).ok
    floor = driver_floor(M, parse_query(M, gpu="A100").gpu)[0]
    below = sorted({str(tk.min_driver) for tk in M.cuda if tk.min_driver < parse_query(M, driver=smallest).driver}
                   | ({str(floor)} if floor is not None else set()))
    for d in below:
        assert not resolve(M, parse_query(M, gpu="A100", driver=d), suggest=False).ok, d


def test_the_driver_fix_keeps_the_rest_of_the_query():
    r = resolve(M, parse_query(M, gpu="H100", cuda="12.8", driver="470.82.01"), suggest=False)
    c = next(x for x in r.conflicts if x.rule == "driver.too-old")
    assert "CUDA 12.8" in c.fix


# ---------------------------------------------------------------- newcomer D6: the Python the image gets

D6_QUERIES = [
    {"gpu": "RTX 4090", "cuda": "11.8", "torch": "2.1.2", "vllm": "0.2.7"},
    {"platform": "cpu", "torch": "2.13.0"},
    {"gpu": "MI300X", "rocm": "6.2"},
    {"gpu": "A100", "cuda": "12"},
    {"gpu": "H200", "cuda": "13.0", "flash_attn": "2.7.4.post1"},
]


@pytest.mark.parametrize("args", D6_QUERIES)
def test_newcomer_d6_resolve_answers_the_python_generate_puts_in_the_image(args):
    r = _solve(**args)
    g = generate(ResolveFlags.from_mapping(args))
    assert g.result.solution.python == r.solution.python, (r.notes, g.result.solution.python)
    assert g.result.solution.torch == r.solution.torch


def test_newcomer_d6_the_readme_example_answers_the_image_s_python_3_10_and_says_why():
    r = _solve(gpu="RTX 4090", cuda="11.8", torch="2.1.2", vllm="0.2.7")
    assert r.solution.python == Version("3.10") and r.python_from_image == Version("3.10")
    assert any(n.startswith("python 3.10: the base image's own (ubuntu22.04)") for n in r.notes), r.notes
    pinned = _solve(gpu="RTX 4090", cuda="11.8", torch="2.1.2", vllm="0.2.7", python="3.11")
    assert pinned.solution.python == Version("3.11") and pinned.python_from_image is None


# ---------------------------------------------------------------- doctor --for on a GPU host

@pytest.mark.parametrize("text", ["--platform cpu", "--torch 2.4.0+cpu"])
def test_doctor_for_a_cpu_stack_on_a_gpu_host_does_not_add_the_hosts_gpu(text):
    h = Host(driver="580.159.04", gpus=(GpuFact("NVIDIA H200", "9.0"),))
    assert [f.rule for f in for_findings(M, h, parse_flag_string(text))] == ["for.works"]


def test_newcomer_1_4_doctor_for_names_the_flag_meant():
    with pytest.raises(InputError) as info:
        parse_flag_string("--gpu H100 --torh 2.4")
    assert info.value.fix.startswith("did you mean --torch?")
