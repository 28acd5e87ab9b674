"""The join bench's handler (loadtest/follow.py), run by a `wheelq worker` process of its
own: it keeps when the last child's run ended (wall-clock ms) and, when the parent (payload
``"parent"``) starts, appends ``parent_start_ms last_child_end_ms due_ms fired_ms`` (the
parent's due and fire times: Redis clock) to the file named by ``WHEELQ_JOIN_OUT``, one
unbuffered write."""

from __future__ import annotations

import os
import time

from wheelq import Job

_last_end = [0.0]
_out = os.open(os.environ.get("WHEELQ_JOIN_OUT", os.devnull), os.O_WRONLY | os.O_APPEND)


async def handle(job: Job) -> None:
    now = time.time() * 1000
    if job.payload == "parent":
        os.write(_out, f"{now:.3f} {_last_end[0]:.3f} {job.due_ms} {job.fired_ms}\n".encode())
        _last_end[0] = 0.0
    else:
        _last_end[0] = max(_last_end[0], now)
