"""Jobs that follow jobs: what a waiting job waits on, the policies, and the shapes the
scripts pass between the shards (docs/architecture.md, "Jobs that follow jobs").

A job enqueued with ``after=`` is written *waiting*: pending under its id at `WAIT_DUE_MS`
(no leader ever reads it into its window) with a record of what it waits on. Each job it
waits on carries an edge to it on that job's own shard; when that job ends there (succeeded,
dead-lettered, cancelled, expired), the script that ends it turns the edge into a notice on
the same shard, and the shard's leader moves the notice to the waiting job's shard
(``resolve.lua``), where it is heard once: the job becomes due `delay` later, or is cancelled.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple, TypeVar

import msgpack

from wheelq.core import keys as k
from wheelq.core.keys import ShardKeys
from wheelq.errors import InvalidArgumentError

WAIT_DUE_MS = 253_402_300_799_999
"""The due time a waiting job is stored at: the last ms of year 9999, past any job's due time
(``resolve.lua``'s ``WQ_WAIT_DUE``)."""
EARLY_MS = 600_000
"""How long an outcome heard before its waiting job was written is kept for it
(``resolve.lua``'s ``WQ_EARLY_MS``)."""
CHILDREN_KEEP_MS = 3 * 86_400_000
"""How long a join's children list is kept once its parent no longer waits (``resolve.lua``'s
``WQ_CHILDREN_KEEP_MS``): what `Client.children` reads."""
WRITE_WINDOW_MS = 60_000
"""A waiting job's write is refused this long after its edges were written (a producer that
froze between the two writes): well inside `EARLY_MS`, so no early outcome is lost."""
NUDGE = b"!"
"""The inbox and wake note that says notices wait on the shard (``includes/follow.lua``)."""
SEPARATOR = "\x1f"
"""Between the parts of a reference (in no topic, id or group)."""
DEFAULT_GROUP = "default"


class OnFailure(StrEnum):
    """What a continuation does when the job it follows ends other than succeeded
    (``on_parent_failure``)."""

    CANCEL = "cancel"
    """It is cancelled, never run (its own followers hear it was cancelled)."""
    RUN = "run"
    """It runs anyway, as if that job had succeeded."""


class OnChildFailure(StrEnum):
    """What a join's parent does when one of its children ends other than succeeded
    (``on_child_failure``)."""

    FAIL = "fail"
    """It is dead-lettered with that child's error, never run, and the children still
    pending are cancelled."""
    IGNORE = "ignore"
    """It runs once every child has ended, with what succeeded."""


_POLICY_CODES = {
    OnFailure.CANCEL: "c",
    OnFailure.RUN: "r",
    OnChildFailure.FAIL: "f",
    OnChildFailure.IGNORE: "i",
}
Policy = OnFailure | OnChildFailure

P = TypeVar("P", OnFailure, OnChildFailure)


def policy_of(kind: type[P], value: object, name: str) -> P:
    """`value` as a policy of `kind`, else InvalidArgumentError naming `name`."""
    for policy in kind:
        if value == policy.value:
            return policy
    accepted = ", ".join(repr(p.value) for p in kind)
    raise InvalidArgumentError(name, f"{name} must be one of {accepted}, got {value!r:.60}")


def on_failure(value: object, name: str = "on_parent_failure") -> OnFailure:
    """`value` as an `OnFailure`, else InvalidArgumentError naming `name`."""
    return policy_of(OnFailure, value, name)


@dataclass(frozen=True, slots=True)
class JobRef:
    """A job waited on: its topic, its id and the consumer group whose outcome counts."""

    topic: str
    job_id: str
    group: str = DEFAULT_GROUP

    def __post_init__(self) -> None:
        k.validate_topic(self.topic)
        k.validate_job_id(self.job_id)
        k.validate_group(self.group)


def wire_ref(keys: ShardKeys, job_id: str, group: str) -> str:
    """A job waited on as the scripts spell it: ``topic<US>shard<US>id<US>group``."""
    return f"{keys.topic}{SEPARATOR}{keys.shard}{SEPARATOR}{job_id}{SEPARATOR}{group}"


def parse_wire_ref(ref: str) -> tuple[ShardKeys, str] | None:
    """The shard and the job id of a wire reference; None when it is not one."""
    parts = _wire_parts(ref)
    return None if parts is None else (ShardKeys(parts[0], parts[1]), parts[2])


def _wire_parts(ref: str) -> tuple[str, int, str, str] | None:
    """A wire reference's topic, shard, job id and group ("" when it has none)."""
    topic, _, rest = ref.partition(SEPARATOR)
    shard, _, rest = rest.partition(SEPARATOR)
    job_id, _, group = rest.partition(SEPARATOR)
    if not (topic and shard.isdigit() and job_id):
        return None
    return topic, int(shard), job_id, group


def job_ref(after: object, topic: str, name: str = "after") -> JobRef:
    """What ``after=`` names: a job id on `topic` (its ``default`` group), a `JobRef`, or a
    ``(topic, job_id)`` or ``(topic, job_id, group)`` tuple; else InvalidArgumentError."""
    if isinstance(after, JobRef):
        return after
    if isinstance(after, str):
        try:
            return JobRef(topic, after)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(name, f"{name}: {exc}") from None
    if isinstance(after, tuple) and len(after) in (2, 3) and all(isinstance(p, str) for p in after):
        try:
            return JobRef(*after)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(name, f"{name}: {exc}") from None
    raise InvalidArgumentError(
        name,
        f"{name} must be a job id, a JobRef or a (topic, job_id[, group]) tuple, got {after!r:.80}",
    )


JOIN_TOKEN = "j"  # noqa: S105 (a prefix, no secret)
"""A join's token begins so (`new_token`): an edge says whether the job waiting on it is a
join's parent or a continuation (`Relations`)."""


def new_token(join: bool) -> str:
    """A waiting write's token: 16 random hex digits, `JOIN_TOKEN` before them for a join."""
    return (JOIN_TOKEN if join else "") + secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class Relations:
    """The jobs a job is tied to while they wait (`JobInfo`'s `parent`, `continuations`,
    `after` and `children`)."""

    parent: JobRef | None = None
    continuations: tuple[JobRef, ...] = ()
    after: JobRef | None = None
    children: int = 0


NO_RELATIONS = Relations()


def relations(edges: bytes | None, record: bytes | None, children: int) -> Relations:
    """What a job's edges (``{T:s}:followers``), its waiting record (``{T:s}:waiting``) and
    its children list's length say it is tied to; what cannot be decoded says nothing."""
    parent, continuations, after = None, [], None
    try:
        for e in msgpack.unpackb(edges, raw=False) if edges else ():
            ref = JobRef(str(e[1]), str(e[3]))
            if str(e[4]).startswith(JOIN_TOKEN):
                parent = ref
            else:
                continuations.append(ref)
        if record and not children:
            _, _, _, waits = msgpack.unpackb(record, raw=False)
            if isinstance(waits, list) and len(waits) == 1:
                after = _ref_of(str(waits[0]))
    except (TypeError, ValueError, IndexError, InvalidArgumentError, msgpack.UnpackException):
        pass  # written by nobody this way: nothing to show
    if parent is None and not continuations and after is None and not children:
        return NO_RELATIONS
    return Relations(parent, tuple(continuations), after, children)


def _ref_of(wire: str) -> JobRef | None:
    parts = _wire_parts(wire)
    return None if parts is None else JobRef(parts[0], parts[2], parts[3] or DEFAULT_GROUP)


INLINE_REFS = 8
"""A waiting job's record holds this many references at most (a continuation's); a join's
are a set of their own, the record their count (``resolve.lua``'s header)."""


def waiting_record(token: str, delay_ms: int, policy: Policy, refs: Sequence[str]) -> bytes:
    """A waiting job's record (``resolve.lua``'s header); a join's refs go beside it."""
    waits: list[str] | int = list(refs) if len(refs) <= INLINE_REFS else len(refs)
    return bytes(msgpack.packb([token, delay_ms, _POLICY_CODES[policy], waits]))


MAX_CHILDREN = 10_000
"""Children one `enqueue_flow` takes at most."""


@dataclass(frozen=True, slots=True)
class Joined:
    """What `enqueue_flow` wrote: the parent (its id is the flow's) and its children."""

    id: str
    """The parent's id: the flow's."""
    parent: JobRef
    children: list[JobRef]


class Notice(NamedTuple):
    """An outcome on its way to a waiting job (a ``{T:s}:notices`` entry; a tuple: the
    resolver makes one a notice, thousands a round)."""

    entry: str
    """The notice's stream entry id (deleted once heard)."""
    topic: str
    shard: int
    job_id: str
    token: str
    ref: str
    outcome: str
    error: str


def parse_notices(reply: Any, of: ShardKeys) -> list[Notice]:
    """XRANGE of shard `of`'s ``{T:s}:notices`` as notices; an entry that is not one is a
    notice of shard -1 (deleted with the rest: nothing could hear it)."""
    out = []
    head = f"{of.topic}{SEPARATOR}{of.shard}{SEPARATOR}"  # what every reference here begins with
    unpack = msgpack.unpackb
    for entry, fields in reply or ():
        try:
            topic, shard, job_id, token, ended, group, outcome, error = unpack(
                fields[b"n"], raw=False
            )
            ref = head + ended + SEPARATOR + group
            notice = Notice(entry.decode(), topic, int(shard), job_id, token, ref, outcome, error)
            out.append(notice)
        except (TypeError, ValueError, KeyError, AttributeError, msgpack.UnpackException):
            out.append(Notice(_text(entry), "", -1, "", "", "", "", ""))
    return out


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
