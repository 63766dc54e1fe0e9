"""Text that is not envkit's own reaches people as written: rich markup in a value (a facts file's NVML error,
a matrix string, a flag value, a finding, a self-test check, a sweep note, a preflight line, a file name) is
neither rendered nor a crash (newcomer review D10, fuzz report 14: `[/usr/lib/x86_64-linux-gnu]` in an NVML
error gave rich.errors.MarkupError, `[red]x[/red]` turned red, `resolve --gpu '[/]V100'` and `matrix show` with
`[/]` in a matrix string crashed).

Every printer of ui/report.py and ui/progress.py is fed the hostile values and printed with a real rich
Console writing to a StringIO; the test asserts each value appears literally in what was printed."""
from __future__ import annotations

import contextlib
import io
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from envkit.app.build import Built
from envkit.app.generate import generate
from envkit.config import matrix_file
from envkit.core.judge import judge
from envkit.core.preflight import Check
from envkit.core.resolve import parse_query, resolve
from envkit.model.flags import ResolveFlags
from envkit.model.host import Finding, GpuFact, Host
from envkit.model.plan import Carried
from envkit.model.solution import Conflict
from envkit.ui import progress, report

# each is a markup error, a style, or a closing tag with nothing to close; the last ends in a backslash,
# which would escape the closing tag that follows it
HOSTILE = ("[/]", "[red]x[/red]", "[/usr/lib/x86_64-linux-gnu]", "[bold]", "a\\")

M = matrix_file.load(None)


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=400, color_system=None, highlight=False, soft_wrap=True), buf


def _flat(text: str) -> str:
    """The printed text without the table's borders and padding, so that a value folded over lines still reads whole."""
    return re.sub(r"[\s│┃┆║|]+", "", text)


def _shown(buf: io.StringIO, *values: str) -> None:
    out = _flat(buf.getvalue())
    for v in values:
        assert _flat(v) in out, f"{v!r} not printed as written:\n{buf.getvalue()}"


@pytest.mark.parametrize("h", HOSTILE)
def test_resolve_conflicts_notes_and_the_asked_flags_print_as_written(h):
    """fuzz report 14 (R4): `envkit resolve --gpu '[/]V100' --flash-attn 2` crashed with MarkupError."""
    result = resolve(M, parse_query(M, ResolveFlags.from_mapping({"gpu": "[/]V100", "flash_attn": "2"})))
    assert result.solution is None
    result = replace(result, conflicts=(Conflict("flash-attn.gpu-arch", f"message {h}", f"fix {h}", f"source {h}"),),
                     warnings=(f"warning {h}",), suggestions=(("gpu", {"torch": f"2.4 {h}"}),))
    c, buf = _console()
    report.print_result(result, c)
    _shown(buf, "--gpu '[/]V100'", f"message {h}", f"fix {h}", f"source {h}", f"warning {h}", f"torch 2.4 {h}")


@pytest.mark.parametrize("h", HOSTILE)
def test_a_solution_with_matrix_strings_prints_as_written(h):
    result = resolve(M, parse_query(M, ResolveFlags.from_mapping({"gpu": "H100", "flash_attn": "2"})))
    assert result.solution is not None and result.solution.gpu is not None
    sol = replace(result.solution, gpu=replace(result.solution.gpu, name=f"H100 {h}"), notes=(f"note {h}",),
                  devel_image=f"devel {h}")
    c, buf = _console()
    report.print_result(replace(result, solution=sol), c)
    _shown(buf, f"H100 {h}", f"note {h}", f"devel {h}")


@pytest.mark.parametrize("h", HOSTILE)
def test_matrix_show_prints_matrix_strings_as_written(h):
    """fuzz report 14: `[/]` in a matrix string crashed `matrix show`."""
    m = replace(M, gpus=(replace(M.gpus[0], name=f"gpu {h}", aliases=(f"alias {h}",)),) + tuple(M.gpus[1:]))
    c, buf = _console()
    report.print_matrix(m, "gpu", c)
    _shown(buf, f"gpu {h}", f"alias {h}")


