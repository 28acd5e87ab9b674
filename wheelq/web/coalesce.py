"""Single enqueues that arrive together go to Redis together.

Each ``POST /v1/topics/{topic}/jobs`` is one job, but under load many arrive in the same
turn of the event loop. Sent one by one, each pays a round trip and the client's per-call
work (most of a request's cost after HTTP itself); sent as one `enqueue_many` per topic at
the end of the turn, they share it. A request waits for no timer: its job leaves with
whatever else came in the same turn, so a lone request is as fast as before.

Each request still gets its own answer: its id, or its own error. A job the client refuses
(a bad value in it) fails alone and the rest are sent again without it; an id already
pending fails alone (`DuplicateJobError` for that id); two requests for one id in the same
turn go in separate batches, so the second meets the first as a duplicate, as it would
have one at a time. Any other error (Redis unavailable) fails every job of the batch.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence

from wheelq.errors import (
    DuplicateJobError,
    InvalidArgumentError,
    PayloadTypeError,
    TopicFullError,
)
from wheelq.producer.items import EnqueueItem

MAX_BATCH = 500
_ITEM = re.compile(r"items\[(\d+)\]: ")

EnqueueMany = Callable[[str, Sequence[EnqueueItem]], Awaitable[list[str]]]
Waiting = tuple[EnqueueItem, "asyncio.Future[str]"]


class Coalescer:
    """Gathers the enqueues of one event-loop turn into one `enqueue_many` per topic.

    Args:
        enqueue_many: ``AsyncClient.enqueue_many`` (or a fake in unit tests).
    """

    def __init__(self, enqueue_many: EnqueueMany) -> None:
        self._enqueue_many = enqueue_many
        self._waiting: dict[str, list[Waiting]] = {}
        self._flushing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches = 0
        self.jobs = 0

    async def enqueue(self, topic: str, item: EnqueueItem) -> str:
        """Enqueue `item` with whatever else comes in this turn; returns its id.

        Raises:
            What `enqueue` would have raised for this job alone.
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()
        self._waiting.setdefault(topic, []).append((item, done))
        if not self._flushing:
            self._flushing = True
            loop.call_soon(self._flush)
        return await done

    def _flush(self) -> None:
        self._flushing = False
        waiting, self._waiting = self._waiting, {}
        for topic, jobs in waiting.items():
            for batch in _batches(jobs):
                task = asyncio.create_task(self._send(topic, batch))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _send(self, topic: str, batch: list[Waiting]) -> None:
        self.batches += 1
        self.jobs += len(batch)
        while batch:
            batch = [(item, done) for item, done in batch if not done.done()]  # cancelled
            if not batch:
                return
            try:
                ids = await self._enqueue_many(topic, [item for item, _ in batch])
            except (InvalidArgumentError, PayloadTypeError) as exc:
                batch = _fail_one(batch, exc)
                continue
            except DuplicateJobError as exc:
                _answer_duplicates(topic, batch, exc)
                return
            except TopicFullError as exc:
                _answer_full(topic, batch, exc)
                return
            except BaseException as exc:
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                return
            for (_, done), job_id in zip(batch, ids, strict=True):
                if not done.done():
                    done.set_result(job_id)
            return


def _batches(jobs: list[Waiting]) -> list[list[Waiting]]:
    """At most `MAX_BATCH` a batch, and no explicit id twice in one."""
    out: list[list[Waiting]] = []
    ids: list[set[str]] = []
    for job in jobs:
        job_id = job[0].job_id
        for batch, seen in zip(out, ids, strict=True):
            if len(batch) < MAX_BATCH and (job_id is None or job_id not in seen):
                break
        else:
            batch, seen = [], set()
            out.append(batch)
            ids.append(seen)
        batch.append(job)
        if job_id is not None:
            seen.add(job_id)
    return out


def _fail_one(batch: list[Waiting], exc: InvalidArgumentError | PayloadTypeError) -> list[Waiting]:
    """Fail the job the error names (``items[i]: ...``) with its own error; returns the rest
    (all of them failed, and none left, when it names none)."""
    found = _ITEM.match(str(exc))
    if found is None or int(found[1]) >= len(batch):
        for _, done in batch:
            done.set_exception(exc)
        return []
    index = int(found[1])
    detail = str(exc)[found.end() :]
    own = (
        InvalidArgumentError(exc.parameter, detail)
        if isinstance(exc, InvalidArgumentError)
        else PayloadTypeError(detail)
    )
    batch[index][1].set_exception(own)
    return batch[:index] + batch[index + 1 :]


def _answer_full(topic: str, batch: list[Waiting], exc: TopicFullError) -> None:
    """Each request its own answer: its id, or `TopicFullError` if its shard was full."""
    refused = set(exc.job_ids)
    for (_, done), job_id in zip(batch, exc.ids, strict=True):
        if job_id in refused:
            done.set_exception(TopicFullError(topic, [job_id]))
        else:
            done.set_result(job_id)


def _answer_duplicates(topic: str, batch: list[Waiting], exc: DuplicateJobError) -> None:
    duplicates = set(exc.job_ids)
    enqueued = iter(exc.enqueued)
    for item, done in batch:
        if item.job_id is not None and item.job_id in duplicates:
            done.set_exception(DuplicateJobError(topic, [item.job_id]))
        else:
            done.set_result(next(enqueued))
