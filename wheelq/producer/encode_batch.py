"""What validating one enqueue call's items shares: the time, the ids seen, msgpack packers,
the random parts of generated ids, and the call's traceparent.

Reused objects are several times cheaper than new ones per job (a msgpack ``Packer`` per
value, or an ``os.urandom`` call per id, cost more than the rest of a job's validation).
Packers are kept per thread, so clients stay thread-safe.
"""

from __future__ import annotations

import threading

import msgpack

from wheelq.core.due import At, Delay, DueSpec, due_spec
from wheelq.core.job import RANDOM_CHARS, payload_packer, random_parts, time_part


class EncodeBatch:
    """What validating one call's items shares: the time, the ids seen, msgpack packers and
    the random parts of ids, drawn in growing blocks (reused objects are several times
    faster than new ones per job). Packers are per thread, so clients stay thread-safe."""

    MAX_BLOCK_IDS = 1024

    def __init__(self, now_ms: int, traceparent: str | None = None) -> None:
        self.now_ms = now_ms
        self.traceparent = traceparent
        """What a job without a traceparent of its own carries (the call's send span)."""
        self.seen: set[str] = set()  # the callers' own ids (a generated one repeats none)
        self.payloads, self.envelopes = _packers()
        self._time_part = time_part(now_ms)
        self._random = ""
        self._at = 0
        self._block_ids = 1  # one id's worth for a single enqueue; doubles per refill
        self._dues: dict[tuple[type, object, type, object], DueSpec] = {}
        self.callbacks = False
        """Whether some job of the call carries a callback (`validate_item` sets it)."""

    def due(self, delay: Delay | None, at: At | None) -> DueSpec:
        """`due_spec(delay, at)` at `now_ms`, worked out once per distinct value in the batch
        (the items of an `enqueue_many` mostly share one). Keyed by type too: ``True == 1``,
        and only the int is a valid delay."""
        key = (type(delay), delay, type(at), at)
        try:
            return self._dues[key]
        except KeyError:
            due = self._dues[key] = due_spec(delay, at, now_ms=self.now_ms)
            return due
        except TypeError:  # unhashable: not a valid delay or time; due_spec says why
            return due_spec(delay, at, now_ms=self.now_ms)

    def new_id(self) -> str:
        """A fresh job id made at `now_ms` (`wheelq.core.job`)."""
        at = self._at
        if at >= len(self._random):
            self._random, at = random_parts(self._block_ids), 0
            self._block_ids = min(self._block_ids * 2, self.MAX_BLOCK_IDS)
        self._at = at + RANDOM_CHARS
        return self._time_part + self._random[at : at + RANDOM_CHARS]


_local = threading.local()


def _packers() -> tuple[msgpack.Packer, msgpack.Packer]:
    """This thread's (payload, envelope) packers."""
    pair: tuple[msgpack.Packer, msgpack.Packer] | None = getattr(_local, "packers", None)
    if pair is None:
        pair = (payload_packer(), msgpack.Packer(use_bin_type=False))
        _local.packers = pair
    return pair
