"""Two scheduler processes on one 4-shard topic: sharing, kill -9 (taken over within 500 ms
by the fast path, within the TTL without it), SIGSTOP (kept until the TTL, then fenced).

docs/architecture.md, invariant 2: whatever happens to nodes, each job is emitted at most once,
and (invariant 1) none is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
import redis.cluster

from tests.support.servers import dedicated_server
from tests.support.waiting import eventually, eventually_sync
from wheelq import Admin, AsyncAdmin, AsyncClient, Client, EnqueueItem, Scheduler
from wheelq.core.keys import all_shards, shard_of
from wheelq.store import connect, leases
from wheelq.store.executor import SyncExecutor
from wheelq.testing import EmbeddedServer, Fired, ServerBinary, summarize
from wheelq.testing.proxy import ProxyThread

SHARDS = 4
TTL_MS = 1500
JITTER_MS = 100  # ordinary firing lateness allowed once a shard has a leader again
ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {
    "lease_ttl_ms": TTL_MS,
    "window_ms": 5000,
    "preload_interval_ms": 200,
    "check_interval_ms": 100,
    "sweep_grace_ms": 3000,
}
FAST_MS = 500  # a dead process's shards fire again within this, at default settings
TTL_DEFAULT_MS = 5000

pytestmark = pytest.mark.slow


class Node:
    def __init__(
        self, url: str, topic: str, node_id: str, out: Path, settings: dict[str, int] = SETTINGS
    ) -> None:
        self.node_id = node_id
        self.out = out
        self._file = out.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.node_proc",
                url,
                topic,
                node_id,
                json.dumps(settings),
            ],
            cwd=ROOT,
            stdout=self._file,
            stderr=subprocess.DEVNULL,
        )

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def finish(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._file.close()

    def events(self) -> list[dict[str, int | str]]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]


@contextlib.contextmanager
def two_nodes(
    url: str, topic: str, out: Path, settings: dict[str, int] = SETTINGS
) -> Iterator[tuple[Node, Node]]:
    with Admin.from_url(url) as admin:
        admin.create_topic(topic, SHARDS)
    a = Node(url, topic, "node-a", out / "a.jsonl", settings)
    b = Node(url, topic, "node-b", out / "b.jsonl", settings)
    try:
        yield a, b
    finally:
        a.finish()
        b.finish()


@pytest.fixture
def nodes(redis_url: str, topic: str, tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    with two_nodes(redis_url, topic, tmp_path) as both:
        yield both


def holders(r: redis.Redis, topic: str) -> dict[int, str | None]:
    values = [r.get(k.lease) for k in all_shards(topic, SHARDS)]
    return {s: (v.decode() if v else None) for s, v in enumerate(values)}


def redis_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000


def fired(r: redis.Redis, topic: str) -> list[Fired]:
    out = []
    for keys in all_shards(topic, SHARDS):
        out += [Fired.from_entry(entry_id, f) for entry_id, f in r.xrange(keys.ready)]
    return out


def wait_split(r: redis.Redis, topic: str) -> dict[int, str | None]:
    def split() -> dict[int, str | None] | None:
        h = holders(r, topic)
        return (
            h if sorted(Counter(h.values()).values()) == [2, 2] and None not in h.values() else None
        )

    return eventually_sync(split, timeout_s=20, what="the two nodes to split the shards 2/2")


def enqueue_spread(url: str, topic: str, n: int, start_s: float, span_s: float) -> list[str]:
    with Client.from_url(url) as c:
        return c.enqueue_many(
            topic, [EnqueueItem(payload=i, delay=start_s + span_s * i / n) for i in range(n)]
        )


def wait_all_fired(r: redis.Redis, topic: str, ids: list[str]) -> list[Fired]:
    want = set(ids)

    def check() -> list[Fired] | None:
        records = fired(r, topic)
        return records if want <= {f.job_id for f in records} else None

    return eventually_sync(check, timeout_s=40, what="every job to fire")


@pytest.mark.cluster_too
def test_kill_9_of_a_leader_moves_its_shards_within_500_ms(
    redis_url: str, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    """Default settings (a 5 s lease): the dead process's connections vanish from Redis at
    once, the other node frees its leases and fires its shards' jobs again within 500 ms,
    while jobs fall due every millisecond; none twice, none early."""
    with two_nodes(redis_url, topic, tmp_path, {}) as (a, b):
        split = wait_split(redis_sync, topic)
        eventually_sync(
            lambda: all(redis_sync.get(k.followed) for k in all_shards(topic, SHARDS)),
            timeout_s=10,
            what="both nodes to confirm their wake subscriptions",
        )
        ids = enqueue_spread(redis_url, topic, 6000, start_s=0.5, span_s=6.0)  # one a ms
        start = redis_ms(redis_sync)
        eventually_sync(lambda: redis_ms(redis_sync) > start + 2000, timeout_s=10, what="2 s")
        killed_ms = redis_ms(redis_sync)
        a.signal(signal.SIGKILL)
        a.proc.wait()
        led_ms = eventually_sync(
            lambda: (
                redis_ms(redis_sync)
                if set(holders(redis_sync, topic).values()) == {b.node_id}
                else None
            ),
            timeout_s=10,
            what="node b to lead every shard",
        )
        records = wait_all_fired(redis_sync, topic, ids)
        taken = [e for e in b.events() if e["kind"] == "taken_over_dead"]
    summary = summarize(records, ids)
    assert (summary["missing"], summary["duplicates"], summary["early"]) == (0, 0, 0)
    a_shards = {s for s, holder in split.items() if holder == a.node_id}
    assert sorted(int(e["shard"]) for e in taken) == sorted(a_shards)
    assert led_ms - killed_ms < FAST_MS + 100  # + the test's own polling
    worst = max(
        f.entry_ms - max(f.due_ms, killed_ms)
        for f in records
        if shard_of(f.job_id, SHARDS) in a_shards and f.due_ms + JITTER_MS >= killed_ms
    )
    assert worst < FAST_MS, f"a dead node's job fired {worst} ms after the kill or its due time"


@pytest.mark.cluster_too
def test_a_sigstopped_leader_keeps_its_leases_until_the_ttl(
    redis_url: str, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    """Alive but paused, a leader keeps its connections, so the fast path never takes its
    shards: they move when its leases expire, not before."""
    ttl_ms = 2000
    settings = {"lease_ttl_ms": ttl_ms}
    with two_nodes(redis_url, topic, tmp_path, settings) as (a, b):
        split = wait_split(redis_sync, topic)
        eventually_sync(
            lambda: all(redis_sync.get(k.followed) for k in all_shards(topic, SHARDS)),
            timeout_s=10,
            what="both nodes to confirm their wake subscriptions",
        )
        a_shards = {s for s, holder in split.items() if holder == a.node_id}
        a.signal(signal.SIGSTOP)
        stopped_ms = redis_ms(redis_sync)
        moved_ms = eventually_sync(
            lambda: (
                redis_ms(redis_sync)
                if all(holders(redis_sync, topic)[s] != a.node_id for s in a_shards)
                else None
            ),
            timeout_s=20,
            what="node a's shards to move on",
        )
        taken = [e for e in b.events() if e["kind"] == "taken_over_dead"]
    assert taken == [], "a paused node was taken for a dead one"
    # Renewed at most a third of a TTL before the stop: expired no sooner than 2/3 TTL after.
    assert moved_ms - stopped_ms >= ttl_ms * 2 // 3


def test_kill_9_moves_a_leaders_shards_within_ttl_plus_1s_without_the_fast_path(
    redis_url: str, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    with two_nodes(redis_url, topic, tmp_path, {**SETTINGS, "fast_failover": 0}) as (a, b):
        _kill_9_within_ttl_plus_1s(a, b, redis_url, redis_sync, topic)


def _kill_9_within_ttl_plus_1s(
    a: Node, b: Node, redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    split = wait_split(redis_sync, topic)
    ids = enqueue_spread(redis_url, topic, 3000, start_s=0.5, span_s=6.0)
    start = redis_ms(redis_sync)
    eventually_sync(lambda: redis_ms(redis_sync) > start + 2000, timeout_s=10, what="2 s")
    killed_ms = redis_ms(redis_sync)
    a.signal(signal.SIGKILL)
    a.proc.wait()
    records = wait_all_fired(redis_sync, topic, ids)

    summary = summarize(records, ids)
    assert (summary["missing"], summary["duplicates"], summary["early"]) == (0, 0, 0)
    a_shards = {s for s, holder in split.items() if holder == a.node_id}
    late = [
        f
        for f in records
        if shard_of(f.job_id, SHARDS) in a_shards
        and f.due_ms >= killed_ms
        and f.entry_ms > max(f.due_ms + JITTER_MS, killed_ms + TTL_MS + 1000)
    ]
    assert not late, f"{len(late)} jobs of the dead node's shards fired later than TTL + 1 s"
    assert set(holders(redis_sync, topic).values()) == {b.node_id}


def test_sigstopped_leader_emits_nothing_for_the_shards_it_lost(
    nodes: tuple[Node, Node], redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    a, b = nodes
    split = wait_split(redis_sync, topic)
    a_shards = {s for s, holder in split.items() if holder == a.node_id}
    ids = enqueue_spread(redis_url, topic, 4000, start_s=0.5, span_s=7.0)
    start = redis_ms(redis_sync)
    eventually_sync(lambda: redis_ms(redis_sync) > start + 1500, timeout_s=10, what="1.5 s")
    a.signal(signal.SIGSTOP)
    stopped_ms = redis_ms(redis_sync)
    eventually_sync(
        lambda: set(holders(redis_sync, topic).values()) == {b.node_id},
        timeout_s=20,
        what="node b to take every shard",
    )
    a.signal(signal.SIGCONT)
    records = wait_all_fired(redis_sync, topic, ids)
    a.finish()
    b.finish()

    summary = summarize(records, ids)
    assert (summary["missing"], summary["duplicates"], summary["early"]) == (0, 0, 0)
    assert emitted_while_lost(a.events(), stopped_ms, a_shards) == {}


def test_sigstopped_leader_cannot_emit_once_its_leases_are_taken(
    redis_url: str, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    """The fence itself: after SIGCONT the node's wheel holds overdue jobs nobody has
    emitted, and the leases belong to someone else. It must emit none of them."""
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, SHARDS)
    node = Node(redis_url, topic, "node-a", tmp_path / "a.jsonl")
    try:
        eventually_sync(
            lambda: set(holders(redis_sync, topic).values()) == {"node-a"},
            timeout_s=20,
            what="the node to lead every shard",
        )
        ids = enqueue_spread(redis_url, topic, 1000, start_s=1.5, span_s=2.0)
        eventually_sync(lambda: len(node.events()) == SHARDS, timeout_s=5, what="start events")
        eventually_sync(
            lambda: all(redis_sync.get(k.horizon) for k in all_shards(topic, SHARDS)),
            timeout_s=5,
            what="the window to be preloaded",
        )
        node.signal(signal.SIGSTOP)
        stopped_ms = redis_ms(redis_sync)
        eventually_sync(
            lambda: set(holders(redis_sync, topic).values()) == {None},
            timeout_s=10,
            what="the stopped node's leases to expire",
        )
        for keys in all_shards(topic, SHARDS):  # another leader takes over (and is slow)
            assert redis_sync.set(keys.lease, "thief", px=60_000, nx=True)
        eventually_sync(
            lambda: redis_ms(redis_sync) > stopped_ms + 4000,
            timeout_s=10,
            what="every job to be overdue",
        )
        node.signal(signal.SIGCONT)
        eventually_sync(
            lambda: sum(e["kind"] == "lost" for e in node.events()) == SHARDS,
            timeout_s=10,
            what="the node to notice it lost every shard",
        )
        after_stop = [f for f in fired(redis_sync, topic) if f.entry_ms >= stopped_ms]
        assert after_stop == [], f"the deposed leader emitted {len(after_stop)} jobs"
        assert [e for e in node.events() if e["kind"] == "emitted"] == []

        for keys in all_shards(topic, SHARDS):  # the slow leader goes away: all fire, once
            redis_sync.delete(keys.lease)
        records = wait_all_fired(redis_sync, topic, ids)
    finally:
        node.finish()
    summary = summarize(records, ids)
    assert (summary["missing"], summary["duplicates"], summary["early"]) == (0, 0, 0)


@pytest.mark.both_servers  # the server killed -9 and restarted (AOF)
async def test_scheduler_rides_out_a_server_crash_and_restart(
    server_binary: ServerBinary, tmp_path: Path
) -> None:
    """kill -9 of Redis itself (AOF, fsync always) while a node fires: after the restart the
    node reconnects, reloads its scripts and fires every job once, none early."""
    with dedicated_server(
        server_binary, appendonly=True, extra_args=["--appendfsync", "always"]
    ) as srv:
        topic = "restart"
        async with AsyncClient.from_url(srv.url) as client:
            admin = AsyncAdmin.of(client)
            await admin.create_topic(topic, SHARDS)
            node = Scheduler.from_url(
                srv.url, [topic], lease_ttl_ms=3000, preload_interval_ms=200, sweep_grace_ms=500
            )
            await node.start()
            try:
                ids = await client.enqueue_many(
                    topic, [EnqueueItem(payload=i, delay=0.5 + 4.0 * i / 2000) for i in range(2000)]
                )
                await asyncio.sleep(1.5)  # the fault's timing, not a synchronisation
                await asyncio.to_thread(srv.kill)
                await asyncio.sleep(1.0)  # one second without Redis
                await asyncio.to_thread(srv.restart)
                r = redis.Redis.from_url(srv.url)
                try:
                    records = await asyncio.to_thread(wait_all_fired, r, topic, ids)
                finally:
                    r.close()
            finally:
                await node.stop()
    summary = summarize(records, ids)
    assert (summary["missing"], summary["duplicates"], summary["early"]) == (0, 0, 0)


def test_a_schedule_runs_each_occurrence_once_when_the_leader_of_its_home_dies(
    nodes: tuple[Node, Node], redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    split = wait_split(redis_sync, topic)
    start = redis_ms(redis_sync) + 1000
    runs = [f"beat@{start + 200 * k}" for k in range(41)]  # every 200 ms for 8 s
    with Admin.from_url(redis_url) as admin:
        admin.schedule(
            "beat", topic, 0, every_ms=200, start=start / 1000, end=(start + 8000) / 1000
        )
    victim = next(n for n in nodes if n.node_id == split[shard_of("beat", SHARDS)])
    eventually_sync(lambda: redis_ms(redis_sync) > start + 2000, timeout_s=10, what="2 s of runs")
    victim.signal(signal.SIGKILL)
    victim.proc.wait()
    records = wait_all_fired(redis_sync, topic, runs)

    summary = summarize(records, runs)
    assert (summary["missing"], summary["duplicates"], summary["early"]) == (0, 0, 0)
    assert sorted(f.job_id for f in records) == sorted(runs)
    assert set(holders(redis_sync, topic).values()) == {
        next(n for n in nodes if n is not victim).node_id
    }


# --- a live leader cut off Redis: the failover grace -------------------------------------------

GRACE_MS = 1000
CUT_SETTINGS = {
    "check_interval_ms": 100,
    "failover_grace_ms": GRACE_MS,
    "failure_pause_max_ms": 200,  # back within a pause of the proxy's refusal ending
    "preload_interval_ms": 200,
    "sweep_grace_ms": 3000,
}
BLACKOUT_MS = 300  # node a off Redis: three of node b's counts, well within the grace


@contextlib.contextmanager
def a_behind_a_proxy(
    server: EmbeddedServer, topic: str, out: Path
) -> Iterator[tuple[Node, Node, ProxyThread]]:
    """Node a reaches the server only through a proxy the test cuts; node b directly."""
    with Admin.from_url(server.url) as admin:
        admin.create_topic(topic, SHARDS)
    with ProxyThread(server.port) as proxy:
        via = f"redis://127.0.0.1:{proxy.port}"
        a = Node(via, topic, "node-a", out / "a.jsonl", CUT_SETTINGS)
        b = Node(server.url, topic, "node-b", out / "b.jsonl", CUT_SETTINGS)
        try:
            yield a, b, proxy
        finally:
            a.finish()
            b.finish()


def split_and_watched(
    url: str, r: redis.Redis, topic: str
) -> tuple[dict[int, str | None], list[str]]:
    """Once the nodes share the shards, have registered their liveness connections and have
    counted each other's a few times, with jobs falling due from 0.5 s on: (the split, ids)."""
    split = wait_split(r, topic)
    eventually_sync(
        lambda: all(r.get(k.followed) for k in all_shards(topic, SHARDS)),
        timeout_s=10,
        what="both nodes to register their liveness connections",
    )
    ids = enqueue_spread(url, topic, 3000, start_s=0.5, span_s=5.0)
    start = redis_ms(r)
    eventually_sync(lambda: redis_ms(r) > start + 500, timeout_s=10, what="a few counts")
    return split, ids


