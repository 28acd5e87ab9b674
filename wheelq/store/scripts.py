"""The Lua scripts: loading, hashing, and the one table of status codes.

Each transition is one file in ``lua/``; ``_lib.lua`` (shared helpers) is
prepended to every script, so the SHA1 is of the full text sent. Replies
start with a status code; `check` turns a non-zero one into the same typed
exception wherever it comes from.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from wheelq.errors import LeaseLostError, ScriptError

NAMES = (
    "enqueue",
    "reschedule",
    "cancel",
    "emit_due",
    "preload",
    "lease_acquire",
    "lease_renew",
    "lease_release",
    "retry",
    "dead_letter",
    "claim",
    "touch",
    "trim",
    "replay",
    "drop_shard",
)

OK = 0
WRONG_TYPE = -1
LEASE_LOST = -2


@dataclass(frozen=True, slots=True)
class Script:
    """A script's full source and its SHA1 (what EVALSHA takes)."""

    name: str
    source: str
    sha: str


@cache
def script(name: str) -> Script:
    """Load a script by name (cached)."""
    if name not in NAMES:
        raise KeyError(f"no script named {name!r}")
    lua = resources.files("wheelq.store") / "lua"
    source = (lua / "_lib.lua").read_text("utf-8") + "\n" + (lua / f"{name}.lua").read_text("utf-8")
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())  # noqa: S324 (Redis's hash)


def check(name: str, reply: Any) -> list[Any]:
    """Return a script's reply if its status is OK (or a positive outcome code).

    Raises:
        LeaseLostError: Status -2: the caller's lease is gone; nothing was written.
        ScriptError: Status -1 (a key has the wrong type; nothing was written) or
            a reply that is not a status list.
    """
    if not isinstance(reply, list) or not reply or not isinstance(reply[0], int):
        raise ScriptError(f"{name}.lua returned {reply!r:.200}, expected a status list")
    status = reply[0]
    if status == LEASE_LOST:
        raise LeaseLostError(f"{name}.lua: this node does not hold the shard's lease")
    if status == WRONG_TYPE:
        key = reply[1].decode() if isinstance(reply[1], bytes) else reply[1]
        raise ScriptError(
            f"{name}.lua: key {key!r} holds a value of the wrong type; nothing was written"
        )
    if status < 0:
        raise ScriptError(f"{name}.lua returned unknown status {status}")
    return reply
