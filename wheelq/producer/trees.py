"""A job's tree (docs/guides/workflows.md): the job, a flow parent's children, and the jobs
that follow any of them, found by their edges and children lists and cancelled together
(`Client.cancel(..., tree=True)`). Read before each cancel: a job's edges become notices as
it is cancelled."""

from __future__ import annotations

from collections import deque

from wheelq.core import keys as k
from wheelq.core.follow import MAX_CHILDREN, parse_wire_ref
from wheelq.errors import InvalidArgumentError, UnknownTopicError
from wheelq.producer.operations import Op, Producer
from wheelq.store import enqueue, follow

BATCH = 500
"""Jobs of a tree read and cancelled a round trip."""
MAX_TREE = 10 * MAX_CHILDREN
"""Jobs one tree cancel reaches at most (a larger tree: InvalidArgumentError, nothing more
cancelled after the rounds done)."""

Node = tuple[k.ShardKeys, str]


def cancel_tree(producer: Producer, topic: str, job_id: str) -> Op[int]:
    """Cancel job `job_id` of `topic`, a flow parent's children (theirs too), and every job
    that follows one of them; returns how many pending jobs were cancelled."""
    k.validate_topic(topic)
    k.validate_job_id(job_id)
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    root = (k.ShardKeys(topic, k.shard_of(job_id, shards)), job_id)
    queue: deque[Node] = deque([root])
    seen = {root}
    cancelled = 0
    while queue:
        batch = [queue.popleft() for _ in range(min(BATCH, len(queue)))]
        reads = yield [
            call
            for keys, node in batch
            for call in (follow.children_refs(keys, node), follow.followers_of(keys, node))
        ]
        for refs, waiting in zip(reads[::2], reads[1::2], strict=True):
            below = [found for ref in refs if (found := parse_wire_ref(ref))] + waiting
            for node in below:
                if node not in seen:
                    seen.add(node)
                    queue.append(node)
        if len(seen) > MAX_TREE:
            raise InvalidArgumentError(
                "tree", f"the tree of {job_id!r} reaches more than {MAX_TREE} jobs"
            )
        outcomes = yield [enqueue.cancel(keys, node) for keys, node in batch]
        cancelled += sum(1 for done in outcomes if done)
    producer.counts.cancelled += cancelled
    return cancelled
