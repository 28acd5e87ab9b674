"""The Lua scripts: loading (each with what it uses of the includes it names), their SHA1,
their KEYS (`SCRIPT_KEYS`), and `check`, the one place a reply's status is judged
(docs/architecture.md, invariant 11): 0 OK, -1 WRONG_TYPE -> WrongTypeError, -2 LEASE_LOST ->
LeaseLostError, -3 MALFORMED -> MalformedJobError, -4 LATE -> LateReplayError, other ->
ScriptError. ``includes/status.lua`` names the same numbers; a unit test holds the two
together.
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
    ScriptIncludeError,
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
_FOLLOW = ("followers", "notices", "inbox")
"""What a script that ends jobs tells their followers with (``includes/follow.lua``)."""

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
        "held",
        "keyed",
    ),
    "far_promote": ("lease", "far", "delayed", "jobs", "horizon", "inbox", "limits"),
    "reschedule": (
        *_WRITE,
        *_HISTORY,
        "limits",
        "callbacks",
        "retries",
        "events",
        "far",
        "held",
        "keyed",
        "followers",
        "notices",
    ),
    "debounce": (
        *_WRITE,
        *_HISTORY,
        "debounce",
        "limits",
        "callbacks",
        "events",
        "retries",
        "far",
        "held",
        "keyed",
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
        "held",
        "keyed",
        "waiting",
        *_FOLLOW,
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
        "held",
        "turns",
        "weights",
        "keyed",
        "far",
        *_FOLLOW,
    ),
    "preload": ("delayed", "lease", "horizon"),
    "lease_acquire": (*_LEASE, "inbox", "followed"),
    "lease_renew": ("lease",),
    "lease_release": (*_LEASE, "followed"),
    "lease_followed": ("lease", "followed"),
    "lease_watch": ("lease",),
    "lease_reap": ("lease", "followed", "horizon"),
    "ack": ("stream", *_HISTORY, "waiters", "done", "limits", "events", *_FOLLOW),
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
        "keyed",
        "followers",
        "notices",
    ),
    "dead_letter": (
        "stream",
        "dead",
        "history",
        "waiters",
        "done",
        "limits",
        "events",
        *_FOLLOW,
    ),
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
        *_FOLLOW,
    ),
    "touch": ("stream",),
    "trim": ("ready", *_HISTORY, "cancelled", "callbacks", "limits", "events"),
    "replay": ("dead", "ready", *_HISTORY, "limits", "callbacks", "events"),
    "purge_dead": ("dead",),
    "drop_shard": DATA_KEY_NAMES,
    "delete_group": ("stream",),
    "create_group": ("stream",),
    "lookup": ("delayed", "jobs", "ready", *_HISTORY, "cancelled", "callbacks", "far", "held"),
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
        "keyed",
    ),
    "note_events": ("limits", "events"),
    "weights_put": ("weights",),
    "list_pending": ("delayed", "jobs", "retries", "far"),
    "due_within": ("delayed", "far"),
    "list_held": ("held", "turns", "weights", "jobs"),
    "list_retrying": ("retries", "delayed", "jobs"),
    "list_retrying_by_due": ("retries", "delayed", "jobs"),
    "due_times": ("delayed", "jobs", "far"),
    "key_jobs": ("keyed", "delayed", "jobs", "retries", "far", "held"),
    "follow": (
        "followers",
        "notices",
        "jobs",
        *_HISTORY,
        "far",
        "cancelled",
        "retries",
        "inbox",
    ),
    "resolve": (
        *_WRITE,
        *_HISTORY,
        "limits",
        "callbacks",
        "events",
        "keyed",
        "waiting",
        "cancelled",
        "followers",
        "notices",
        "waiters",
        "done",
        "far",
        "dead",
    ),
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
    """Every script, read from the package now, each with the parts of its includes it uses.

    Raises:
        ScriptIncludeError: a script or include names an unknown include or a cycle of them,
            or uses a name of an include it does not name.
    """
    lua = resources.files("wheelq.store") / "lua"
    library = Library.read()
    loaded = {}
    for name in (*NAMES, *FLOW_SCRIPTS, *PROCESS_SCRIPTS):
        source = library.compose(f"{name}.lua", (lua / f"{name}.lua").read_text("utf-8"))
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


# --- includes: the helpers a script names ------------------------------------------------------
#
# The helpers the scripts share live in lua/includes/<concern>.lua. Every script and every
# include names the includes it uses on its header's "Includes:" line ("none": it uses none);
# the loader resolves them transitively, each once, an include after those it names. A file
# that uses a name an include declares (or any wq_/WQ_ name) must declare it or name an
# include that does: so a script's header says where each helper it calls comes from.
# Redis runs a script's whole text on every call, so each ``local function`` sent is a closure
# made per call whether the script calls it or not (with all of them a call costs about twice
# a bare ``return``): of its includes a script carries only the declarations its code
# reaches, directly or through others. A declaration runs from the comments above its
# ``local`` line to the next declaration's.

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FUNCTION = re.compile(r"local function ([A-Za-z_][A-Za-z0-9_]*)")
_LOCALS = re.compile(
    r"\blocal\s+function\s+([A-Za-z_]\w*)|\blocal\s+([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)"
)
_NOT_CODE = re.compile(
    r"--\[(=*)\[.*?\]\1\]"  # long comment
    r"|--[^\n]*"  # comment
    r"|\[(=*)\[.*?\]\2\]"  # long string
    r"|'(?:\\.|[^'\\\n])*'"
    r'|"(?:\\.|[^"\\\n])*"',
    re.S,
)
_LIBRARY_NAME = re.compile(r"(?:wq|WQ)_\w+")
_INCLUDES_LINE = re.compile(r"^Includes:(.*)$", re.M)
_HEADER_END = "\n]]\n"


def code_names(text: str) -> frozenset[str]:
    """The identifiers of Lua `text`'s code: its comments and string literals left out."""
    return frozenset(_IDENTIFIER.findall(_NOT_CODE.sub(" ", text)))


