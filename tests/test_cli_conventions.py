"""The conventions users bring from other tools: --version, completion, -v/-q and --progress, examples and exit
codes in help, and one error dialect (click's usage errors look and exit like envkit's own; with --json the error
is a JSON document on stdout too)."""
from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from rich.console import Console

import envkit
from envkit import ui
from envkit.cli import main as cli_main
from envkit.errors import EXIT_BUG
from envkit.model.options import EXAMPLES

ENVKIT = [sys.executable, "-m", "envkit"]


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([*ENVKIT, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


def test_version_prints_the_package_version():
    p = run("--version")
    assert p.returncode == 0 and p.stdout == f"envkit {envkit.__version__}\n"


def test_help_offers_shell_completion_and_the_global_options():
    p = run("--help")
    assert p.returncode == 0
    for option in ("--install-completion", "--show-completion", "--verbose", "--quiet", "--progress", "--no-color", "Exit codes"):
        assert option in p.stdout, option


@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_every_command_help_has_examples_and_exit_codes(command):
    args = ("matrix", command) if command in {"export", "check", "refresh", "show"} else (command,)
    p = run(*args, "--help", env={"COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    assert "Examples:" in p.stdout and "Exit codes:" in p.stdout
    assert EXAMPLES[command][0].split("  ")[0].strip() in p.stdout


@pytest.mark.parametrize("args, needle, fix", [
    (("resolve", "--gpus", "A100"), "No such option: --gpus", "did you mean --gpu?"),
    (("reslove", "--gpu", "A100"), "No such command 'reslove'", "did you mean 'resolve'?"),
    (("resolve", "--gpu"), "Option '--gpu' requires an argument", "envkit resolve --help"),
    (("build", "--jobs", "0"), "Invalid value for '--jobs'", "envkit build --help"),
    (("--progress", "sometimes", "resolve"), "Invalid value for '--progress'", "envkit --help"),
    (("resolve", "--platform", "cpu", "-q"), "No such option: -q", "-q is a global option: put it before the command"),
])
def test_usage_errors_are_one_envkit_line_with_exit_2(args, needle, fix):
    p = run(*args)
    assert p.returncode == 2
    assert p.stdout == ""
    line, = p.stderr.splitlines()
    assert line.startswith("envkit: error: ") and needle in line and f"(fix: " in line and fix in line


def test_usage_error_with_json_prints_the_error_document_on_stdout():
    p = run("resolve", "--gpus", "A100", "--json")
    assert p.returncode == 2
    doc = json.loads(p.stdout)
    assert doc == {"schema": 1, "ok": False, "error": {"kind": "usage", "exit_code": 2, "message": "No such option: --gpus",
                                                      "fix": "did you mean --gpu? `envkit resolve --help` lists them all"}}


def test_bad_input_with_json_prints_the_error_document_on_stdout():
    p = run("resolve", "--gpu", "no-such-gpu", "--json")
    assert p.returncode == 2
    doc = json.loads(p.stdout)
    assert doc["ok"] is False and doc["error"]["kind"] == "input" and "no-such-gpu" in doc["error"]["message"]
    assert p.stderr.startswith("envkit: error: unknown GPU")


def test_a_bug_is_one_line_exit_70_and_the_traceback_only_with_verbose(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("a planted bug")

    import envkit.app.resolve

    monkeypatch.setattr(envkit.app.resolve, "resolve", broken)
    for argv, traceback_shown in ((["resolve", "--gpu", "H100"], False), (["-v", "resolve", "--gpu", "H100"], True)):
        with pytest.raises(SystemExit) as exit_:
            cli_main.main(argv)
        assert exit_.value.code == EXIT_BUG
        err = capsys.readouterr().err
        last = err.splitlines()[-1]
        assert last.startswith("envkit: error: internal error: ZeroDivisionError: a planted bug") and "re-run with -v" in last
        assert ("Traceback (most recent call last)" in err) is traceback_shown
    ui.settings.configure()


def test_quiet_drops_progress_but_keeps_the_preflight_verdict():
    ui.settings.configure(progress="none")
    try:
        buf = io.StringIO()
        with ui.progress.reporter(Console(file=buf, width=120)) as r:
            r.say("fetched torch")
            r.build_line("Step 1/9 : FROM debian")
            with r.transfer("torch.whl") as tick:
                tick(10, 100)
            r.requests_done(1, 2, 4)
            from envkit.core.preflight import Check
            r.preflight([Check("engine", True, "docker 28 answers", "")])
        out = buf.getvalue()
        assert "fetched" not in out and "Step 1/9" not in out and "docker 28 answers" in out
    finally:
        ui.settings.configure()


def test_plain_progress_draws_no_live_bars_and_no_color_drops_colour():
    ui.settings.configure(progress="plain", color=False)
    try:
        c = ui.settings.console()
        assert c.is_interactive is False and c.no_color is True
    finally:
        ui.settings.configure()
    assert ui.settings.current() == ui.settings.Settings()


def test_progress_none_from_the_environment_and_quiet_flag_both_run():
    for args, env in ((("-q", "resolve", "--gpu", "H100"), {}), (("resolve", "--gpu", "H100"), {"ENVKIT_PROGRESS": "none"})):
        p = run(*args, env=env)
        assert p.returncode == 0, p.stderr
        assert "torch" in p.stdout


def test_generate_dash_o_prints_the_dockerfile_and_writes_nothing(tmp_path):
    p = subprocess.run([*ENVKIT, "generate", "--platform", "cpu", "-o", "-"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("# Generated by envkit") and "\nFROM " in p.stdout
    assert list(tmp_path.iterdir()) == []


def test_help_shows_what_each_resolve_flag_takes_and_completion_offers_closed_sets():
    p = run("resolve", "--help", env={"COLUMNS": "200"})
    for metavar in ("NAME|sm_XY|gfxNNN", "cuda|rocm|dtk|cpu", "VERSION|SPEC", "MATRIX.toml"):
        assert metavar in p.stdout, metavar
    assert "<str>" not in p.stdout
    done = run(env={"_ENVKIT_COMPLETE": "complete_bash", "COMP_WORDS": "envkit resolve --platform c", "COMP_CWORD": "3"})
    assert done.stdout.split() == ["cuda", "cpu"]


def test_a_nul_in_an_argument_or_a_path_is_bad_input_not_a_bug(capsys):
    """The fuzz campaign of seed 20261201: `matrix check '\\0'` ended in ValueError (embedded null byte), exit 70."""
    from pathlib import Path

    from envkit.config import matrix_file, userfile
    from envkit.errors import InputError

    for argv in (["matrix", "check", "\0"], ["resolve", "--matrix", "m\0.toml", "--json"]):
        with pytest.raises(SystemExit) as exit_:
            cli_main.main(argv)
        assert exit_.value.code == 2
        assert "holds a NUL character" in capsys.readouterr().err
    for read in (lambda: userfile.read_text("site\0.toml", "site file", "fix"), lambda: matrix_file._read(Path("m\0.toml"))):
        with pytest.raises(InputError, match="a path cannot hold a NUL character"):
            read()


def test_matrix_check_takes_the_matrix_as_every_command_does():
    """Newcomer review 1.2: `matrix check PATH` was the only command not spelling it --matrix."""
    from envkit import data

    assert run("matrix", "check", "--matrix", str(data.matrix_toml())).returncode == 0
    p = run("matrix", "check", "a.toml", "--matrix", "b.toml")
    assert p.returncode == 2 and "two matrices given" in p.stderr


def test_an_error_holding_an_outside_tools_lines_is_still_one_line(monkeypatch, capsys):
    """The independent review: doctor --image and selftest --image put the tail of a container's output (a traceback)
    into their message; the error line joins those lines."""
    from envkit.errors import ExternalError

    def failing(*args, **kwargs):
        raise ExternalError("the probe failed in the image:\nTraceback (most recent call last):\n  File x\nImportError: y", "fix\nit")

    monkeypatch.setattr(envkit.app.resolve, "resolve", failing)
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["resolve", "--gpu", "H100"])
    assert exit_.value.code == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ImportError: y" in err and "fix | it" in err


def _all_params():
    import typer.main

    root = typer.main.get_command(cli_main.make_app())
    stack = [("envkit", root)]
    while stack:
        name, cmd = stack.pop()
        for p in cmd.params:
            yield f"{name} {p.name}", getattr(p, "help", None) or ""
        for sub_name, sub in getattr(cmd, "commands", {}).items():
            stack.append((f"{name} {sub_name}", sub))


def test_no_option_help_holds_a_bracket_word_that_rich_would_swallow():
    """Help is rendered as rich markup: an unescaped `[rewrite]` vanished from --from-wheel's help (newcomer review
    3, D11: "or the site's  of it"). A literal bracket is written `\\[`."""
    import re

    params = list(_all_params())
    assert len(params) > 100
    swallowed = [(where, m.group(0)) for where, text in params
                 for m in re.finditer(r"(?<!\\)\[[a-z][a-z0-9_.-]*\]", text)]
    assert swallowed == []
    p = run("generate", "--help", env={"COLUMNS": "250"})
    assert "or the site's [rewrite] of it" in p.stdout