@pytest.mark.parametrize("h", HOSTILE)
def test_the_plan_prints_steps_paths_and_warnings_as_written(h):
    g = generate(ResolveFlags.from_mapping({"platform": "cpu"}))
    plan = g.plan
    stage = plan.stages[0]
    step = replace(stage.steps[0], title=f"title {h}", why=f"why {h}", reaches=(f"http://mirror/{h}",))
    plan = replace(plan, stack=f"stack {h}", warnings=(f"warning {h}",), carried=(Carried(f"path {h}", f"what {h}", f"from {h}"),),
                   stages=(replace(stage, image=f"image {h}", steps=(step,) + stage.steps[1:]),) + plan.stages[1:])
    c, buf = _console()
    report.print_plan(plan, f"out {h}", [f"file {h}"], c)
    _shown(buf, f"stack {h}", f"title {h}", f"why {h}", f"http://mirror/{h}", f"image {h}", f"warning {h}", f"path {h}",
           f"what {h}", f"from {h}", f"out {h}", f"file {h}")


@pytest.mark.parametrize("h", HOSTILE)
def test_bundle_and_build_summaries_print_names_as_written(h):
    c, buf = _console()
    rep = SimpleNamespace(out=Path(f"bundle-{h}"), files=3, bytes=2**20, downloaded=[], reused=[], complete_already=False)
    report.print_bundle(rep, c)
    report.print_bundle(replace_ns(rep, complete_already=True), c)
    report.print_build(Built(f"image {h}", "sha256:1", 2**20, 1.0, "none", True, 3, ((f"stage {h}", 1.0),)), c)
    _shown(buf, f"bundle-{h}", f"image {h}", f"stage {h}")


def replace_ns(ns: SimpleNamespace, **kw: object) -> SimpleNamespace:
    return SimpleNamespace(**{**vars(ns), **kw})


@pytest.mark.parametrize("h", HOSTILE)
def test_self_test_checks_models_and_lambada_print_as_written(h):
    doc = {"checks": [{"name": f"check {h}", "ok": False, "detail": f"detail {h}"}, {"name": "import torch", "ok": True, "detail": ""}],
           "decode": {"tokens_per_s": 10, "model": f"model {h}", "prompt_len": 4, "new_tokens": 8, "ttft_ms": 1, "tpot_ms": 2,
                      "metric": f"metric {h}"}, "device": f"device {h}",
           "models": [{"shape": f"shape {h}", "engine": f"engine {h}", "weights_gb": 1, "tokens_per_s": 2, "ttft_ms": 1, "tpot_ms": 1}],
           "lambada": [{"model": f"lmodel {h}", "engine": "hf", "examples": 3, "accuracy": 0.5, "seconds": 1}]}
    c, buf = _console()
    report.print_selftest(doc, f"img {h}", c)
    _shown(buf, f"check {h}", f"detail {h}", f"model {h}", f"metric {h}", f"device {h}", f"shape {h}", f"engine {h}", f"lmodel {h}", f"img {h}", "FAIL")


@pytest.mark.parametrize("h", HOSTILE)
def test_doctor_prints_facts_and_findings_as_written(h):
    """newcomer review D10: an NVML error holding `[/usr/lib/x86_64-linux-gnu]` crashed `doctor --facts`;
    `[red]x[/red]` was shown as a red x."""
    host = Host(nvml_error=f"cannot load {h}")
    findings = judge(M, host)
    assert any(h in f.seen for f in findings)
    findings += [Finding("warning", "torch.cpu-build", f"seen {h}", f"why {h}", f"fix {h}", f"source {h}")]
    host = replace(host, gpus=(GpuFact(f"GPU {h}", "9.0"),), driver=f"550 {h}", torch=f"torch {h}", vllm=f"vllm {h}")
    c, buf = _console()
    report.print_doctor(host, findings, f"image {h}", c)
    _shown(buf, f"cannot load {h}", f"seen {h}", f"why {h}", f"fix {h}", f"source {h}", f"GPU {h}", f"550 {h}", f"torch {h}",
           f"vllm {h}", f"image {h}")