def local_names(text: str) -> frozenset[str]:
    """Every name Lua `text` declares ``local`` (at any depth)."""
    names: set[str] = set()
    for function, variables in _LOCALS.findall(_NOT_CODE.sub(" ", text)):
        names.update([function] if function else re.split(r"\s*,\s*", variables))
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class Declaration:
    """One top-level ``local`` of an include: the names it declares, the names its code
    uses, and its text (the comments right above it included)."""

    names: frozenset[str]
    uses: frozenset[str]
    text: str


def declarations(file: str, body: str) -> list[Declaration]:
    """The top-level declarations of an include's `body` (its text after the header), in
    order; together they are the whole body."""
    parts: list[list[str]] = []
    above: list[str] = []  # blank and comment lines not yet followed by code
    for number, line in enumerate(body.splitlines(keepends=True), 1):
        if line.startswith("local "):
            parts.append([*above, line])
            above = []
        elif not line.strip() or line.startswith("--"):
            above.append(line)
        elif parts:
            parts[-1] += [*above, line]
            above = []
        else:
            raise ScriptIncludeError(f"{file}: body line {number} is code outside a local")
    if parts:
        parts[-1] += above
    return [_declaration(part) for part in parts]


def _declaration(lines: list[str]) -> Declaration:
    text = "".join(lines)
    first = next(line for line in lines if line.startswith("local "))
    return Declaration(_declared(first), code_names(text), text)


def _declared(first_line: str) -> frozenset[str]:
    """The names ``local function f`` or ``local a, b = ...`` declares."""
    function = _FUNCTION.match(first_line)
    if function:
        return frozenset({function.group(1)})
    names = first_line[len("local ") :].split("=", maxsplit=1)[0].split("--", maxsplit=1)[0]
    return frozenset(name.strip() for name in names.split(",") if name.strip())


def includes_named(file: str, text: str) -> tuple[str, ...]:
    """The includes `text`'s header names on its one "Includes:" line ("none": none)."""
    end = text.find(_HEADER_END)
    if not text.startswith("--[[ ") or end < 0:
        raise ScriptIncludeError(f"{file}: does not open with a --[[ ... ]] header")
    lines = _INCLUDES_LINE.findall(text[:end])
    if len(lines) != 1:
        raise ScriptIncludeError(
            f"{file}: its header has {len(lines)} 'Includes:' lines, expected one "
            "(its includes, comma-separated, or 'none')"
        )
    named = tuple(part.strip() for part in lines[0].split(","))
    return () if named == ("none",) else named


@dataclass(frozen=True, slots=True)
class Include:
    """One file of lua/includes/: the includes it names, and its declarations."""

    name: str
    needs: tuple[str, ...]
    parts: tuple[Declaration, ...]

    @property
    def file(self) -> str:
        return f"includes/{self.name}.lua"

    @property
    def names(self) -> frozenset[str]:
        """The names it declares at top level: what a file that names it may use."""
        return frozenset(name for part in self.parts for name in part.names)


