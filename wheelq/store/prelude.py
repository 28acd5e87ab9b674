"""The shared prelude (``lua/_lib.lua``) cut to what one script uses.

Redis runs a script's whole text on every call, so each ``local function`` of the prelude is
a closure made (and later collected) per call whether the script calls it or not: with all
of them, calling a script costs about twice what a bare ``return`` does. `for_script` keeps
the prelude's top-level declarations that the script names, and those they name in turn,
in their order.

A declaration starts at a line beginning ``local`` and runs to the next such line (comments
before a declaration go with the one above it; the text before the first is kept as the
header). "Names" is lexical: any identifier in the text, comments included, so a helper is
kept whenever in doubt, and never dropped while something that could call it stays (Lua
resolves a local by the text, not at run time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FUNCTION = re.compile(r"local function ([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True, slots=True)
class Declaration:
    """One top-level ``local`` of the prelude: the names it declares and its text."""

    names: frozenset[str]
    text: str


def declarations(prelude: str) -> tuple[str, list[Declaration]]:
    """The prelude's header and its top-level declarations, in order."""
    header: list[str] = []
    parts: list[list[str]] = []
    for line in prelude.splitlines(keepends=True):
        if line.startswith("local "):
            parts.append([line])
        elif parts:
            parts[-1].append(line)
        else:
            header.append(line)
    return "".join(header), [Declaration(_declared(part[0]), "".join(part)) for part in parts]


def _declared(first_line: str) -> frozenset[str]:
    """The names ``local function f`` or ``local a, b = ...`` declares."""
    function = _FUNCTION.match(first_line)
    if function:
        return frozenset({function.group(1)})
    names = first_line[len("local ") :].split("=", maxsplit=1)[0].split("--", maxsplit=1)[0]
    return frozenset(name.strip() for name in names.split(",") if name.strip())


def for_script(prelude: str, body: str) -> str:
    """The prelude's header and the declarations `body` needs, directly or through others."""
    header, parts = declarations(prelude)
    named = set(_IDENTIFIER.findall(body))
    kept: set[int] = set()
    grew = True
    while grew:
        grew = False
        for i, part in enumerate(parts):
            if i not in kept and part.names & named:
                kept.add(i)
                named.update(_IDENTIFIER.findall(part.text))
                grew = True
    return header + "".join(part.text for i, part in enumerate(parts) if i in kept)
