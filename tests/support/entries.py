"""Ready-stream entries and dead letters for tests, built from the one definition of an entry,
`wheelq.core.job.READY_ENTRY` (asynq's ``internal/testutil``: one builder per shape).

`ready_fields` writes what ``wq_fire_entry`` writes for a job, field by field from the
definition's rows, so a new field changes the definition and the tests that name it, not
every test that builds an entry. `dead_fields` is a ready entry followed by a dead letter's
annotations, as ``wq_dead`` copies it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import redis

from wheelq.core.job import READY_ENTRY, EntryField, Envelope, Field
from wheelq.core.options import KINDS

ENQUEUED_MS = 1_700_000_000_000
"""The envelopes' `enqueued_ms` unless a test gives one (and the default due time)."""
TOPIC = "t"

ENVELOPE = Envelope(b"p", attempt=1, max_attempts=5, enqueued_ms=ENQUEUED_MS)
"""What `ready_fields` fires unless told otherwise."""


def _spelled(f: EntryField, value: Any) -> bytes:
    """`value` as an entry spells a field of `f.kind`."""
    if f.kind == "flag":
        return b"1"
    if isinstance(value, bytes):
        return value
    if f.kind in ("int", "time", "priority"):
        return str(int(value)).encode()
    return str(value).encode()


def ready_fields(
    job_id: str = "j1",
    *,
    topic: str = TOPIC,
    due_ms: int | str = ENQUEUED_MS,
    envelope: Envelope | None = None,
    **values: Any,
) -> dict[bytes, bytes]:
    """The entry firing `envelope` writes (fields in the order written): `ENVELOPE` with
    `values` (any of `Envelope`'s fields: ``payload``, ``attempt``, ``group``, ...) unless
    an envelope is given. The id is the envelope's `job_id` when set, else `job_id`."""
    env = envelope or dataclasses.replace(ENVELOPE, **values)
    own = {"id": env.job_id or job_id, "topic": topic, "due": due_ms}
    fields: dict[bytes, bytes] = {}
    for f in READY_ENTRY:
        value = own[f.source] if f.source in own else getattr(env, f.source)
        if f.kind == "priority" and value == KINDS["priority"].unset:
            continue  # written only when not the default (5), which is truthy
        if f.optional and not (value and (f.requires is None or getattr(env, f.requires))):
            continue
        fields[f.name] = _spelled(f, value)
    return fields


def dead_fields(
    job_id: str = "j1",
    *,
    reason: str = "failed",
    error: str = "boom",
    group: str = "g",
    entry: str = "1-0",
    **ready: Any,
) -> dict[bytes, bytes]:
    """A dead letter of the job `ready_fields` builds (its `ready` arguments): the entry's
    fields, then the annotations (`Field.DEAD`), as ``wq_dead`` writes them."""
    fields = ready_fields(job_id, **ready)
    fields.pop(Field.GROUP, None)  # a dict holds a name once: the group the job died in
    return fields | dead_annotations(reason, error, entry, group)


def dead_annotations(reason: str, error: str, entry: str, group: str = "g") -> dict[bytes, bytes]:
    """What a dead letter adds after the entry's fields (`Field.DEAD`), in order."""
    values = (reason, error, group, entry)
    return {name: value.encode() for name, value in zip(Field.DEAD, values, strict=True)}


def add_ready(r: redis.Redis, key: str, fields: dict[bytes, bytes], entry_id: str = "*") -> str:
    """XADD `fields` to stream `key` (a ready, callbacks or dead-letter stream); its id."""
    added = r.xadd(key, dict[Any, Any](fields), id=entry_id)
    return added.decode() if isinstance(added, bytes) else added
