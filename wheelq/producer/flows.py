"""Jobs that follow jobs, the producer's part (docs/architecture.md, "Jobs that follow
jobs"): a continuation (`Client.enqueue(..., after=...)`), a join (`Client.enqueue_flow`),
and what a flow's parent reads of its children (`Client.children`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from wheelq.core import keys as k
from wheelq.core.follow import (
    MAX_CHILDREN,
    WRITE_WINDOW_MS,
    JobRef,
    Joined,
    OnChildFailure,
    OnFailure,
    job_ref,
    new_token,
    on_failure,
    parse_wire_ref,
    policy_of,
    waiting_record,
    wire_ref,
)
from wheelq.core.history import JobInfo, job_info
from wheelq.core.options import EnqueueKwargs, FlowSpec, ItemOptions, JobSpec
from wheelq.errors import (
    DuplicateJobError,
    InvalidArgumentError,
    InvalidDelayError,
    NoFlowError,
    UnknownJobError,
    int_in,
)
from wheelq.producer.items import EncodeBatch, EnqueueItem, validate_item
from wheelq.producer.operations import PIPELINE_CALLS, Op, Producer
from wheelq.store import follow, history
from wheelq.store.call import Call
from wheelq.store.enqueue import JobWrite

FOLLOW_OPTIONS = frozenset({"after", "on_parent_failure"})
"""`Client.enqueue`'s keywords of a job that follows another (`enqueue_call` takes them)."""
_DEBOUNCE = ("debounce", "debounce_ms", "max_wait", "max_wait_ms")


def enqueue_call(
    producer: Producer, topic: str, payload: Any, options: EnqueueKwargs
) -> tuple[Op[str], str | None]:
    """`Client.enqueue`'s operation and the ack level it asks for: `enqueue_after` when it
    follows a job, else the producer's own (`Producer.enqueue_call`)."""
    if FOLLOW_OPTIONS.isdisjoint(options):  # the usual call
        return producer.enqueue_call(topic, payload, options)
    rest = dict(options)
    after, policy = rest.pop("after", None), rest.pop("on_parent_failure", None)
    if after is None and policy is None:
        return producer.enqueue_call(topic, payload, cast(EnqueueKwargs, rest))
    if any(rest.get(n) is not None for n in _DEBOUNCE):
        raise InvalidArgumentError("after", "pass after= or debounce=, not both")
    ack = rest.pop("ack", None)
    for name in _DEBOUNCE:
        rest.pop(name, None)
    item = EnqueueItem(payload=payload, **cast(ItemOptions, rest))
    follows = on_failure(OnFailure.CANCEL if policy is None else policy)
    return enqueue_after(producer, topic, item, after, follows), cast(str | None, ack)


def enqueue_after(
    producer: Producer, topic: str, item: EnqueueItem, after: object, policy: OnFailure
) -> Op[str]:
    """Enqueue `item` on `topic`, due its `delay` after job `after` succeeds (`policy`:
    what it does if that job ends otherwise); returns its id (docs/architecture.md, "Jobs
    that follow jobs"). The edge goes on the shard of the job it follows first, then the
    job itself, waiting, on its own shard: two writes, maybe on two primaries, neither
    needing the other to have landed. An outcome that reaches the job's shard before it
    is kept there for it; a write later than `WRITE_WINDOW_MS` (a frozen producer) is
    refused rather than left waiting on an outcome it missed.

    Raises:
        InvalidArgumentError: A bad argument (named); ``at=`` or ``replace=`` given.
        UnknownJobError: Nothing is known of the job `after` names (nothing written).
        DuplicateJobError: A job of `item`'s id is pending already (nothing written).
    """
    k.validate_topic(topic)
    ref = job_ref(after, topic)
    if item.at is not None:
        raise InvalidDelayError(
            "at", "a job with after= is due its delay after the job it follows: pass delay="
        )
    if item.replace:
        raise InvalidArgumentError("replace", "a job with after= cannot replace a job")
    batch = EncodeBatch(producer.clock.now_ms(), item.traceparent)
    write = validate_item(producer.settings, item, batch)
    yield from producer.note_callbacks(topic, batch.callbacks)
    shards = yield from producer.shard_count(topic, create=True)
    followed = yield from producer.shard_count(ref.topic, create=False)
    assert shards is not None
    if followed is None:
        raise UnknownJobError(ref.topic, ref.job_id, "after")
    waiting = k.ShardKeys(topic, k.shard_of(write.id, shards))
    keys = k.ShardKeys(ref.topic, k.shard_of(ref.job_id, followed))
    token = new_token(join=False)
    (edge,) = yield [follow.follow(keys, ref.job_id, ref.group, waiting, write.id, token)]
    if edge is follow.Edge.UNKNOWN:
        raise UnknownJobError(ref.topic, ref.job_id, "after")
    wire = wire_ref(keys, ref.job_id, ref.group)
    record = waiting_record(token, write.due.value_ms, policy, [wire])
    deadline = producer.clock.now_ms() + WRITE_WINDOW_MS
    ((placed, _),) = yield [
        follow.write_waiting(waiting, write.id, write.envelope, write.key, record, deadline)
    ]
    if placed is follow.Waiting.DUPLICATE:
        raise DuplicateJobError(topic, [write.id])
    producer.counts.enqueued += 1
    return write.id


