"""Joins (`Client.enqueue_flow`) and what a flow's parent reads of its children
(`Client.children`; docs/architecture.md, "Jobs that follow jobs")."""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Sequence

from wheelq.core import keys as k
from wheelq.core.follow import (
    MAX_CHILDREN,
    WRITE_WINDOW_MS,
    JobRef,
    Joined,
    OnChildFailure,
    parse_wire_ref,
    waiting_record,
    wire_ref,
)
from wheelq.core.history import JobInfo, job_info
from wheelq.core.options import JobSpec
from wheelq.errors import (
    DuplicateJobError,
    InvalidArgumentError,
    InvalidDelayError,
    NoFlowError,
    int_in,
)
from wheelq.producer.items import EncodeBatch, validate_item
from wheelq.producer.operations import PIPELINE_CALLS, Op, Producer
from wheelq.store import follow, history
from wheelq.store.call import Call
from wheelq.store.enqueue import JobWrite


def enqueue_flow(
    producer: Producer, parent: JobSpec, children: Sequence[JobSpec], policy: OnChildFailure
) -> Op[Joined]:
    """Write a join: `children`, then an edge on each child's shard, then `parent`
    awaiting them all, due its `delay` after the last one succeeded (`policy`: what it
    does if one ends otherwise). Children that end before the parent is written are
    heard when it is (docs/architecture.md, "Jobs that follow jobs"); a producer that
    stops half-way has written children and no parent, and was told nothing succeeded.

    Raises:
        InvalidArgumentError: A bad spec or option (named; ``parent.at``, ``replace``).
        DuplicateJobError: The parent's or a child's id is pending (for the parent:
            nothing written).
    """
    if not isinstance(parent, JobSpec):
        raise InvalidArgumentError("parent", f"parent must be a JobSpec, got {parent!r:.80}")
    specs = list(children) if isinstance(children, Sequence) else None
    if not specs or len(specs) > MAX_CHILDREN or not all(isinstance(c, JobSpec) for c in specs):
        raise InvalidArgumentError(
            "children",
            f"children must be a list of 1-{MAX_CHILDREN} JobSpecs, got {children!r:.80}",
        )
    for n, spec in enumerate([parent, *specs]):
        name = "parent" if n == 0 else f"children[{n - 1}]"
        try:
            k.validate_topic(spec.topic)
            k.validate_group(spec.group)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(name, f"{name}: {exc}") from None
    item = parent.item
    if item.at is not None:
        raise InvalidDelayError(
            "at", "a flow's parent is due its delay after its last child: pass delay="
        )
    if item.replace:
        raise InvalidArgumentError("replace", "a flow's parent cannot replace a job")
    now_ms = producer.clock.now_ms()
    head = validate_item(producer.settings, item, EncodeBatch(now_ms, item.traceparent))
    by_topic: dict[str, list[int]] = defaultdict(list)
    for n, spec in enumerate(specs):
        by_topic[spec.topic].append(n)
    writes: list[JobWrite | None] = [None] * len(specs)
    for indexes in by_topic.values():
        batch = EncodeBatch(now_ms, None)
        for n in indexes:
            writes[n] = validate_item(producer.settings, specs[n].item, batch)
    shards: dict[str, int] = {}
    for topic in {parent.topic, *by_topic}:
        count = yield from producer.shard_count(topic, create=True)
        assert count is not None
        shards[topic] = count
    home = k.ShardKeys(parent.topic, k.shard_of(head.id, shards[parent.topic]))
    if item.job_id is not None:  # pending already: nothing written
        (taken,) = yield [Call(command=("HEXISTS", home.jobs, head.id), parse=bool)]
        if taken:
            raise DuplicateJobError(parent.topic, [head.id])
    for topic, indexes in by_topic.items():
        placed = [w for n in indexes if (w := writes[n]) is not None]
        yield from producer.counted(topic, placed)
    token = secrets.token_hex(8)
    deadline = producer.clock.now_ms() + WRITE_WINDOW_MS
    refs, edges = [], []
    for spec, write in zip(specs, writes, strict=True):
        assert write is not None
        keys = k.ShardKeys(spec.topic, k.shard_of(write.id, shards[spec.topic]))
        refs.append(wire_ref(keys, write.id, spec.group))
        edges.append(follow.follow(keys, write.id, spec.group, home, head.id, token))
    for i in range(0, len(edges), PIPELINE_CALLS * 8):
        yield edges[i : i + PIPELINE_CALLS * 8]
    record = waiting_record(token, head.due.value_ms, policy, refs)
    ((placed_parent, _),) = yield [
        follow.write_waiting(home, head.id, head.envelope, head.key, record, deadline, refs)
    ]
    if placed_parent is follow.Waiting.DUPLICATE:
        raise DuplicateJobError(parent.topic, [head.id])
    producer.counts.enqueued += 1
    return Joined(
        head.id,
        JobRef(parent.topic, head.id, parent.group),
        [
            JobRef(spec.topic, w.id, spec.group)
            for spec, w in zip(specs, writes, strict=True)
            if w is not None
        ],
    )


def children(
    producer: Producer, topic: str, job_id: str, limit: int | None = None
) -> Op[list[JobInfo]]:
    """Each child of the join whose parent is `job_id` (the first `limit`), in the order
    given, as `get()` shows it (docs/architecture.md, "Jobs that follow jobs")."""
    keys = yield from producer.job_keys(topic, job_id)
    if keys is None:
        raise NoFlowError(topic, job_id)
    last = -1 if limit is None else int_in("limit", limit, 1, MAX_CHILDREN) - 1
    (refs,) = yield [Call(command=("LRANGE", k.children_key(keys, job_id), 0, last))]
    found = [ref for raw in refs if (ref := parse_wire_ref(raw.decode()))]
    if not found:
        raise NoFlowError(topic, job_id)
    raws = yield [history.lookup(child, child_id) for child, child_id in found]
    infos = [
        (child, job_info(child.topic, child_id, raw))
        for (child, child_id), raw in zip(found, raws, strict=True)
    ]
    return (yield from producer.with_kept_results(infos))
