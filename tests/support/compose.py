"""deploy/compose.yaml as Docker Compose reads it: each string of the file with its variables
interpolated from an environment, as the compose specification's "Interpolation" says:
``$$`` is a ``$``; ``${VAR}`` and ``$VAR`` are VAR's value or empty; ``${VAR:-default}``
(unset or empty) and ``${VAR-default}`` (unset) give a default; ``${VAR:?error}`` (unset or
empty) and ``${VAR?error}`` (unset) refuse the whole file with the error, which is how
``docker compose config`` and ``up`` refuse to start without a secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from tests.support.cli import ROOT

COMPOSE = ROOT / "deploy" / "compose.yaml"
_REFERENCE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


class MissingVariableError(Exception):
    """A ``${VAR:?error}`` (or ``${VAR?error}``) whose variable is not set."""

    def __init__(self, var: str, error: str) -> None:
        super().__init__(f"required variable {var} is missing a value: {error}")
        self.var = var


@dataclass(frozen=True)
class Reference:
    """One ``${...}`` or ``$VAR`` of the file: its variable, operator ('' for none) and
    argument (the default or the error)."""

    var: str
    op: str
    arg: str


def references(text: str) -> Iterator[Reference]:
    for found in _REFERENCE.finditer(text):
        if not found["escaped"]:
            yield Reference(
                found["braced"] or found["named"], found["op"] or "", found["arg"] or ""
            )


def interpolate(text: str, environ: Mapping[str, str]) -> str:
    def value(found: re.Match[str]) -> str:
        if found["escaped"]:
            return "$"
        var, op, arg = found["braced"] or found["named"], found["op"] or "", found["arg"] or ""
        have = environ.get(var)
        unset = have is None or (op.startswith(":") and have == "")
        if op.endswith("?") and unset:
            raise MissingVariableError(var, arg)
        if op.endswith("-") and unset:
            return arg
        return have or ""

    return _REFERENCE.sub(value, text)


def strings(node: Any) -> Iterator[str]:
    """Every string value in a YAML document (mapping values and list items)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)


def _interpolated(node: Any, environ: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, environ)
    if isinstance(node, dict):
        return {key: _interpolated(value, environ) for key, value in node.items()}
    if isinstance(node, list):
        return [_interpolated(item, environ) for item in node]
    return node


def raw() -> dict[str, Any]:
    """The compose file as YAML, its variables not interpolated."""
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text("utf-8"))
    return doc


def load(environ: Mapping[str, str]) -> dict[str, Any]:
    """The compose file as compose reads it with `environ`.

    Raises:
        MissingVariableError: A variable the file requires is not set.
    """
    doc: dict[str, Any] = _interpolated(raw(), environ)
    return doc