MAX_FLOW_DEPTH = 16
"""Flows nested in one `enqueue_flow` call at most (a child flow's children: depth 2)."""
MAX_FLOW_JOBS = 10 * MAX_CHILDREN
"""Jobs one `enqueue_flow` call writes at most, over every nested flow (each flow itself
has at most `MAX_CHILDREN` children)."""


@dataclass
class _Plan:
    """A flow checked and encoded, nothing written yet: its parent and its children, each
    a job's write or a flow of its own (`_plan`)."""

    parent: JobSpec
    head: JobWrite
    policy: OnChildFailure
    children: list[tuple[JobSpec, JobWrite | _Plan]]

    def topics(self) -> set[str]:
        found = {self.parent.topic}
        for spec, kid in self.children:
            found |= kid.topics() if isinstance(kid, _Plan) else {spec.topic}
        return found


def enqueue_flow(
    producer: Producer,
    parent: JobSpec,
    children: Sequence[JobSpec | FlowSpec],
    policy: OnChildFailure,
) -> Op[Joined]:
    """Write a join: `children` (a `FlowSpec` among them written as a flow of its own,
    first), then an edge on each child's shard, then `parent` awaiting them all, due its
    `delay` after the last one succeeded (`policy`: what it does if one ends otherwise).
    Children that end before the parent is written are heard when it is
    (docs/architecture.md, "Jobs that follow jobs"); a producer that stops half-way has
    written children and no parent, and was told nothing succeeded.

    Raises:
        InvalidArgumentError: A bad spec or option anywhere in the flow (named: ``parent``,
            ``children[i]``, ``children[i].children[j]``, ``at``, ``replace``); nothing
            written.
        DuplicateJobError: The parent's or a child's id is pending (for the parent:
            nothing written).
    """
    count = [0]
    plan = _plan(producer, parent, children, policy, "", producer.clock.now_ms(), count)
    shards: dict[str, int] = {}
    for topic in plan.topics():
        found = yield from producer.shard_count(topic, create=True)
        assert found is not None
        shards[topic] = found
    return (yield from _write(producer, plan, shards))


