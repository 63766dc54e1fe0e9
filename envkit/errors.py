"""One exception hierarchy. Each class owns its exit code; `cli.main` is the one place that prints them.

Exit codes (documented in the README):
  0  success
  1  no solution / problems found (not an exception: the command returns it)
  2  bad input: a flag, a spec, a file the user gave
  3  the matrix data file is invalid
  4  an external engine or tool failed (docker, pip, network, a build step)
  5  preflight refused a build: bundle files missing or altered, no engine, too little disk or memory
  70 envkit itself failed (a bug: cli/main.py prints one line; -v the traceback)
  130 interrupted
"""
from __future__ import annotations

EXIT_OK = 0
EXIT_NO_SOLUTION = 1  # also: doctor found problems, a self-test or sweep failed
EXIT_EXTERNAL = 4


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


class MatrixError(EnvkitError):
    """matrix.toml is malformed. Carries every problem found, each with its line."""

    exit_code = 3

    def __init__(self, problems: list[str], path: str) -> None:
        self.problems = problems
        self.path = path
        super().__init__(
            f"{path}: {len(problems)} invalid row(s): " + "; ".join(problems),
            "correct the rows named above (envkit matrix check lists them)",
        )


class ExternalError(EnvkitError):
    """Something outside envkit (docker engine, pip, network) failed."""

    exit_code = 4


class PreflightError(EnvkitError):
    """The build was refused before any step ran; every failed check was printed."""

    exit_code = 5