def emitted_while_lost(
    events: list[dict[str, Any]], since_ms: int, shards: set[int]
) -> dict[int, list[str]]:
    """The shards of `shards` a node emitted on after `since_ms` before it took them again
    (a node that lost its leases may win them back from the rebalance, and then emit), with
    the node's event kinds on each; a node that never noticed the loss counts too."""
    wrong: dict[int, list[str]] = {}
    for shard in shards:
        mine = [e["kind"] for e in events if int(e["t"]) > since_ms and e["shard"] == shard]
        before_retaken = mine[: mine.index("acquired")] if "acquired" in mine else mine
        if "lost" not in mine or "emitted" in before_retaken:
            wrong[shard] = mine
    return wrong


def marks(r: redis.Redis, topic: str, shards: set[int]) -> list[str | None]:
    """The liveness marks of `shards`: the leader's token, "token ms" once seen gone."""
    values = [r.get(all_shards(topic, SHARDS)[s].followed) for s in sorted(shards)]
    return [v.decode() if v else None for v in values]


def cut_off(r: redis.Redis, proxy: ProxyThread) -> int:
    """Close every connection of the node behind `proxy` and refuse new ones; the Redis ms."""
    proxy.refuse(True)
    proxy.cut()
    return redis_ms(r)


def test_a_live_leader_cut_off_redis_keeps_its_leases_when_back_within_the_grace(
    server: EmbeddedServer, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    """Every connection of a live leader is cut (its liveness connection with them) and it
    cannot reconnect for three of the other node's counts: the other node sees its wake
    channels empty and starts their grace, the leader reconnects and registers again within
    it, and it keeps every lease, then and at each later count; no job fires twice."""
    with a_behind_a_proxy(server, topic, tmp_path) as (a, b, proxy):
        split, ids = split_and_watched(server.url, redis_sync, topic)
        a_shards = {s for s, holder in split.items() if holder == a.node_id}

        def kept(done: Callable[[], bool]) -> Callable[[], bool]:
            """`done`, checking at each poll that node a still leads its shards."""

            def check() -> bool:
                assert holders(redis_sync, topic) == split, "a live leader lost a lease"
                return done()

            return check

        cut_ms = cut_off(redis_sync, proxy)
        eventually_sync(
            kept(lambda: all(" " in (m or "") for m in marks(redis_sync, topic, a_shards))),
            timeout_s=5,
            what="node b to see node a's liveness connection gone (its grace started)",
        )
        eventually_sync(
            kept(lambda: redis_ms(redis_sync) > cut_ms + BLACKOUT_MS), timeout_s=5, what="blackout"
        )
        proxy.refuse(False)
        eventually_sync(
            kept(lambda: set(marks(redis_sync, topic, a_shards)) == {a.node_id}),
            timeout_s=5,  # within the grace, or node b frees its leases: kept() fails
            what="node a to reconnect and register again",
        )
        # Two graces and more: a stamp that outlived the re-registration would free them.
        eventually_sync(
            kept(lambda: redis_ms(redis_sync) > cut_ms + 3 * GRACE_MS),
            timeout_s=10,
            what="three graces from the cut",
        )
        records = wait_all_fired(redis_sync, topic, ids)
        end_ms = redis_ms(redis_sync)
        a.finish()
        b.finish()
    moves = ("acquired", "lost", "released", "taken_over_dead")
    for node in (a, b):
        moved = [e for e in node.events() if e["kind"] in moves and cut_ms <= int(e["t"]) < end_ms]
        assert moved == [], f"{node.node_id}'s leases moved"
    summary = summarize(records, ids)
    assert (summary["missing"], summary["duplicates"], summary["early"]) == (0, 0, 0)


def test_a_leader_cut_off_redis_then_paused_loses_its_leases_after_the_grace_safely(
    server: EmbeddedServer, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    """The rule's other side: cut off Redis and then paused (SIGSTOP), a leader cannot
    register again, so once the grace is over its leases are freed, long before their TTL;
    resumed, it finds them lost and emits nothing for those shards (fenced)."""
    with a_behind_a_proxy(server, topic, tmp_path) as (a, b, proxy):
        split, ids = split_and_watched(server.url, redis_sync, topic)
        a_shards = {s for s, holder in split.items() if holder == a.node_id}
        cut_ms = cut_off(redis_sync, proxy)
        a.signal(signal.SIGSTOP)
        proxy.refuse(False)
        moved_ms = eventually_sync(
            lambda: (
                redis_ms(redis_sync)
                if set(holders(redis_sync, topic).values()) == {b.node_id}
                else None
            ),
            timeout_s=10,
            what="node b to take node a's shards",
        )
        a.signal(signal.SIGCONT)
        records = wait_all_fired(redis_sync, topic, ids)
        eventually_sync(
            lambda: sum(e["kind"] == "lost" for e in a.events()) == len(a_shards),
            timeout_s=10,
            what="node a to notice it lost its shards",
        )
        a.finish()
        b.finish()
    taken = [e for e in b.events() if e["kind"] == "taken_over_dead"]
    assert sorted(int(e["shard"]) for e in taken) == sorted(a_shards)
    assert GRACE_MS <= moved_ms - cut_ms < TTL_DEFAULT_MS // 2, "freed by the grace, not the TTL"
    summary = summarize(records, ids)
    assert (summary["missing"], summary["duplicates"], summary["early"]) == (0, 0, 0)
    assert emitted_while_lost(a.events(), moved_ms, a_shards) == {}


# --- what tells a dead process from a live one: its named connections -----------------------


@pytest.mark.both_servers  # CLIENT SETNAME, CLIENT LIST
@pytest.mark.cluster_too
async def test_a_nodes_connections_carry_its_name_on_the_server_of_each_shard_it_leads(
    redis_url: str, redis_sync: redis.Redis, topic: str
) -> None:
    """A node made from a URL names its connections after its id (a digest where a name
    cannot hold the id), and `leases.connected`, sent to each shard's own server, finds them
    there while it runs and nowhere once it has stopped (sync and async executors)."""
    with Admin.from_url(redis_url) as admin:
        admin.create_topic(topic, SHARDS)
    node = Scheduler.from_url(redis_url, [topic], node_id="a node id with spaces")
    name = leases.node_client_name(node.node_id)
    assert name.startswith(leases.NAME_PREFIX) and " " not in name
    assert leases.node_client_name("host:1:abc") == leases.NAME_PREFIX + "host:1:abc"
    executor = connect.async_executor(redis_url, {}, None)
    looks = [leases.connected(keys, {name, "another"}) for keys in all_shards(topic, SHARDS)]
    await node.start()
    try:

        async def leading() -> bool:
            return len(node.leads) == SHARDS

        await eventually(leading, timeout_s=20, what="the node to lead every shard")
        assert await executor.run(looks) == [{name}] * SHARDS
        assert SyncExecutor(redis_sync).run(looks) == [{name}] * SHARDS
    finally:
        await node.stop()
    assert await executor.run(looks) == [set()] * SHARDS
    await executor.aclose()


@pytest.mark.both_servers  # ACL
async def test_a_node_whose_user_may_not_name_connections_runs_with_them_unnamed(
    server_binary: ServerBinary, topic: str
) -> None:
    """An ACL without ``client|setname`` (the rule before names): the node connects and leads
    all the same, its connections unnamed, so `connected` finds none of them."""
    with dedicated_server(server_binary) as server:
        admin = redis.Redis.from_url(server.url)
        admin.execute_command(
            "ACL", "SETUSER", "nodes", "on", ">secret", "~*", "&*", "+@all", "-client|setname"
        )
        url = f"redis://nodes:secret@127.0.0.1:{server.port}/0"
        with Admin.from_url(url) as topics:
            topics.create_topic(topic, SHARDS)
        node = Scheduler.from_url(url, [topic], node_id="unnamed")
        await node.start()
        try:

            async def leading() -> bool:
                return len(node.leads) == SHARDS

            await eventually(leading, timeout_s=20, what="the node to lead every shard")
            name = leases.node_client_name("unnamed")
            looked = SyncExecutor(admin).run(
                [leases.connected(all_shards(topic, SHARDS)[0], {name})]
            )
            assert looked == [set()]
        finally:
            await node.stop()
            admin.close()


# --- a live leader under CPU load whose liveness connection alone is killed ------------------

SPINNERS = 4  # busy processes: two a core on a 2-core machine
KILLS = 20


@contextlib.contextmanager
def cpu_load(seconds: float, processes: int = SPINNERS) -> Iterator[None]:
    """`processes` busy loops, each ending by itself after `seconds` (and killed on exit)."""
    spin = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(processes)]
    try:
        yield
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


def servers(r: redis.Redis) -> list[Any]:
    """The targets to ask a per-server command: each node of a cluster, else None (one)."""
    if isinstance(r, redis.cluster.RedisCluster):
        return list(r.get_nodes())
    return [None]


def subscriptions_of(r: redis.Redis, pid: int) -> list[tuple[Any, int]]:
    """(server, client id) of each pub/sub connection of process `pid` on every server,
    told by the address it connects from (CLIENT LIST's ``addr``)."""
    ports = {c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp") if c.laddr}
    found = []
    for target in servers(r):
        listed = r.client_list() if target is None else r.client_list(target_nodes=target)
        for client in listed:
            port = int(str(client["addr"]).rsplit(":", 1)[1])
            if port in ports and int(client.get("ssub", 0)) > 0:
                found.append((target, int(client["id"])))
    return found


def kill_client(r: redis.Redis, target: Any, client_id: int) -> None:
    if target is None:
        r.client_kill_filter(_id=str(client_id))
    else:
        r.execute_command("CLIENT KILL", "ID", client_id, target_nodes=target)


@pytest.mark.cluster_too
def test_a_busy_live_leader_whose_liveness_connection_is_killed_keeps_its_shards(
    redis_url: str, redis_sync: redis.Redis, topic: str, tmp_path: Path
) -> None:
    """With both cores oversubscribed by busy processes, the subscription connection of a
    live leader (and nothing else of it) is killed on the server again and again: its other
    connections are there all along, so the other node never takes its shards (the grace
    alone, 100 ms, is shorter than a starved process's turn), and every job fires once, on
    time."""
    # A lease far longer than the run: node a, starved at nice 19 (on a loaded CI machine
    # the suite's own workers compete too), renews late but within it, so a move of its
    # shards could only be the failover's look taking a live process for a dead one.
    with two_nodes(redis_url, topic, tmp_path, {"lease_ttl_ms": 60_000}) as (a, b):
        split = wait_split(redis_sync, topic)
        a_shards = {s for s, holder in split.items() if holder == a.node_id}
        eventually_sync(
            lambda: all(redis_sync.get(k.followed) for k in all_shards(topic, SHARDS)),
            timeout_s=10,
            what="both nodes to register their liveness connections",
        )
        ids = enqueue_spread(redis_url, topic, 3000, start_s=0.5, span_s=KILLS * 0.6)
        first_ms, killed = redis_ms(redis_sync), 0
        os.setpriority(os.PRIO_PROCESS, a.proc.pid, 19)  # it waits its turn behind the spinners
        with cpu_load(seconds=KILLS * 2 + 20):
            for _ in range(KILLS):
                # Node a, at nice 19 behind the spinners and the suite's own workers, may
                # take many seconds of wall time to reconnect: waited for, not asserted (what
                # is asserted is that its shards stay, below).
                found = eventually_sync(
                    lambda: subscriptions_of(redis_sync, a.proc.pid),
                    timeout_s=60,
                    what="node a's subscription",
                )
                for target, client_id in found:
                    kill_client(redis_sync, target, client_id)
                    killed += 1
                since = redis_ms(redis_sync)
                eventually_sync(  # a few of node b's counts, and a grace, and more
                    lambda since=since: redis_ms(redis_sync) > since + 500,
                    timeout_s=10,
                    what="0.5 s",
                )
                assert holders(redis_sync, topic) == split, "a live leader lost its shards"
            records = wait_all_fired(redis_sync, topic, ids)
        moves = ("acquired", "lost", "released", "taken_over_dead")
        moved = [e for n in (a, b) for e in n.events() if e["kind"] in moves]
    assert killed >= KILLS
    assert [e for e in moved if int(e["t"]) >= first_ms] == [], f"node a led {a_shards}"
    summary = summarize(records, ids)
    assert (summary["missing"], summary["duplicates"], summary["early"]) == (0, 0, 0)