def _plan(
    producer: Producer,
    parent: object,
    children: object,
    policy: OnChildFailure,
    name: str,
    now_ms: int,
    count: list[int],
) -> _Plan:
    """Check and encode a flow (`name`: where it is in the call, "" at the top); `count`
    counts the jobs of the whole call."""
    if not isinstance(parent, JobSpec):
        raise InvalidArgumentError(
            f"{name}parent", f"{name}parent must be a JobSpec, got {parent!r:.80}"
        )
    specs = list(children) if isinstance(children, Sequence) else None
    if (
        not specs
        or len(specs) > MAX_CHILDREN
        or not all(isinstance(c, JobSpec | FlowSpec) for c in specs)
    ):
        raise InvalidArgumentError(
            f"{name}children",
            f"{name}children must be a list of 1-{MAX_CHILDREN} JobSpecs or FlowSpecs, "
            f"got {children!r:.80}",
        )
    count[0] += 1 + len(specs)
    if count[0] > MAX_FLOW_JOBS or name.count("children[") >= MAX_FLOW_DEPTH:
        raise InvalidArgumentError(
            f"{name}children",
            f"one enqueue_flow writes at most {MAX_FLOW_JOBS} jobs, in flows nested at "
            f"most {MAX_FLOW_DEPTH} deep",
        )
    for n, spec in enumerate([parent, *specs]):
        where = f"{name}parent" if n == 0 else f"{name}children[{n - 1}]"
        if isinstance(spec, FlowSpec):
            continue  # checked as a flow below
        try:
            k.validate_topic(spec.topic)
            k.validate_group(spec.group)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(where, f"{where}: {exc}") from None
    item = parent.item
    if item.at is not None:
        raise InvalidDelayError(
            f"{name}at", "a flow's parent is due its delay after its last child: pass delay="
        )
    if item.replace:
        raise InvalidArgumentError(f"{name}replace", "a flow's parent cannot replace a job")
    head = validate_item(producer.settings, item, EncodeBatch(now_ms, item.traceparent))
    kids: list[tuple[JobSpec, JobWrite | _Plan] | None] = [None] * len(specs)
    by_topic: dict[str, list[int]] = defaultdict(list)
    for n, spec in enumerate(specs):
        if isinstance(spec, FlowSpec):
            where = f"{name}children[{n}]."
            sub = policy_of(OnChildFailure, spec.on_child_failure, f"{where}on_child_failure")
            plan = _plan(producer, spec.parent, spec.children, sub, where, now_ms, count)
            kids[n] = (plan.parent, plan)
        else:
            by_topic[spec.topic].append(n)
    for indexes in by_topic.values():
        batch = EncodeBatch(now_ms, None)
        for n in indexes:
            spec = cast("JobSpec", specs[n])
            kids[n] = (spec, validate_item(producer.settings, spec.item, batch))
    return _Plan(parent, head, policy, [kid for kid in kids if kid is not None])


def _write(producer: Producer, plan: _Plan, shards: dict[str, int]) -> Op[Joined]:
    """Write `plan`: its child flows (each the same way), its other children, the edges,
    then its parent."""
    parent, head = plan.parent, plan.head
    home = k.ShardKeys(parent.topic, k.shard_of(head.id, shards[parent.topic]))
    if parent.item.job_id is not None:  # pending already: nothing more written
        (taken,) = yield [Call(command=("HEXISTS", home.jobs, head.id), parse=bool)]
        if taken:
            raise DuplicateJobError(parent.topic, [head.id])
    ids: list[str] = []
    by_topic: dict[str, list[JobWrite]] = defaultdict(list)
    for spec, kid in plan.children:
        if isinstance(kid, _Plan):
            ids.append((yield from _write(producer, kid, shards)).id)
        else:
            by_topic[spec.topic].append(kid)
            ids.append(kid.id)
    for topic, writes in by_topic.items():
        yield from producer.counted(topic, writes)
    token = new_token(join=True)
    deadline = producer.clock.now_ms() + WRITE_WINDOW_MS
    refs, edges = [], []
    for (spec, _), job_id in zip(plan.children, ids, strict=True):
        keys = k.ShardKeys(spec.topic, k.shard_of(job_id, shards[spec.topic]))
        refs.append(wire_ref(keys, job_id, spec.group))
        edges.append(follow.follow(keys, job_id, spec.group, home, head.id, token))
    for i in range(0, len(edges), PIPELINE_CALLS * 8):
        yield edges[i : i + PIPELINE_CALLS * 8]
    record = waiting_record(token, head.due.value_ms, plan.policy, refs)
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
            JobRef(spec.topic, job_id, spec.group)
            for (spec, _), job_id in zip(plan.children, ids, strict=True)
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
