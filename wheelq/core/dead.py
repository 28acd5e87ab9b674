"""Dead letters: what the dead-letter stream ``{T:s}:dead`` holds, and how to read it.

An entry there is the original ready-stream entry's fields (whatever they
were, even undecodable ones) followed by the annotations `wheelq.core.wire`
names (reason, error, group, entry).

Dead letters stay until replayed or purged; they are never trimmed.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wheelq.core import wire
from wheelq.core.job import entry_ms
from wheelq.core.payload import decode_payload
from wheelq.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One entry of a topic's dead-letter streams."""

    ref: str
    """``"shard/entry-id"``: what `replay` and `purge_dead` take."""
    topic: str
    job_id: str | None
    """None when the entry was too malformed to name its job."""
    payload: Any
    """The decoded payload; the raw bytes (or None) when it cannot be decoded."""
    attempt: int | None
    max_attempts: int | None
    reason: str
    error: str
    group: str
    source_entry: str
    dead_ms: int
    """When it was dead-lettered (ms, Redis clock)."""
    fields: dict[str, bytes]
    """Every field as stored, for entries written by someone else."""

    @property
    def shard(self) -> int:
        return parse_ref(self.ref)[0]

    @property
    def entry_id(self) -> str:
        return parse_ref(self.ref)[1]

    @classmethod
    def from_entry(
        cls, topic: str, shard: int, entry_id: str, raw: Mapping[bytes, bytes]
    ) -> DeadLetter:
        fields = {k.decode("utf-8", "replace"): v for k, v in raw.items()}

        def text(name: bytes) -> str | None:
            value = raw.get(name)
            return None if value is None else value.decode("utf-8", "replace")

        def number(name: bytes) -> int | None:
            try:
                return int(raw[name])
            except (KeyError, ValueError):
                return None

        payload: Any = raw.get(wire.PAYLOAD)
        if payload is not None:
            with contextlib.suppress(Exception):  # a foreign payload stays raw bytes
                payload = decode_payload(payload)
        return cls(
            ref=f"{shard}/{entry_id}",
            topic=topic,
            job_id=text(wire.ID),
            payload=payload,
            attempt=number(wire.ATTEMPT),
            max_attempts=number(wire.MAX_ATTEMPTS),
            reason=text(wire.REASON) or "",
            error=text(wire.ERROR) or "",
            group=text(wire.GROUP) or "",
            source_entry=text(wire.ENTRY) or "",
            dead_ms=entry_ms(entry_id),
            fields=fields,
        )


_REF = re.compile(r"(\d{1,4})/(\d{1,20})-(\d{1,20})", re.ASCII)
MAX_ID_PART = 2**64 - 1


def parse_ref(ref: object) -> tuple[int, str]:
    """Split a dead-letter ref ``"shard/ms-seq"``.

    Raises:
        InvalidArgumentError: Not of that form, or an id part beyond 2**64 - 1.
    """
    match = _REF.fullmatch(ref) if isinstance(ref, str) else None
    if match is None or max(int(match[2]), int(match[3])) > MAX_ID_PART:
        raise InvalidArgumentError(
            "refs",
            f"a dead-letter ref must be 'shard/ms-seq' like '2/1700000000123-0', got {ref!r}",
        )
    return int(match[1]), f"{int(match[2])}-{int(match[3])}"
