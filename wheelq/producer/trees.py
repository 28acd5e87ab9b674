"""A job's tree (docs/guides/workflows.md): the job, a flow parent's children, and the jobs
that follow any of them (a join's parent reached from one of its children without the
other children: those are its siblings, not below it), found by their edges and children
lists and cancelled or moved
together (`Client.cancel(..., tree=True)`, `Client.reschedule(..., tree=True)`). Each round
reads its jobs' edges before it acts on them: a job's edges become notices as it is
cancelled."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from wheelq.core import keys as k
from wheelq.core.due import DueSpec
from wheelq.core.follow import MAX_CHILDREN, parse_wire_ref
from wheelq.errors import InvalidArgumentError, UnknownTopicError
from wheelq.producer.operations import Op, Producer
from wheelq.store import enqueue, follow
from wheelq.store.call import Call

BATCH = 500
"""Jobs of a tree read and cancelled a round trip."""
MAX_TREE = 10 * MAX_CHILDREN
"""Jobs one tree's cancel or move reaches at most (a larger tree: InvalidArgumentError,
nothing more acted on after the rounds done)."""

Node = tuple[k.ShardKeys, str]


def cancel_tree(producer: Producer, topic: str, job_id: str) -> Op[int]:
    """Cancel job `job_id` of `topic`, a flow parent's children (theirs too), and every job
    that follows one of them; returns how many pending jobs were cancelled."""
    outcomes = yield from _walk(producer, topic, job_id, enqueue.cancel)
    cancelled = sum(1 for done in outcomes if done)
    producer.counts.cancelled += cancelled
    return cancelled


def reschedule_tree(producer: Producer, topic: str, job_id: str, due: DueSpec) -> Op[int]:
    """Move every pending job of `job_id`'s tree (as `cancel_tree` finds it) to `due`, a
    ``shift`` moving each from its own due time; a job awaiting another stays awaiting (it
    becomes due relative to its release). Returns how many jobs moved."""

    def act(keys: k.ShardKeys, node: str) -> Call[Any]:
        return enqueue.reschedule(keys, node, due)

    outcomes = yield from _walk(producer, topic, job_id, act)
    return sum(1 for placed in outcomes if placed is not None)


def _walk(
    producer: Producer, topic: str, job_id: str, act: Callable[[k.ShardKeys, str], Call[Any]]
) -> Op[list[Any]]:
    """`act` on every job of `job_id`'s tree, a round of `BATCH` after reading their edges;
    the outcomes."""
    k.validate_topic(topic)
    k.validate_job_id(job_id)
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    root = (k.ShardKeys(topic, k.shard_of(job_id, shards)), job_id)
    queue: deque[Node] = deque([root])
    seen = {root}
    via: dict[Node, Node] = {}  # a follower -> the job it was reached from
    done: list[Any] = []
    while queue:
        batch = [queue.popleft() for _ in range(min(BATCH, len(queue)))]
        reads = yield [
            call
            for keys, node in batch
            for call in (follow.children_refs(keys, node), follow.followers_of(keys, node))
        ]
        for at, refs, waiting in zip(batch, reads[::2], reads[1::2], strict=True):
            children = [found for ref in refs if (found := parse_wire_ref(ref))]
            if via.get(at) in children:
                children = []  # a join's parent reached from a child: the rest are siblings
            for node in children:
                if node not in seen:
                    seen.add(node)
                    queue.append(node)
            for node in waiting:
                if node not in seen:
                    seen.add(node)
                    via[node] = at
                    queue.append(node)
        if len(seen) > MAX_TREE:
            raise InvalidArgumentError(
                "tree", f"the tree of {job_id!r} reaches more than {MAX_TREE} jobs"
            )
        done += yield [act(keys, node) for keys, node in batch]
    return done
