"""Joins (docs/architecture.md, "Jobs that follow jobs"): `enqueue_flow(parent, children)`
writes children on any topics and a parent that awaits them all; the parent becomes due its
delay after the last child succeeded, never before, and once. A failed child dead-letters
the parent and cancels the children still pending (``on_child_failure="fail"``), or the
parent runs once every child has ended (``"ignore"``). Through a child's retry, a join of
more children than a record holds inline, children that end before the parent is written,
sync and async handlers and clients. On both servers, one server and a cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.test_follow import FAST, SHARDS, Runs, client, node, state, working
from tests.integration.test_worker import holds
from tests.support.cli import run_wheelq
from tests.support.waiting import eventually
from wheelq import (
    AsyncAdmin,
    AsyncClient,
    Client,
    FlowSpec,
    Job,
    JobRef,
    JobSpec,
    Scheduler,
    Worker,
)
from wheelq.core.follow import INLINE_REFS, MAX_CHILDREN
from wheelq.core.history import JobState
from wheelq.core.keys import ShardKeys, shard_of
from wheelq.errors import DuplicateJobError, InvalidArgumentError, UnknownJobError

pytestmark = pytest.mark.cluster_too

__all__ = ["client", "node"]  # the fixtures, shared with test_follow.py


@pytest.mark.parametrize("sync", [False, True], ids=["async-handler", "sync-handler"])
@pytest.mark.parametrize("count", [3, INLINE_REFS + 5])
async def test_the_parent_starts_its_delay_after_its_last_child_and_once(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler, sync: bool, count: int
) -> None:
    other = topic + "-o"
    runs = Runs()
    children = [
        JobSpec(topic if i % 2 else other, f"child-{i}", delay=0.05 * i) for i in range(count)
    ]
    joined = await client.enqueue_flow(JobSpec(topic, "parent", delay=0.1), children)
    assert (await client.get(topic, joined.id)).state is JobState.AWAITING
    assert [c.topic for c in joined.children] == [c.topic for c in children]
    workers = [await working(redis_url, t, runs, sync) for t in (topic, other)]
    try:
        await eventually(holds(lambda: "parent" in runs.starts), timeout_s=15, what="parent")
    finally:
        for w in workers:
            await w.stop()
    last = max(runs.ends[f"child-{i}"] for i in range(count))
    assert runs.starts["parent"][0] - last >= 0.1
    assert all(len(v) == 1 for v in runs.starts.values())
    assert await state(client, topic, joined.id) is JobState.SUCCEEDED


async def test_the_parents_handler_reads_its_childrens_results(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler
) -> None:
    seen: list[Any] = []

    async def handler(job: Job) -> Any:
        if job.payload != "parent":
            return job.payload * 2
        children = await client.children(job.topic, job.id)
        seen.extend(c.groups[0].result for c in children)
        return None

    worker = Worker.from_url(redis_url, topic, handler)
    await worker.start()
    try:
        joined = await client.enqueue_flow(
            JobSpec(topic, "parent"), [JobSpec(topic, n, delay=0.01 * (12 - n)) for n in range(12)]
        )
        await eventually(holds(lambda: bool(seen)), timeout_s=15, what="the parent's run")
    finally:
        await worker.stop()
    assert seen == [n * 2 for n in range(12)]  # in the order given, whatever order they ran
    with Client.from_url(redis_url) as sync:
        assert [c.id for c in sync.children(topic, joined.id)] == [
            c.job_id for c in joined.children
        ]
        with pytest.raises(UnknownJobError):
            sync.children(topic, joined.children[0].job_id)  # a child is no parent


async def test_a_childs_retry_is_not_its_end(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler
) -> None:
    tried: set[str] = set()

    def fail(job: Job) -> bool:
        first = job.payload == "flaky" and job.id not in tried
        tried.add(job.id)
        return first

    runs = Runs(fail)
    joined = await client.enqueue_flow(
        JobSpec(topic, "parent"), [JobSpec(topic, "flaky"), JobSpec(topic, "steady")]
    )
    worker = await working(redis_url, topic, runs)
    try:
        await eventually(holds(lambda: "parent" in runs.starts), timeout_s=15, what="parent")
    finally:
        await worker.stop()
    assert len(runs.starts["flaky"]) == 2
    assert runs.starts["parent"][0] >= runs.ends["flaky"]
    assert await state(client, topic, joined.id) is JobState.SUCCEEDED


@pytest.mark.parametrize("count", [3, INLINE_REFS + 5])
async def test_a_failed_child_dead_letters_the_parent_and_cancels_the_rest(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler, count: int
) -> None:
    runs = Runs(lambda job: job.payload == "bad")
    children = [JobSpec(topic, "bad", max_attempts=1)] + [
        JobSpec(topic, f"later-{i}", delay=3600) for i in range(count - 1)
    ]
    joined = await client.enqueue_flow(JobSpec(topic, "parent"), children)
    worker = await working(redis_url, topic, runs)
    try:

        async def settled() -> bool:
            states = {await state(client, topic, c.job_id) for c in joined.children[1:]}
            return states == {JobState.CANCELLED}

        await eventually(settled, timeout_s=15, what="the other children cancelled")
    finally:
        await worker.stop()
    info = await client.get(topic, joined.id)
    assert info.state is JobState.DEAD
    assert "bad fails" in (info.groups[0].error or "")
    assert "parent" not in runs.starts
    letters = await AsyncAdmin.of(client).dead_letters(topic)
    assert [(d.job_id, d.payload, d.reason) for d in letters] == [
        (joined.children[0].job_id, "bad", "failed"),
        (joined.id, "parent", "failed"),
    ]
    home = ShardKeys(topic, shard_of(joined.id, SHARDS))

    async def forgotten() -> bool:  # each cancelled child's end heard: no record left
        return not await client.redis.exists(home.waiting)

    await eventually(forgotten, timeout_s=10, what="the parent's record gone")


async def test_ignore_runs_the_parent_once_every_child_has_ended(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler
) -> None:
    runs = Runs(lambda job: job.payload == "bad")
    joined = await client.enqueue_flow(
        JobSpec(topic, "parent"),
        [JobSpec(topic, "bad", max_attempts=1), JobSpec(topic, "good", delay=0.3)],
        on_child_failure="ignore",
    )
    worker = await working(redis_url, topic, runs)
    try:
        await eventually(holds(lambda: "parent" in runs.starts), timeout_s=15, what="parent")
    finally:
        await worker.stop()
    assert runs.starts["parent"][0] >= runs.ends["good"]
    assert await state(client, topic, joined.id) is JobState.SUCCEEDED


async def test_children_that_end_before_the_parent_is_written_are_heard(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler
) -> None:
    # A parent written after its children ran (the producer slow between its writes) hears
    # their ends from the notes kept for it: the follow script writes the notice at once.
    runs = Runs()
    worker = await working(redis_url, topic, runs)
    try:
        joined = await client.enqueue_flow(
            JobSpec(topic, "parent"), [JobSpec(topic, f"c{i}") for i in range(20)]
        )
        await eventually(holds(lambda: "parent" in runs.starts), timeout_s=15, what="parent")
    finally:
        await worker.stop()
    assert await state(client, topic, joined.id) is JobState.SUCCEEDED


def test_the_sync_client_writes_a_flow(redis_url: str, topic: str) -> None:
    with Client.from_url(redis_url) as sync:
        joined = sync.enqueue_flow(
            JobSpec(topic, "parent", job_id="p1"), [JobSpec(topic, "c", delay=3600)]
        )
        assert joined.id == "p1"
        assert sync.get(topic, "p1").state is JobState.AWAITING
        with pytest.raises(DuplicateJobError):
            sync.enqueue_flow(JobSpec(topic, "again", job_id="p1"), [JobSpec(topic, "c")])


BAD_FLOWS: list[tuple[Any, Any, dict[str, Any], str]] = [
    ("not a spec", [JobSpec("t", 1)], {}, "parent"),
    (JobSpec("t", 1), [], {}, "children"),
    (JobSpec("t", 1), ["x"], {}, "children"),
    (JobSpec("t", 1), [JobSpec("t", 1)] * (MAX_CHILDREN + 1), {}, "children"),
    (JobSpec("bad topic!", 1), [JobSpec("t", 1)], {}, "parent"),
    (JobSpec("t", 1), [JobSpec("t", 1, group="")], {}, "children[0]"),
    (JobSpec("t", 1, at=10), [JobSpec("t", 1)], {}, "at"),
    (JobSpec("t", 1, job_id="p", replace=True), [JobSpec("t", 1)], {}, "replace"),
    (JobSpec("t", 1), [JobSpec("t", 1)], {"on_child_failure": "cancel"}, "on_child_failure"),
    (JobSpec("t", 1), [JobSpec("t", 1, max_attempts=0)], {}, "max_attempts"),
]


@pytest.mark.parametrize(("parent", "children", "options", "parameter"), BAD_FLOWS)
async def test_a_bad_flow_names_its_parameter_and_writes_nothing(
    topic: str, client: AsyncClient, parent: Any, children: Any, options: Any, parameter: str
) -> None:
    for spec in [parent, *children]:
        if isinstance(spec, JobSpec) and spec.topic == "t":
            spec.topic = topic
    with pytest.raises(InvalidArgumentError) as caught:
        await client.enqueue_flow(parent, children, **options)
    assert caught.value.parameter == parameter
    assert not await client.redis.keys(f"{{{topic}:*")


assert FAST  # the workers' fast retries (test_follow.py)


def test_the_cli_writes_a_continuation_and_lists_a_flows_children(
    redis_url: str, topic: str
) -> None:
    url = ("--redis-url", redis_url)
    with Client.from_url(redis_url) as sync:
        first = sync.enqueue(topic, "first", delay=600)
        joined = sync.enqueue_flow(
            JobSpec(topic, "p"), [JobSpec(topic, n, delay=600) for n in (1, 2)]
        )
        made = run_wheelq("enqueue", topic, '"next"', "--after", first, "--delay", "5", *url)
        assert made.returncode == 0, made.stderr
        assert sync.get(topic, made.stdout.strip()).state is JobState.AWAITING
        other = run_wheelq(
            "enqueue", topic, "1", "--after", joined.id, "--on-parent-failure", "run", *url
        )
        assert other.returncode == 0, other.stderr
        listed = run_wheelq("children", topic, joined.id, *url)
        assert listed.returncode == 0, listed.stderr
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        assert [(r["id"], r["payload"], r["state"]) for r in rows] == [
            (c.job_id, n, "pending") for c, n in zip(joined.children, (1, 2), strict=True)
        ]
        for bad, says in (
            (("--after", "never-enqueued"), "after"),
            (("--on-parent-failure", "run"), "--after"),
        ):
            refused = run_wheelq("enqueue", topic, "1", *bad, *url)
            assert refused.returncode != 0 and says in refused.stderr, refused.stderr
        gone = run_wheelq("children", topic, first, *url)
        assert gone.returncode == 2 and "no flow's parent" in gone.stderr, gone.stderr
        tree = run_wheelq("cancel", topic, joined.id, "--tree", *url)
        assert (tree.returncode, tree.stdout) == (0, "cancelled 4 jobs\n"), tree.stderr
        mixed = run_wheelq("cancel", topic, "--key", "k", "--tree", *url)
        assert mixed.returncode == 2 and "--tree" in mixed.stderr
        shifted = sync.enqueue_flow(JobSpec(topic, "p"), [JobSpec(topic, 3, delay=600)])
        due = sync.get(topic, shifted.children[0].job_id).due_ms
        moved = run_wheelq("reschedule", topic, shifted.id, "--tree", "--by", "-60", *url)
        assert (moved.returncode, moved.stdout) == (
            0, f"rescheduled 1 jobs of the tree of {shifted.id}\n"
        ), moved.stderr  # fmt: skip
        assert sync.get(topic, shifted.children[0].job_id).due_ms == due - 60_000
        for bad, says in (
            (("--tree",), "--by"),
            (("--tree", "--delay", "5"), "--delay"),
            (("--tree", "--key", "k", "--by", "1"), "--tree"),
        ):
            refused = run_wheelq("reschedule", topic, *([] if "--key" in bad else [shifted.id]),
                                 *bad, *url)  # fmt: skip
            assert refused.returncode == 2 and says in refused.stderr, (bad, refused.stderr)


async def test_a_tree_cancel_reaches_children_and_everything_that_follows(
    topic: str, client: AsyncClient
) -> None:
    other = topic + "-o"
    joined = await client.enqueue_flow(
        JobSpec(topic, "parent"), [JobSpec(topic, "c1", delay=600), JobSpec(other, "c2", delay=600)]
    )
    c1 = joined.children[0].job_id
    anyway = await client.enqueue(topic, "f", after=c1, on_parent_failure="run")
    after_flow = await client.enqueue(other, "g", after=(topic, joined.id))
    bystander = await client.enqueue(topic, "b", delay=600)
    assert await client.cancel(topic, joined.id, tree=True) == 5
    for t, job in [(topic, joined.id), (topic, c1), (other, joined.children[1].job_id),
                   (topic, anyway), (other, after_flow)]:  # fmt: skip
        assert await state(client, t, job) is JobState.CANCELLED, job
    assert await state(client, topic, bystander) is JobState.PENDING
    assert await client.cancel(topic, joined.id, tree=True) == 0  # nothing left to cancel
    with pytest.raises(InvalidArgumentError) as caught:
        await client.cancel(topic, key="k", tree=True)  # type: ignore[call-overload]
    assert caught.value.parameter == "tree"


async def test_a_tree_reschedule_shifts_each_pending_job_from_its_own_due_time(
    topic: str, client: AsyncClient, node: Scheduler
) -> None:
    """Children on two topics move by the same shift from their own dues, a child's retry
    with them; the parent and a continuation stay awaiting; a bystander stays put."""
    other = topic + "-o"
    joined = await client.enqueue_flow(
        JobSpec(topic, "parent"),
        [JobSpec(topic, "c1", delay=600), JobSpec(other, "c2", delay=900)],
    )
    c1, c2 = joined.children[0].job_id, joined.children[1].job_id
    then = await client.enqueue(other, "then", after=(other, c2))
    bystander = await client.enqueue(topic, "b", delay=600)
    dues = {j: (await client.get(t, j)).due_ms for t, j in ((topic, c1), (other, c2))}
    before = (await client.get(topic, bystander)).due_ms
    assert await client.reschedule(topic, joined.id, tree=True, by=-300) == 2
    assert (await client.get(topic, c1)).due_ms == dues[c1] - 300_000
    assert (await client.get(other, c2)).due_ms == dues[c2] - 300_000
    for t, job in ((topic, joined.id), (other, then)):
        assert await state(client, t, job) is JobState.AWAITING
    assert (await client.get(topic, bystander)).due_ms == before
    to = dues[c1] / 1000 + 3600
    assert await client.reschedule(other, c2, tree=True, to=to) == 1
    assert (await client.get(other, c2)).due_ms == int(to * 1000)
    assert await client.reschedule(topic, "nothing-here", tree=True, by=1) == 0


async def test_get_shows_a_jobs_flow_parent_children_and_continuations_while_they_await(
    redis_url: str, topic: str, client: AsyncClient
) -> None:
    other = topic + "-o"
    joined = await client.enqueue_flow(
        JobSpec(topic, "parent"), [JobSpec(other, n, delay=600) for n in range(3)]
    )
    child = joined.children[0]
    then = await client.enqueue(topic, "then", after=(other, child.job_id))
    info = await client.get(other, child.job_id)
    assert info.parent == JobRef(topic, joined.id)
    assert info.continuations == (JobRef(topic, then),)
    assert (info.after, info.children) == (None, 0)
    parent = await client.get(topic, joined.id)
    assert (parent.children, parent.parent, parent.continuations) == (3, None, ())
    follower = await client.get(topic, then)
    assert follower.after == JobRef(other, child.job_id)
    with Client.from_url(redis_url) as sync:
        assert sync.get(other, child.job_id) == info  # the sync client reads the same
    shown = run_wheelq("job", other, child.job_id, "--redis-url", redis_url)
    assert f"flow parent  {joined.id} on {topic}" in shown.stdout, shown.stdout
    assert f"followed by  {then} on {topic}" in shown.stdout
    as_json = json.loads(run_wheelq("job", topic, then, "--json", "--redis-url", redis_url).stdout)
    assert as_json["after"] == {"topic": other, "job_id": child.job_id, "group": "default"}
    plain = await client.get(topic, await client.enqueue(topic, "plain", delay=600))
    assert (plain.parent, plain.continuations, plain.after, plain.children) == (None, (), None, 0)
    await client.cancel(other, child.job_id)  # the edges become notices: no longer tied
    assert (await client.get(other, child.job_id)).continuations == ()


@pytest.mark.parametrize(
    ("call", "parameter"),
    [
        ({"tree": True}, "by"),
        ({"tree": True, "by": 1, "to": 2_000_000_000}, "by"),
        ({"tree": True, "delay": 5}, "delay"),
        ({"tree": True, "at": 2_000_000_000}, "at"),
        ({"tree": True, "by": 1, "key": "k", "job_id": None}, "tree"),
        ({"tree": True, "by": 1, "job_id": None}, "job_id"),
        ({"tree": "yes", "by": 1}, "tree"),
        ({"tree": True, "by": 11 * 365 * 86400}, "by"),
        ({"by": 1}, "by"),
    ],
)
async def test_a_bad_tree_reschedule_names_its_parameter_and_moves_nothing(
    topic: str, client: AsyncClient, call: dict[str, Any], parameter: str
) -> None:
    joined = await client.enqueue_flow(JobSpec(topic, "p"), [JobSpec(topic, "c", delay=600)])
    due = (await client.get(topic, joined.children[0].job_id)).due_ms
    call = dict(call)
    job_id = call.pop("job_id", joined.id)
    with pytest.raises(InvalidArgumentError) as caught:
        await client.reschedule(topic, job_id, **call)
    assert caught.value.parameter == parameter
    assert (await client.get(topic, joined.children[0].job_id)).due_ms == due


@pytest.mark.parametrize("sync", [False, True], ids=["async-handler", "sync-handler"])
async def test_a_child_that_is_a_flow_runs_its_own_children_first_and_counts_once(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler, sync: bool
) -> None:
    """A tree: the top parent awaits a job and a flow; the flow's parent awaits two jobs
    on another topic, one of them retried once. Each parent starts after its own
    children ended, once."""
    other = topic + "-o"
    runs = Runs(lambda job: job.payload == "d1" and job.attempt == 1)
    joined = await client.enqueue_flow(
        JobSpec(topic, "top", delay=0.05),
        [
            JobSpec(topic, "c1", delay=0.1),
            FlowSpec(
                JobSpec(topic, "mid"),
                [JobSpec(other, "d1"), JobSpec(other, "d2", delay=0.2)],
            ),
        ],
    )
    mid = joined.children[1]
    assert (await client.get(topic, mid.job_id)).state is JobState.AWAITING
    assert (await client.get(topic, mid.job_id)).parent == JobRef(topic, joined.id)
    assert [c.payload for c in await client.children(topic, mid.job_id)] == ["d1", "d2"]
    workers = [await working(redis_url, t, runs, sync) for t in (topic, other)]
    try:
        await eventually(holds(lambda: "top" in runs.starts), timeout_s=15, what="the top")
    finally:
        for w in workers:
            await w.stop()
    assert runs.starts["mid"][0] >= max(runs.ends["d1"], runs.ends["d2"])
    assert runs.starts["top"][0] >= max(runs.ends["mid"], runs.ends["c1"]) + 0.05
    assert len(runs.starts["d1"]) == 2  # its retry was no end
    assert all(len(runs.starts[p]) == 1 for p in ("top", "mid", "c1", "d2"))


async def test_a_failure_deep_in_a_tree_dead_letters_each_parent_above_it(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler
) -> None:
    runs = Runs(lambda job: job.payload == "bad")
    joined = await client.enqueue_flow(
        JobSpec(topic, "top"),
        [
            JobSpec(topic, "later", delay=3600),
            FlowSpec(JobSpec(topic, "mid"), [JobSpec(topic, "bad", max_attempts=1)]),
        ],
    )
    worker = await working(redis_url, topic, runs)
    try:

        async def unwound() -> bool:
            return await state(client, topic, joined.children[0].job_id) is JobState.CANCELLED

        await eventually(unwound, timeout_s=15, what="the top's other child cancelled")
    finally:
        await worker.stop()
    for job in (joined.id, joined.children[1].job_id):
        assert await state(client, topic, job) is JobState.DEAD
    assert not {"top", "mid", "later"} & runs.starts.keys()


async def test_a_tree_cancel_reaches_a_nested_flows_children(
    topic: str, client: AsyncClient
) -> None:
    joined = await client.enqueue_flow(
        JobSpec(topic, "top"),
        [FlowSpec(JobSpec(topic, "mid"), [JobSpec(topic, n, delay=600) for n in (1, 2)])],
    )
    mid = joined.children[0].job_id
    deep = [c.id for c in await client.children(topic, mid)]
    assert await client.reschedule(topic, joined.id, tree=True, by=60) == 2
    assert await client.cancel(topic, joined.id, tree=True) == 4
    for job in (joined.id, mid, *deep):
        assert await state(client, topic, job) is JobState.CANCELLED


@pytest.mark.parametrize(
    ("children", "parameter"),
    [
        (lambda t: [FlowSpec(JobSpec(t, "m"), [])], "children[0].children"),
        (
            lambda t: [FlowSpec(JobSpec(t, "m"), [JobSpec("bad topic", 1)])],
            "children[0].children[0]",
        ),
        (lambda t: [FlowSpec("m", [JobSpec(t, 1)])], "children[0].parent"),
        (
            lambda t: [FlowSpec(JobSpec(t, "m", at=2_000_000_000), [JobSpec(t, 1)])],
            "children[0].at",
        ),
        (
            lambda t: [FlowSpec(JobSpec(t, "m"), [JobSpec(t, 1)], on_child_failure="x")],
            "children[0].on_child_failure",
        ),
        (lambda t: [JobSpec(t, 1), FlowSpec(JobSpec(t, "m"), [JobSpec(t, 1, delay=-1)])], "delay"),
        (lambda t: [_nested(t, 17)], "children"),
    ],
)
async def test_a_bad_nested_flow_names_where_it_is_and_writes_nothing(
    topic: str, client: AsyncClient, children: Any, parameter: str
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await client.enqueue_flow(JobSpec(topic, "top"), children(topic))
    assert caught.value.parameter.endswith(parameter), caught.value.parameter
    assert await client.redis.dbsize() == 0 or not await client.redis.keys(f"*{topic}:*")


def _nested(topic: str, depth: int) -> FlowSpec:
    flow = FlowSpec(JobSpec(topic, "leaf-parent"), [JobSpec(topic, "leaf")])
    for _ in range(depth - 1):
        flow = FlowSpec(JobSpec(topic, "p"), [flow])
    return flow


@pytest.mark.parametrize("sync", [False, True], ids=["async-handler", "sync-handler"])
async def test_a_retried_parent_and_a_retried_continuation_release_what_follows_once(
    redis_url: str, topic: str, client: AsyncClient, node: Scheduler, sync: bool
) -> None:
    """A flow's parent and a continuation each fail their first run: what follows each
    starts after its second, successful run, once."""
    runs = Runs(lambda job: job.payload in ("parent", "middle") and job.attempt == 1)
    joined = await client.enqueue_flow(JobSpec(topic, "parent"), [JobSpec(topic, "child")])
    after_parent = await client.enqueue(topic, "after-parent", after=joined.id)
    first = await client.enqueue(topic, "first")
    middle = await client.enqueue(topic, "middle", after=first)
    await client.enqueue(topic, "last", after=middle)
    worker = await working(redis_url, topic, runs, sync)
    try:
        await eventually(
            holds(lambda: {"after-parent", "last"} <= runs.starts.keys()),
            timeout_s=15,
            what="both followers",
        )
    finally:
        await worker.stop()
    assert len(runs.starts["parent"]) == len(runs.starts["middle"]) == 2
    assert runs.starts["after-parent"][0] >= runs.ends["parent"]  # its success, not failure
    assert runs.starts["last"][0] >= runs.ends["middle"]
    assert len(runs.starts["after-parent"]) == len(runs.starts["last"]) == 1
    assert await state(client, topic, after_parent) is JobState.SUCCEEDED
