"""One exception hierarchy. Each class owns its exit code; `cli.main` is the one place that prints them.

Exit codes (documented in docs/guide/exit-codes.md and the README):
  0  success
  1  no solution / problems found (not an exception: the command returns it)
  2  bad input: a flag, a spec, a file the user gave
  3  the matrix data file is invalid
  4  an external engine or tool failed (docker, pip, network, a build step)
  5  preflight refused a build: bundle files missing or altered, no engine, too little disk or memory
  6  the server under test misbehaved (serving sweep, compare): it answered, but not as the protocol says: an HTML
     page or no model list at /v1/models, a 3xx/4xx/5xx where a readiness probe wants 200 (a wrong base URL such
     as .../v1, where every path is a 404), a stream broken, stalled past --request-timeout or holding an
     impossible token count at the warm-up. The line names the status or what was seen, and the fix.
  70 envkit itself failed (a bug: cli/main.py prints one line; -v the traceback)
  130 interrupted
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Sequence

EXIT_OK = 0
EXIT_NO_SOLUTION = 1  # also: doctor found problems, a self-test or sweep failed
EXIT_EXTERNAL = 4
EXIT_SERVER = 6  # the server under test misbehaved (ServerError)
EXIT_BUG = 70  # envkit itself failed: cli/main.py prints one line, -v the traceback
EXIT_INTERRUPTED = 130


class EnvkitError(Exception):
    exit_code: int = 1

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def one_line(self) -> str:
        return f"{self.message} (fix: {self.fix})" if self.fix else self.message


class InputError(EnvkitError):
    """A flag, version spec or file given by the user is malformed or unknown."""

    exit_code = 2


@dataclass(frozen=True)
class MatrixProblem:
    """One thing wrong with matrix.toml: the line it is on (1-based) and what is wrong there."""

    line: int
    text: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.text}"


class MatrixError(EnvkitError):
    """matrix.toml is malformed. Carries every problem found, each with its line; its one-line message
    names how many and the first (`envkit matrix check` lists them all, one a line)."""

    exit_code = 3

    def __init__(self, problems: Sequence[MatrixProblem], path: str) -> None:
        self.problems = tuple(problems)
        self.path = path
        first = str(self.problems[0]) if self.problems else "unreadable"
        check = f"envkit matrix check {shlex.quote(path)}"
        if len(self.problems) == 1:
            super().__init__(f"{path}: {first}", f"correct that line; `{check}` checks the file again")
        else:
            super().__init__(f"{path}: {len(self.problems)} problems, the first: {first}", f"run `{check}` to list them all")

    @property
    def lines(self) -> list[str]:
        """Each problem as its own line: `line N: what is wrong`."""
        return [str(p) for p in self.problems]


class ExternalError(EnvkitError):
    """Something outside envkit (docker engine, pip, network) failed."""

    exit_code = 4


class PreflightError(EnvkitError):
    """The build was refused before any step ran; every failed check was printed."""

    exit_code = 5


class ServerError(ExternalError):
    """The server under test (serving sweep, compare) answered, but not as its protocol says: the status or what it
    sent is named, with the fix (check the URL, the server's log, --request-timeout). One that does not answer at
    all, or refuses a request with its reason, is an ExternalError (exit 4)."""

    exit_code = EXIT_SERVER
