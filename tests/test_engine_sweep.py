"""The container engines' sweep (issues 27 and 31): every --engine x NVIDIA GPU of the matrix x driver.

- resolve answers what generate builds: where resolve has a solution, generate writes the context; where resolve has
  conflicts, generate refuses with the same rules (one GPU per compute capability: generate is the slow half).
- every image named is one the matrix derives (a [[triton]] row's container, or the -py3 image a [[trtllm_backend]]
  row builds on);
- every fix printed, done, works: the release a fix says fits does fit, a driver upgrade it names gives a solution or
  a different refusal, and a carried release it sends the user to is not refused for the same reason.
"""
from __future__ import annotations

import functools
import re

import pytest

from envkit.app.generate import GeneratedEngine, generate
from envkit.config import matrix_file
from envkit.core.resolve import parse_query, resolve
from envkit.errors import InputError
from envkit.model.engine_specs import CONTAINER_ENGINES, PIP_ENGINES
from envkit.model.flags import ResolveFlags
from envkit.model.solution import Result, Unsolved

pytestmark = pytest.mark.slow

M = matrix_file.load()
ENGINES = CONTAINER_ENGINES
DRIVERS = (None, "470.82.01", "525.147.05", "535.104.05", "550.54.15", "570.124.06", "580.65.06")
GPUS = tuple(g.name for g in M.gpus if g.vendor == "nvidia")
ONE_PER_ARCH = tuple({str(g.cc): g.name for g in M.gpus if g.vendor == "nvidia"}.values())
IMAGES = {t.image for t in M.triton} | {b.base_image for b in M.trtllm_backend}


def query(engine: str, gpu: str, driver: str | None, **more: str) -> dict:
    flags = {"engine": engine, "gpu": gpu, **more}
    if driver:
        flags["driver"] = driver
    return flags


def answer(flags: dict) -> Result:
    return resolve(M, parse_query(M, **flags))


SWEEP = [(e, g, d) for e in ENGINES for g in GPUS for d in DRIVERS]


@functools.cache
def answers() -> dict[tuple, Result]:
    """Every answer of the sweep, computed once when a test first asks (not at collection: the fast tier skips them)."""
    return {case: answer(query(*case)) for case in SWEEP}


@functools.cache
def pinned() -> dict[tuple, Result]:
    """Pinned queries, where the fixes name the release that fits without the pin, or the releases envkit fills."""
    out = {(e, g, d, ("trtllm", str(v))): answer(query(e, g, d, trtllm=str(v)))
           for e in ("triton-trtllm", "trtllm") for v in sorted({r.version for r in M.trtllm}) for g in ONE_PER_ARCH
           for d in (None, "535.104.05", "570.124.06")}
    return out | {("triton-vllm", g, d, ("triton", t.release)): answer(query("triton-vllm", g, d, triton=t.release))
                  for t in M.triton if t.flavor == "vllm-python-py3" for g in ONE_PER_ARCH for d in (None, "535.104.05")}


def test_the_sweep_has_both_answers_for_every_engine():
    for engine in ENGINES:
        got = [r.ok for (e, _, _), r in answers().items() if e == engine]
        assert any(got) and not all(got), engine


@pytest.mark.parametrize("engine, gpu, driver", [(e, g, d) for e in ENGINES for g in ONE_PER_ARCH for d in DRIVERS])
def test_generate_builds_exactly_what_resolve_answers(engine, gpu, driver):
    r = answers()[(engine, gpu, driver)]
    g = generate(ResolveFlags.from_mapping(query(engine, gpu, driver)))
    if r.ok:
        assert isinstance(g, GeneratedEngine), [c.message for c in g.result.conflicts]
        assert g.result.engine == r.engine and "Dockerfile" in g.files
    else:
        assert isinstance(g, Unsolved)
        assert {c.rule for c in g.result.conflicts} == {c.rule for c in r.conflicts}


def test_every_image_named_is_one_the_matrix_derives():
    named = {r.engine.image for r in answers().values() if r.ok}
    assert named and named <= IMAGES, sorted(named - IMAGES)


FITS = re.compile(r"(?:tensorrtllm_backend (?P<backend>\S+) on Triton (?P<on>[\d.]+)|Triton (?P<release>[\d.]+)-\S+"
                  r"(?: \((?:TensorRT-LLM (?P<trtllm>[^)]+)|vLLM [^)]+)\))?) fits this GPU and driver")
UPGRADE = re.compile(r"upgrade the driver to >= (?P<driver>[\d.]+)")
CARRIED = re.compile(r"use --trtllm with one of (?P<versions>[\d., ]+?)(?:,? or |;|$)")


def fed_back(asked: dict, fix: str) -> list[tuple[str, dict]]:
    """The queries a fix's text tells the user to run (the patterns the engine resolver prints): a release that fits
    replaces the pins, a driver upgrade keeps them, a carried release replaces --trtllm."""
    bare = {k: v for k, v in asked.items() if k in ("engine", "gpu", "driver")}
    out = []
    m = FITS.search(fix)
    if m and m["backend"]:
        out.append(("fits", {**bare, "trtllm": m["backend"], "triton": m["on"]}))
    elif m:
        pins = {**({"triton": m["release"]} if asked["engine"] != "trtllm" else {}), **({"trtllm": m["trtllm"]} if m["trtllm"] else {})}
        out.append(("fits", {**bare, **pins}))
    m = UPGRADE.search(fix)
    if m:
        out.append(("upgrade", {**asked, "driver": m["driver"]}))
    m = CARRIED.search(fix)
    if m:
        out += [("carried", {**asked, "trtllm": v.strip()}) for v in m["versions"].split(",") if v.strip()]
    return out


