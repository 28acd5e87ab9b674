"""Where an enqueue goes when the client has a spool: to Redis, or to the spool.

`Producer._write` hands its validated writes to `Spooler.write`, which sends them as usual
unless the spool still holds jobs (then they join the queue behind them, so the spool's
order is the order Redis sees), and spools them when Redis cannot take them: the breaker is
open, or a round trip failed with `RedisUnavailableError` (unreachable, a dropped
connection, READONLY, OOM, CLUSTERDOWN, MASTERDOWN, LOADING, TRYAGAIN; the breaker in
`guarded` turns those into it). The call then returns the ids as if Redis had taken them.

Jobs of a batch confirmed before a later round trip of the same call failed are not
spooled again. Jobs of the round trip that failed after it was sent may have been applied:
they are spooled all the same, with the tokens `Producer._write` gave them (``CALL:n``, of
a call whose token the shard records if it applies it), so their replay skips what the
call wrote, even a job that fired in between, for ``spool_call_record_ms`` after the call.
Replays from the spool are exactly once (the record of ``enqueue.lua``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from wheelq.core.clock import Clock
from wheelq.errors import RedisUnavailableError
from wheelq.producer.spool import Spool
from wheelq.store.job_writes import JobWrite

if TYPE_CHECKING:
    from wheelq.producer.operations import Op

log = logging.getLogger("wheelq.producer.spool")

Place = Callable[[str, list[JobWrite], list[str]], "Op[list[str]]"]
"""`Producer._write` sending straight to Redis, appending the ids it confirmed to a list."""


class Spooler:
    """Routes a client's enqueues between Redis and its spool.

    Args:
        spool: The open spool.
        clock: The producer's wall clock (when rows were spooled, for the spool's age).
        wake: Called after jobs were spooled (wakes the drain).
    """

    def __init__(self, spool: Spool, clock: Clock, wake: Callable[[], None]) -> None:
        self.spool = spool
        self._clock = clock
        self._wake = wake

    def write(self, topic: str, writes: list[JobWrite], place: Place) -> Op[list[str]]:
        """Send `writes` with `place`, or spool them; returns their ids."""
        ids = [w.id for w in writes]
        if self.spool.depth:
            self._spool(topic, writes, None)
            return ids
        confirmed: list[str] = []
        try:
            return (yield from place(topic, writes, confirmed))
        except RedisUnavailableError as exc:
            done = set(confirmed)
            self._spool(topic, [w for w in writes if w.id not in done], exc)
            return ids

    def _spool(
        self, topic: str, writes: Sequence[JobWrite], why: RedisUnavailableError | None
    ) -> None:
        was_empty = not self.spool.depth
        self.spool.append(topic, writes, self._clock.now_ms())
        if was_empty and why is not None:
            log.warning("%s; spooling enqueues to %s until it is back", why, self.spool.path)
        self._wake()