@pytest.mark.parametrize("h", HOSTILE)
def test_inspect_prints_labels_and_the_solution_as_written(h):
    sol = {"platform": f"cpu {h}", "python": "3.11", "torch": {"pin": f"2.4 {h}", "cxx11abi": True}, "gpu": {"name": f"g {h}", "arch": "sm_90"},
           "kernels": [{"name": f"k {h}", "module": "m", "arch_list": ["8.0"]}], "vllm": {"version": f"v {h}"}}
    c, buf = _console()
    report.print_inspect(f"img {h}", {"org.opencontainers.image.description": f"stack {h}"}, sol, c)
    _shown(buf, f"img {h}", f"stack {h}", f"cpu {h}", f"2.4 {h}", f"g {h}", f"k {h}", f"v {h}")


@pytest.mark.parametrize("h", HOSTILE)
def test_the_sweep_prints_its_title_and_error_notes_as_written(h):
    level = {"concurrency": 1, "requests": 2, "failed": 1, "request_throughput": 1.0, "input_throughput": 1.0, "output_throughput": 1.0,
             "mean_ttft_ms": 1.0, "p99_ttft_ms": None, "mean_tpot_ms": 1.0, "p99_tpot_ms": 1.0, "errors": [f"err {h}"], "out_of_memory": False}
    doc = {"model": f"model {h}", "engine": f"http://host/{h}", "dataset": f"data {h}", "input_len": None, "output_len": 4, "levels": [level]}
    c, buf = _console()
    report.print_sweep(doc, c)
    _shown(buf, f"model {h}", f"http://host/{h}", f"data {h}", f"err {h}")


@pytest.mark.parametrize("h", HOSTILE)
def test_progress_lines_preflight_transfers_and_the_board_print_as_written(h):
    c, buf = _console()
    r = progress.RichReporter(c)
    r.say(f"say {h}")
    r.build_line(f"Step 1/2 : RUN {h}")
    r.build_line(f"log {h}")
    r.preflight([Check(f"check {h}", False, f"detail {h}", f"fix {h}"), Check("engine", True, "ok")])
    with r.transfer(f"images/{h}.tar") as tick:
        tick(10, 100)
    board = progress.BuildBoard([f"target {h}"], c)
    board.update(f"target {h}", state="failed", step=f"step {h}")
    c.print(board.table())
    _shown(buf, f"say {h}", f"RUN {h}", f"log {h}", f"check {h}", f"detail {h}", f"fix {h}", f"target {h}", f"step {h}")


def test_a_transfer_named_with_markup_does_not_crash_the_progress_bar():
    """The bar's description column reads markup: a file name `[/]` was a MarkupError."""
    c = Console(file=io.StringIO(), force_terminal=True, width=120)
    with contextlib.ExitStack() as stack:
        tick = stack.enter_context(progress.RichReporter(c).transfer("images/[/]x.tar"))
        tick(1, 2)


def test_build_log_and_progress_lines_are_never_split_on_a_narrow_console():
    """CI logs are grepped for a step's output ("Cuda compilation tools, release 13.0"): on an 80-column console
    (COLUMNS=80 in a CI runner) a long line stays one line, where rich would fold it at a space."""
    buf = io.StringIO()
    r = progress.RichReporter(Console(file=buf, width=40, color_system=None, highlight=False, soft_wrap=False))
    nvcc = "#12 0.512 Cuda compilation tools, release 13.0, V13.0.88 from the pip wheels' nvcc in /opt/venv"
    say = "loading images/docker.io_library_ubuntu_24.04.tar into the engine before the build starts"
    r.build_line(nvcc)
    r.build_line("Step 3/9 : RUN python -m pip install --no-index --find-links /wheelhouse torch==2.11.0")
    r.say(say)
    lines = buf.getvalue().splitlines()
    assert lines == [nvcc, "Step 3/9 : RUN python -m pip install --no-index --find-links /wheelhouse torch==2.11.0", say]
