"""Named crash points: places in the emit and ack paths where a test or the chaos soak can
make the process die as a crash would, at the worst moment.

Library code calls `point(name)` at each place; it does nothing unless that point was
armed, and costs one dict lookup on an empty dict when none is (about 30 ns). Nothing in
wheelq arms a point or reads the environment for one: the process of a test or of the
soak does, with `arm` or `arm_from_spec` (which its own entry point reads from an
environment variable, ``WHEELQ_CRASH_AT=point:hits,...`` in wheelq's test processes).
On the `hits`-th pass the process sends itself SIGKILL: no ``finally`` block, no atexit
hook, no flush runs, exactly as after kill -9.

The points (`POINTS`):

- ``emit.before_send``: a scheduler node built its emit calls and has not sent them: the
  jobs are still in the sorted set, the next leader fires them.
- ``emit.after_reply``: the emit calls ran and their replies arrived, the node has not
  recorded it: the jobs are in the stream; nobody must fire them again.
- ``sweep.after_reply``: the same for the preloader's sweep of overdue jobs.
- ``handler.after``: a worker's handler returned, its outcome is not queued yet: the job
  runs again elsewhere (at least once).
- ``ack.before_send``: a worker queued settlements (acks, retries, dead letters) and has
  not sent them: the entries stay pending and are claimed by another worker.
- ``ack.after_reply``: the settlements were applied and answered, the worker has not
  recorded it: they must not take effect twice.
"""

from __future__ import annotations

import os
import signal

from wheelq.errors import InvalidArgumentError

POINTS = (
    "emit.before_send",
    "emit.after_reply",
    "sweep.after_reply",
    "handler.after",
    "ack.before_send",
    "ack.after_reply",
)

_armed: dict[str, int] = {}
"""Point -> passes left before the kill (the empty dict is the fast path)."""


def arm(name: str, hits: int = 1) -> None:
    """Kill this process with SIGKILL the `hits`-th time it passes `name`.

    Raises:
        InvalidArgumentError: `name` is not one of `POINTS`, or `hits` < 1.
    """
    if name not in POINTS:
        raise InvalidArgumentError(
            "point", f"point must be one of {', '.join(POINTS)}, got {name!r}"
        )
    if not isinstance(hits, int) or isinstance(hits, bool) or hits < 1:
        raise InvalidArgumentError("hits", f"hits must be an int >= 1, got {hits!r}")
    _armed[name] = hits


def arm_from_spec(spec: str) -> None:
    """Arm every ``point:hits`` of a comma-separated `spec` (``hits`` defaults to 1).

    Raises:
        InvalidArgumentError: A malformed item, an unknown point or a bad count; nothing
            is armed then.
    """
    wanted: list[tuple[str, int]] = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, count = item.partition(":")
        try:
            hits = int(count) if count else 1
        except ValueError:
            raise InvalidArgumentError(
                "hits", f"crash point spec items are point[:hits], got {item!r}"
            ) from None
        wanted.append((name, hits))
    saved = dict(_armed)
    try:
        for name, hits in wanted:
            arm(name, hits)
    except InvalidArgumentError:
        _armed.clear()
        _armed.update(saved)
        raise


def disarm_all() -> None:
    _armed.clear()


def point(name: str) -> None:
    """A crash point: kills the process here if `name` is armed and its count ran out."""
    if _armed and name in _armed:
        _armed[name] -= 1
        if _armed[name] <= 0:
            os.kill(os.getpid(), signal.SIGKILL)