def test_every_printed_fix_done_gives_a_solution_or_a_different_refusal():
    tried = {"fits": 0, "upgrade": 0, "carried": 0}
    for case, r in [*answers().items(), *pinned().items()]:
        if r.ok:
            continue
        for c in r.conflicts:
            asked = query(*case[:3], **dict(case[3:]))
            for kind, flags in fed_back(asked, c.fix):
                tried[kind] += 1
                again = answer(flags)
                where = f"{case}: {c.rule}: {c.fix!r} -> {flags}"
                if kind == "fits":
                    assert again.ok, f"{where}: {[x.message for x in again.conflicts]}"
                else:
                    assert again.ok or c.rule not in {x.rule for x in again.conflicts}, \
                        f"{where}: {[x.message for x in again.conflicts if x.rule == c.rule]}"
    assert all(tried.values()), tried  # each kind of fix was printed and tried


def test_a_conflict_always_carries_its_source_and_a_fix():
    for case, r in [*answers().items(), *pinned().items()]:
        for c in r.conflicts:
            assert c.source and c.fix and c.rule.split(".")[0] in ("engine", "platform"), (case, c)


def test_no_answer_is_forward_compatible_on_a_geforce_card():
    for (engine, gpu, driver), r in answers().items():
        if r.ok and re.match(r"(GeForce )?(RTX|GTX|TITAN) ?\d", gpu) and driver:
            assert not any("forward-compatibility" in n for n in r.engine.notes), (engine, gpu, driver)


def test_dropping_the_driver_never_loses_a_solution():
    for (engine, gpu, driver), r in answers().items():
        if r.ok and driver:
            assert answers()[(engine, gpu, None)].ok, (engine, gpu, driver)


PIP_GPUS = ONE_PER_ARCH + tuple(g.name for g in M.gpus if g.vendor != "nvidia")


@pytest.mark.parametrize("engine", PIP_ENGINES)
def test_generate_builds_exactly_what_resolve_answers_for_the_pip_engines(engine):
    """The same property for the engines installed by pip on envkit's own stack: every GPU arch, AMD and Hygon GPUs, the CPU."""
    both = 0
    for flags in [{"engine": engine, "gpu": g} for g in PIP_GPUS] + [{"engine": engine, "platform": "cpu"}]:
        r = answer(flags)
        try:
            g = generate(ResolveFlags.from_mapping(flags))
        except InputError as e:  # a DTK image comes from the site's registry only: the one input generate needs beyond resolve's
            assert r.ok and "no site file names one" in e.message, (flags, e.message)
            continue
        if r.ok:
            assert not isinstance(g, Unsolved), (flags, [c.message for c in g.result.conflicts])
            want, got = r.solution, g.result.solution  # resolve takes the base image's own Python as generate builds on it
            assert (got.platform, got.python, got.torch.pin, got.engine, got.toolkit) == \
                (want.platform, want.python, want.torch.pin, want.engine, want.toolkit), flags
            assert "Dockerfile" in g.files
        else:
            assert isinstance(g, Unsolved), flags
            assert {c.rule for c in g.result.conflicts} == {c.rule for c in r.conflicts}, flags
        both += r.ok
    assert 0 < both, engine


STACK_QUERIES = ({}, {"flash_attn": "2"}, {"vllm": "0.6"}, {"torch": "2.5.1"}, {"cuda": "11.8"})


def test_generate_builds_exactly_what_resolve_answers_for_the_stack():
    """The same property for the plain stack (torch, flash-attn, vLLM): the answer's Python, torch build, toolkit,
    flash-attn and vLLM are generate's, the base image's own Python included where resolve takes it."""
    both = 0
    for flags in [{"gpu": g, **more} for g in PIP_GPUS for more in STACK_QUERIES] + [{"platform": "cpu"}]:
        r = answer(flags)
        try:
            g = generate(ResolveFlags.from_mapping(flags))
        except InputError as e:  # a DTK image comes from the site's registry only
            assert r.ok and "no site file names one" in e.message, (flags, e.message)
            continue
        if not r.ok:
            assert isinstance(g, Unsolved) and {c.rule for c in g.result.conflicts} == {c.rule for c in r.conflicts}, flags
            continue
        assert not isinstance(g, Unsolved), (flags, [c.message for c in g.result.conflicts])
        want, got = r.solution, g.result.solution
        assert (got.python, got.torch.pin, got.toolkit, got.flash_attn, got.vllm) == \
            (want.python, want.torch.pin, want.toolkit, want.flash_attn, want.vllm), flags
        assert r.notes == g.result.notes, flags
        both += 1
    assert both > len(PIP_GPUS), both


@pytest.mark.parametrize("engine", PIP_ENGINES)
def test_a_pinned_pip_engine_s_release_fix_names_a_release_that_resolves(engine):
    """Where a pinned release's own torch or CUDA cannot run on the GPU and another release resolves, the fix names
    it: done, it gives a solution."""
    from envkit.core.resolve.pip_engines import releases

    named = 0
    for version in releases(M, engine, False):
        for gpu in ONE_PER_ARCH:
            r = answer({"engine": f"{engine}=={version}", "gpu": gpu})
            for c in r.conflicts:
                m = re.match(rf"use --engine {engine}==(\S+), the newest release that resolves here", c.fix)
                if m:
                    assert answer({"engine": f"{engine}=={m.group(1)}", "gpu": gpu}).ok, (engine, version, gpu, c.fix)
                    named += 1
    assert named or engine in ("lmdeploy", "fastllm"), engine  # their releases fail on their own facts (engine.*), not on pins
