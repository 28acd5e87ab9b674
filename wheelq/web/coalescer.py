"""The `Coalescer`: single HTTP enqueues of one event-loop turn sent as one `enqueue_many`
per topic, each request still answered on its own (docs/architecture.md, "Fast paths")."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence

from wheelq.errors import DuplicateJobError, InvalidArgumentError, PayloadTypeError, TopicFullError
from wheelq.producer.items import EnqueueItem
from wheelq.runtime.batch import TurnBatch
from wheelq.web.problems import ITEM

MAX_BATCH = 500

EnqueueMany = Callable[[str, Sequence[EnqueueItem]], Awaitable[list[str]]]
Waiting = tuple[EnqueueItem, "asyncio.Future[str]"]
"""A job and the future its request awaits."""


class Coalescer(TurnBatch[EnqueueItem, str]):
    """Single enqueues of one loop turn as one `enqueue_many` per topic: requests that arrive
    together share a round trip and the client's per-call work, and no timer holds a lone
    one. Each still gets its own answer: a job the client refuses fails alone and the rest
    are sent again; an id already pending fails alone; two requests for one id go in separate
    batches, so the second meets the first as a duplicate. Any other error fails the batch.

    Args:
        enqueue_many: ``AsyncClient.enqueue_many`` (or a fake in unit tests).
    """

    def __init__(self, enqueue_many: EnqueueMany) -> None:
        super().__init__(self._send, _batches)
        self._enqueue_many = enqueue_many

    async def enqueue(self, topic: str, item: EnqueueItem) -> str:
        """`item`'s id, or what `enqueue` would have raised for this job alone."""
        job_id: str = await self.submit(item, topic)
        return job_id

    async def _send(self, topic: Hashable, batch: list[Waiting]) -> None:
        assert isinstance(topic, str)
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
    found = ITEM.match(str(exc))
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
