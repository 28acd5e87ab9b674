"""Handlers for ``wheelq worker`` in the matrix's rows (tests/integration/matrix/): each
appends ``{"topic": ..., "job": ...}`` to the file named by ``MATRIX_STARTS`` as it starts,
then works `RUN_S` (``record``: a ``def``; ``record_async``: a coroutine)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

from wheelq import Job

RUN_S = 0.005
_WRITING = threading.Lock()  # def handlers run on threads: one line at a time


def _note(job: Job) -> None:
    with _WRITING, open(os.environ["MATRIX_STARTS"], "a") as out:
        out.write(json.dumps({"topic": job.topic, "job": job.id}) + "\n")


def record(job: Job) -> None:
    _note(job)
    time.sleep(RUN_S)


async def record_async(job: Job) -> None:
    _note(job)
    await asyncio.sleep(RUN_S)