class Library:
    """The includes, read once; `compose` builds a script's source from them."""

    def __init__(self, texts: dict[str, str]) -> None:
        """`texts`: include name -> its file's text.

        Raises:
            ScriptIncludeError: an include is malformed, names an unknown include or a
                cycle, or uses a name of an include it does not name.
        """
        self.includes: dict[str, Include] = {}
        for name, text in texts.items():
            file = f"includes/{name}.lua"
            if not text.startswith(f"--[[ {file} — "):
                raise ScriptIncludeError(f"{file}: does not open with '--[[ {file} — '")
            body = text[text.index(_HEADER_END) + len(_HEADER_END) :]
            parts = tuple(declarations(file, body))
            self.includes[name] = Include(name, includes_named(file, text), parts)
        self._owner = {n: inc.name for inc in self.includes.values() for n in inc.names}
        for name, text in texts.items():
            include = self.includes[name]
            self.resolve(include.file, include.needs, seen=(name,))
            self._check_uses(include.file, text, include.needs)

    @classmethod
    def read(cls) -> Library:
        """The package's lua/includes/*.lua."""
        folder = resources.files("wheelq.store") / "lua" / "includes"
        return cls(
            {
                entry.name[: -len(".lua")]: entry.read_text("utf-8")
                for entry in folder.iterdir()
                if entry.name.endswith(".lua")
            }
        )

    def resolve(
        self, file: str, needs: tuple[str, ...], seen: tuple[str, ...] = ()
    ) -> tuple[str, ...]:
        """The includes `needs` names and those they name in turn, each once, every include
        after those it names (`file` names `needs`; `seen`: the includes on the way)."""
        order: list[str] = []

        def visit(name: str, chain: tuple[str, ...], by: str) -> None:
            if name in chain:
                cycle = " -> ".join(
                    f"includes/{n}.lua" for n in (*chain[chain.index(name) :], name)
                )
                raise ScriptIncludeError(f"{file}: its includes form a cycle: {cycle}")
            if name not in self.includes:
                known = ", ".join(sorted(self.includes))
                raise ScriptIncludeError(f"{by}: includes {name!r}, which is none of: {known}")
            if name in order:
                return
            for need in self.includes[name].needs:
                visit(need, (*chain, name), self.includes[name].file)
            order.append(name)

        for name in needs:
            visit(name, seen, file)
        return tuple(order)

    def compose(self, file: str, text: str) -> str:
        """Script `text` (of `file`) after the declarations of its includes it reaches.

        Raises:
            ScriptIncludeError: it names an unknown include or a cycle, or uses a name of an
                include it does not name.
        """
        needs = includes_named(file, text)
        order = self.resolve(file, needs)
        self._check_uses(file, text, needs)
        parts = [part for name in order for part in self.includes[name].parts]
        wanted = set(code_names(text))
        kept: set[int] = set()
        grew = True
        while grew:
            grew = False
            for i, part in enumerate(parts):
                if i not in kept and part.names & wanted:
                    kept.add(i)
                    wanted |= part.uses
                    grew = True
        prelude = "".join(part.text for i, part in enumerate(parts) if i in kept)
        return prelude + "\n" + text if prelude else text

    def _check_uses(self, file: str, text: str, needs: tuple[str, ...]) -> None:
        """Refuse a library name `text` uses that neither it nor an include of `needs`
        declares."""
        own = local_names(text)
        given = set().union(*(self.includes[name].names for name in needs))
        missing = sorted(
            name
            for name in code_names(text) - own - given
            if name in self._owner or _LIBRARY_NAME.fullmatch(name)
        )
        if missing:
            where = ", ".join(
                f"{name} ({self._owner.get(name, 'no include declares it')})" for name in missing
            )
            raise ScriptIncludeError(
                f"{file}: uses {where} without naming the include on its 'Includes:' line"
            )


@functools.cache
def library() -> Library:
    """The package's includes, read on first use."""
    return Library.read()


def compose(file: str, text: str) -> str:
    """Script `text` (named `file` in errors) with what it uses of the package's includes."""
    return library().compose(file, text)


_LOADED = load_all()
"""Read once, as the process starts: a process never reads a script from disk again, so
replacing the installed package under a running one (an upgrade in place) cannot fail a call
(docs/architecture.md, "Service lifecycle")."""
