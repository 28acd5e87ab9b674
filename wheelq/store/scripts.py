"""The Lua scripts: loading (with the parts of ``_lib.lua`` each needs), their SHA1, their
KEYS (`SCRIPT_KEYS`), and `check`, the one place a reply's status is judged
(docs/architecture.md, invariant 11): 0 OK, -1 WRONG_TYPE -> WrongTypeError, -2 LEASE_LOST ->
LeaseLostError, -3 MALFORMED -> MalformedJobError, -4 LATE -> LateReplayError, other ->
ScriptError. ``_lib.lua`` names the same numbers; a unit test holds the two together.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from enum import IntEnum
from importlib import resources
from typing import Any

from wheelq.core.keys import DATA_KEY_NAMES, ShardKeys
from wheelq.errors import (
    LateReplayError,
    LeaseLostError,
    MalformedJobError,
    ScriptError,
    WrongTypeError,
)


class Status(IntEnum):
    """The first element of every script's reply."""

    OK = 0
    WRONG_TYPE = -1
    LEASE_LOST = -2
    MALFORMED = -3
    LATE = -4


class Placed(IntEnum):
    """What enqueue / reschedule did with a job (an outcome field after `Status.OK`)."""

    SCHEDULED = 0
    FIRED = 1
    DUPLICATE = 2  # pending already and replace not asked for (not written)
    APPLIED = 4  # a spool replay: an earlier call applied this write (not written again)
    FULL = 5  # the shard is at its share of max_pending: nothing of the call was written


NOT_PENDING = 3
"""reschedule's outcome when the job is not pending (nothing written)."""


class GroupOutcome(IntEnum):
    """What delete_group or create_group found or did on one shard's stream."""

    NO_GROUP = 0  # no such group (or no stream): nothing done
    GROUP_FOUND = 1  # 'check' mode: the group is there; nothing done
    GROUP_BUSY = 2  # 'delete' mode: the group has entries in flight; kept
    GROUP_DESTROYED = 3
    GROUP_CREATED = 4
    GROUP_LIMIT = 5  # create_group: the stream has its cap of groups; nothing done


_WRITE = ("delayed", "jobs", "ready", "horizon", "inbox")
_LEASE = ("lease", "horizon")
_HISTORY = ("history", "history_old")
"""A shard's job history, both generations (`wq_fired` reads the old one too)."""

SCRIPT_KEYS: dict[str, tuple[str, ...]] = {
    "enqueue": (
        *_WRITE,
        "spooled",
        *_HISTORY,
        "limits",
        "callbacks",
        "events",
        "retries",
        "far",
    ),
    "far_promote": ("lease", "far", "delayed", "jobs", "horizon", "inbox", "limits"),
    "reschedule": (*_WRITE, *_HISTORY, "limits", "callbacks", "retries", "events", "far"),
    "debounce": (
        *_WRITE,
        *_HISTORY,
        "debounce",
        "limits",
        "callbacks",
        "events",
        "retries",
        "far",
    ),
    "cancel": (
        "delayed",
        "jobs",
        "cancelled",
        "retries",
        *_HISTORY,
        "waiters",
        "done",
        "limits",
        "events",
        "far",
        "ready",
        "callbacks",
    ),
    "emit_due": (
        "delayed",
        "jobs",
        "ready",
        "lease",
        "dead",
        *_HISTORY,
        "limits",
        "callbacks",
        "retries",
        "events",
    ),
    "preload": ("delayed", "lease", "horizon"),
    "lease_acquire": (*_LEASE, "inbox", "followed"),
    "lease_renew": ("lease",),
    "lease_release": (*_LEASE, "followed"),
    "lease_followed": ("lease", "followed"),
    "lease_watch": ("lease",),
    "lease_reap": ("lease", "followed", "horizon"),
    "ack": ("stream", *_HISTORY, "waiters", "done", "limits", "events"),
    "retry": (
        "delayed",
        "jobs",
        "stream",
        "horizon",
        "inbox",
        "history",
        "retries",
        "limits",
        "events",
        "far",
        "history_old",
        "waiters",
        "done",
        "ready",
    ),
    "dead_letter": ("stream", "dead", "history", "waiters", "done", "limits", "events"),
    "claim": (
        "stream",
        "dead",
        "history",
        "waiters",
        "done",
        "limits",
        "events",
        "history_old",
        "ready",
    ),
    "touch": ("stream",),
    "trim": ("ready", *_HISTORY, "cancelled", "callbacks", "limits", "events"),
    "replay": ("dead", "ready", *_HISTORY, "limits", "callbacks", "events"),
    "purge_dead": ("dead",),
    "drop_shard": DATA_KEY_NAMES,
    "delete_group": ("stream",),
    "create_group": ("stream",),
    "lookup": ("delayed", "jobs", "ready", *_HISTORY, "cancelled", "callbacks", "far"),
    "schedule_put": ("schedules", "sched_state"),
    "schedule_state": ("schedules", "sched_state", "sched_epoch"),
    "schedule_read": ("schedules", "sched_state", "sched_epoch"),
    "schedule_claim": ("lease", "sched_epoch"),
    "schedule_advance": ("lease", "sched_state", "sched_epoch"),
    "schedule_fence": ("sched_marks",),
    "materialize": (
        *_WRITE[:5],
        *_HISTORY,
        "sched_marks",
        "limits",
        "callbacks",
        "events",
        "far",
    ),
    "note_events": ("limits", "events"),
    "list_pending": ("delayed", "jobs", "retries", "far"),
    "due_within": ("delayed", "far"),
    "list_retrying": ("retries", "delayed", "jobs"),
    "list_retrying_by_due": ("retries", "delayed", "jobs"),
    "due_times": ("delayed", "jobs", "far"),
}
"""Script name -> the `ShardKeys` attributes it takes as KEYS[1], KEYS[2], ..."""

