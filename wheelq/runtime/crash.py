"""Crash points a test arms (docs/architecture.md, "Unknown outcomes")."""

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
    "relay.after_place",
    "promote.after_reply",
    "resolve.after_hear",
)

_armed: dict[str, int] = {}  # Point -> passes left (empty: the fast path).


def arm(name: str, hits: int = 1) -> None:
    """Kill this process with SIGKILL the `hits`-th time it passes `name` (one of `POINTS`)."""
    if name not in POINTS:
        raise InvalidArgumentError(
            "point", f"point must be one of {', '.join(POINTS)}, got {name!r}"
        )
    if not isinstance(hits, int) or isinstance(hits, bool) or hits < 1:
        raise InvalidArgumentError("hits", f"hits must be an int >= 1, got {hits!r}")
    _armed[name] = hits


def arm_from_spec(spec: str) -> None:
    """Arm every ``point:hits`` of comma-separated `spec`; nothing is armed if one is bad."""
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
