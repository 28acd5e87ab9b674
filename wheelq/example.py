"""A handler to try wheelq with before writing your own: ``wheelq worker
wheelq.example:echo --topic example`` logs each job it runs and returns its payload with the
host that ran it. The container image's compose file runs it (docs/operations/deploying.md).
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from wheelq.core.job import Job

log = logging.getLogger(__name__)


async def echo(job: Job) -> dict[str, Any]:
    """Log `job` and return ``{"payload": ..., "host": ...}``: its result, which
    `Client.result` reads back, naming the host (the container) that ran it."""
    log.info("job %s of %s, attempt %d: %r", job.id, job.topic, job.attempt, job.payload)
    return {"payload": job.payload, "host": socket.gethostname()}
