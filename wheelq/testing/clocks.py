"""A production clock that can be made wrong on purpose: a scheduler host whose clock
jumps, for the fault tests and the chaos soak.

`SkewedClock` is `wheelq.runtime.clock.RedisClock` (the monotonic clock plus an offset
measured against Redis ``TIME``) with `jump_ms` added to every reading, as if the host's
clock had stepped by that much between two measurements. A node on it believes the time
is `jump_ms` later (earlier, when negative) than it is. Its emits cannot make a job early:
the emit script takes the earlier of the node's time and ``TIME`` (README, "Never
early"); a clock behind makes its jobs late by up to the jump.
"""

from __future__ import annotations

from wheelq.runtime.clock import RedisClock


class SkewedClock(RedisClock):
    """`RedisClock` plus `jump_ms` (0 until set; set it from any thread or a signal)."""

    def __init__(self, jump_ms: int = 0) -> None:
        super().__init__()
        self.jump_ms = jump_ms

    def now_ms_float(self) -> float:
        return super().now_ms_float() + self.jump_ms
