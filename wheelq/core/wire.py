"""What wheelq writes into Redis streams and notes, named once for Python readers.

The scripts write these formats, each in one Lua helper of
``wheelq/store/lua/_lib.lua``; the names below are the Python side, which
every reader uses (`wheelq.core.job.Job.from_entry`,
`wheelq.core.dead.DeadLetter.from_entry`, `wheelq.testing.fired.Fired`), and a
real-server test compares them with what the scripts write. The job
envelope (the value in ``{T:s}:jobs``) is `wheelq.core.job.Envelope`.

Ready-stream entry (``{T:s}:ready``, written by ``wq_fire`` for emit,
enqueue, reschedule and replay alike), flat string fields any language can
read::

    id           job id
    topic        topic name
    due          due time, integer ms on the Redis clock
    attempt      1 on the first run
    max_attempts attempts allowed before the job is dead-lettered
    payload      msgpack bytes of the payload
    enqueued     when the envelope of this attempt was written (enqueue, or the retry that
                 made it), integer ms on the writer's clock; 0 when not known (a replay of
                 a dead letter from before the field)
    group        only on retries and replays: the one consumer group meant to run it
    trace        only for jobs enqueued with a trace context: their W3C traceparent
                 (``00-<trace id>-<span id>-<flags>``, `wheelq.core.trace`); retries
                 and replays keep it
    callback     only for jobs enqueued with a callback: msgpack map {url, headers,
                 timeout_ms} (`wheelq.core.callback.Callback`); retries and replays keep it
    key          only for jobs enqueued with a key: the key (flow control's per-key limits)
    ordered      "1" only for jobs enqueued with ordered=True: their key's jobs run one at
                 a time, in due order

Readers must ignore fields they do not know: more may be added.

Dead letter (``{T:s}:dead``, written by ``wq_dead``): the ready-stream entry's
fields as they were (even undecodable ones), followed by::

    reason   failed | deliveries | malformed   (see `wheelq.core.retry.Reason`)
    error    the exception in one line, then its traceback (`wheelq.core.retry.describe`),
             or why the entry could not be run
    group    the consumer group it failed in (a replay runs only there)
    entry    the ready-stream entry id it came from

A pending job whose envelope cannot be decoded is dead-lettered as it comes
due (``wq_bury``) with ``id``, ``topic``, ``due``, ``reason`` (malformed),
``error`` and the raw bytes in ``envelope``: no ``payload``, so it cannot be
replayed.

Inbox and wake note (``{T:s}:inbox`` list items, ``{T:s}:wake`` messages,
written by ``wq_note``): ``"<due ms>:<job id>"``, read by `parse_note`. A wake message
holds one note, or the notes of one enqueue call a line each (a job id never holds a
line break), read by `parse_notes`.
"""

from __future__ import annotations

ID = b"id"
TOPIC = b"topic"
DUE = b"due"
ATTEMPT = b"attempt"
MAX_ATTEMPTS = b"max_attempts"
PAYLOAD = b"payload"
ENQUEUED = b"enqueued"
GROUP = b"group"
TRACE = b"trace"
CALLBACK = b"callback"
KEY = b"key"
ORDERED = b"ordered"

READY_FIELDS = (ID, TOPIC, DUE, ATTEMPT, MAX_ATTEMPTS, PAYLOAD, ENQUEUED)
"""The fields of every ready-stream entry, in the order written; `GROUP` follows on retries
and replays, then `TRACE` on jobs enqueued with a trace context, then `CALLBACK` on jobs
enqueued with a callback, then `KEY` and `ORDERED` on jobs enqueued with a key."""

REASON = b"reason"
ERROR = b"error"
ENTRY = b"entry"
ENVELOPE = b"envelope"

DEAD_FIELDS = (REASON, ERROR, GROUP, ENTRY)
"""The annotations a dead letter adds after the ready-stream entry's fields, in order."""


def parse_notes(message: bytes) -> list[tuple[str, int]]:
    """A wake message's notes (a line each), in order; lines that are not notes left out."""
    return [note for line in message.split(b"\n") if (note := parse_note(line)) is not None]


def parse_note(note: bytes) -> tuple[str, int] | None:
    """``b"<due ms>:<job id>"`` as ``(job id, due ms)``; None when it is not a note."""
    try:
        due, _, job_id = note.decode().partition(":")
    except UnicodeDecodeError:
        return None
    if not (due.isascii() and due.isdigit()) or not job_id:
        return None
    return job_id, int(due)
