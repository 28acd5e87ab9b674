"""The CLI's own error: what a command says on one line before it exits."""

from __future__ import annotations


class CliError(Exception):
    """A command that cannot go on: main() prints the message on one line, exits `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def usage_error(message: str) -> CliError:
    """A command line, config file or environment that cannot run (exit status 2)."""
    return CliError(message, 2)