NAMES = tuple(SCRIPT_KEYS)

FLOW_SCRIPTS = ("flow_rate", "flow_enter", "flow_order")
"""Scripts on a flow-control key of their own (`wheelq.core.flow.flow_key`), not a shard's."""

PROCESS_SCRIPTS = ("process_beat", "processes")
"""Scripts on the process list's keys (`wheelq.core.keys.PROCESSES_KEY`), not a shard's."""


@dataclass(frozen=True, slots=True)
class Script:
    """A script's full source and its SHA1 (what EVALSHA takes)."""

    name: str
    source: str
    sha: str


def script(name: str) -> Script:
    """Script `name` as loaded when this module was imported (KeyError for an unknown name)."""
    try:
        return _LOADED[name]
    except KeyError:
        raise KeyError(f"no script named {name!r}") from None


def load_all() -> dict[str, Script]:
    """Every script, read from the package now, each with the parts of ``_lib.lua`` it uses."""
    lua = resources.files("wheelq.store") / "lua"
    prelude = (lua / "_lib.lua").read_text("utf-8")
    loaded = {}
    for name in (*NAMES, *FLOW_SCRIPTS, *PROCESS_SCRIPTS):
        body = (lua / f"{name}.lua").read_text("utf-8")
        source = for_script(prelude, body) + "\n" + body
        sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 (Redis's hash)
        loaded[name] = Script(name, source, sha)
    return loaded


@functools.lru_cache(maxsize=8192)
def script_keys(name: str, keys: ShardKeys) -> tuple[str, ...]:
    """The KEYS `name` takes for one shard, in order (built once per script and shard)."""
    return tuple(getattr(keys, attr) for attr in SCRIPT_KEYS[name])


def text(value: Any, errors: str = "strict") -> str:
    return value.decode("utf-8", errors) if isinstance(value, bytes) else str(value)


def check(name: str, reply: Any) -> list[Any]:
    """Return script `name`'s reply if its status is OK; raise the status's error otherwise."""
    if not isinstance(reply, list) or not reply or not isinstance(reply[0], int):
        raise ScriptError(f"{name}.lua returned {reply!r:.200}, expected a status list")
    status = reply[0]
    if status == Status.OK:
        return reply
    if status == Status.LEASE_LOST:
        raise LeaseLostError(f"{name}.lua: this node does not hold the shard's lease")
    if status == Status.WRONG_TYPE and len(reply) == 2:
        raise WrongTypeError(name, text(reply[1], "replace"))
    if status == Status.MALFORMED and len(reply) == 4:
        raise MalformedJobError(*(text(part, "replace") for part in reply[1:4]))
    if status == Status.LATE and len(reply) == 4:
        raise LateReplayError(text(reply[1], "replace"), int(reply[2]), int(reply[3]))
    raise ScriptError(f"{name}.lua returned unknown status {status} ({reply!r:.200})")


# --- the prelude cut to what one script uses ---------------------------------------------------
#
# Redis runs a script's whole text on every call, so each ``local function`` of _lib.lua is a
# closure made per call whether the script calls it or not (with all of them a call costs
# about twice a bare ``return``). A declaration runs from a line beginning ``local`` to the
# next; "names" is lexical (comments count), so a helper is kept whenever in doubt.

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


_LOADED = load_all()
"""Read once, as the process starts: a process never reads a script from disk again, so
replacing the installed package under a running one (an upgrade in place) cannot fail a call
(docs/architecture.md, "Service lifecycle")."""
