"""ui/errors.guarded: every way a command can end becomes one line and its documented exit code."""
from __future__ import annotations

import pytest
import typer

from envkit.errors import EXIT_BUG, EXIT_INTERRUPTED, InputError
from envkit.ui.errors import guarded


def _run(raise_, capsys):
    def run():
        raise raise_
    with pytest.raises(SystemExit) as ended:
        guarded(["resolve"], run, typer.BadParameter, ("resolve",), ())
    return ended.value.code, capsys.readouterr().err


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), typer.Abort()])
def test_an_interrupt_or_a_prompt_s_abort_is_exit_130_not_a_bug(interrupt, capsys):
    code, err = _run(interrupt, capsys)
    assert code == EXIT_INTERRUPTED
    assert err == "envkit: interrupted\n"


def test_a_runtime_error_of_envkit_s_own_is_still_a_bug(capsys):
    code, err = _run(RuntimeError("boom"), capsys)
    assert code == EXIT_BUG
    assert "internal error: RuntimeError: boom" in err


def test_an_input_error_is_its_line_and_exit_2(capsys):
    code, err = _run(InputError("bad --gpu", "use --gpu H100"), capsys)
    assert code == 2
    assert "bad --gpu" in err and "use --gpu H100" in err
