"""The lease keeper's step against scripted replies and a manual clock: it takes its share,
renews on the renew interval (and first of all after a failed step), drops a lease found
taken, hands shards over to a joining node, and leaves when stopped."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, ResponseError

from tests.support.node_context import START_MS, TOKEN, TOPIC, NodeParts, keys
from tests.support.waiting import until
from wheelq.core.keys import MEMBERSHIP_KEY, Registry
from wheelq.scheduler.lease_keeper import LeaseKeeper
from wheelq.store.call import Call
from wheelq.store.leases import LeaseAttempt, Reap, Reaped, node_client_name

SHARDS = 2
TTL_MS = 3000  # renewed every 1000 ms; checked every 250 ms
GRACE_MS = 100  # the default failover_grace_ms: other leaders are counted every 100 ms


def acquired(call: Call[Any]) -> LeaseAttempt:
    return LeaseAttempt(True, True, START_MS, TOKEN)


class Cluster:
    """The replies of a Redis in which `nodes` are alive and `taken` leases are others'."""

    def __init__(self, parts: NodeParts) -> None:
        self.nodes = [TOKEN]
        self.taken: set[str] = set()
        self.renewed: dict[str, bool] = {}
        self.version = 0
        """The membership counter (`MEMBERSHIP_KEY`)."""
        parts.executor.answer("HGETALL", lambda call: Registry({TOPIC: SHARDS}, {}))
        parts.executor.answer("ZADD", lambda call: 1)
        parts.executor.answer("ZREMRANGEBYSCORE", lambda call: 0)
        parts.executor.answer(
            "ZRANGE", lambda call: [(n, parts.clock.now_ms() + TTL_MS) for n in self.nodes]
        )
        parts.executor.answer("ZREM", lambda call: 1)
        parts.executor.answer("INCR", lambda call: self.bump())
        parts.executor.answer("GET", self.get)
        parts.executor.answer("lease_acquire", acquired)
        parts.executor.answer("lease_renew", lambda call: self.renewed.get(call.keys[0], True))
        # A server with SET ... IFEQ (Redis >= 8.4, Valkey >= 8.1): one command per renewal.
        parts.executor.answer("SET", lambda call: self.renewed.get(str(call.command[1]), True))
        parts.executor.answer("lease_release", lambda call: True)
        self.subscribed: set[str] = set()
        """Wake channels with a subscriber (the leader of a taken lease is alive)."""
        self.dead: set[str] = set()
        """Nodes whose process died: `lease_reap` frees the leases they hold after the grace."""
        self.gone_since: dict[str, int] = {}
        """The grace `lease_reap` started for a lease (its stamp in the mark)."""
        parts.executor.answer(
            "lease_watch", lambda call: [int(ch in self.subscribed) for ch in call.args]
        )
        parts.executor.answer("lease_reap", self.reap)
        self.connected: set[str] = {node_client_name(TOKEN), node_client_name("other")}
        """The names of the processes with a connection to the server (CLIENT LIST)."""
        parts.executor.answer("CLIENT", lambda call: call.parse(self.client_list()))
        self._clock = parts.clock

    def client_list(self) -> bytes:
        return "".join(
            f"id={i} addr=127.0.0.1:{i} name={n} age=1\n"
            for i, n in enumerate(sorted(self.connected))
        ).encode()

    def reap(self, call: Call[Any]) -> Reap:
        lease, channel, grace_ms = call.keys[0], call.args[0], int(call.args[1])
        if lease not in self.taken:
            return Reap(Reaped.FREE, "")
        if channel in self.subscribed or "other" not in self.dead:
            self.gone_since.pop(lease, None)
            return Reap(Reaped.ALIVE, "other")
        now = self._clock.now_ms()
        since = self.gone_since.setdefault(lease, now)
        if now - since < grace_ms:
            return Reap(Reaped.GONE, "other", since + grace_ms - now)
        if call.args[2] != "other":  # not named gone by the caller: kept
            return Reap(Reaped.OVER, "other")
        self.taken.discard(lease)
        return Reap(Reaped.FREED, "other")

    def kill(self) -> None:
        """The other node's process dies: Redis drops its connections, its subscription too."""
        self.subscribed.clear()
        self.dead.add("other")
        self.connected.discard(node_client_name("other"))

    def bump(self) -> int:
        self.version += 1
        return self.version

    def get(self, call: Call[Any]) -> object:
        if call.command[1] == MEMBERSHIP_KEY:
            return self.version
        return b"other" if call.command[1] in self.taken else None

    def join(self, node: str) -> None:
        """Another node joins: it heartbeats, then raises the counter."""
        self.nodes.append(node)
        self.bump()


@pytest.fixture
def parts() -> NodeParts:
    return NodeParts.make({"lease_ttl_ms": TTL_MS})


def names(round_: list[Call[Any]]) -> list[str]:
    return [c.script or str(c.command[0]) for c in round_]


def renewed_leases(parts: NodeParts) -> list[str]:
    """The lease key of every renewal sent (``SET ... IFEQ``), in order."""
    return [str(c.command[1]) for c in parts.executor.sent("SET")]


def keeper(parts: NodeParts, changes: list[int] | None = None) -> LeaseKeeper:
    return LeaseKeeper(
        parts.ctx, TOKEN, None, (lambda: changes.append(1)) if changes is not None else lambda: None
    )


async def test_takes_every_shard_when_alone_and_renews_each_renew_interval(
    parts: NodeParts,
) -> None:
    Cluster(parts)
    changes: list[int] = []
    leases = keeper(parts, changes)
    assert await leases.step() == pytest.approx(0.25)
    assert sorted(lead.keys.shard for lead in parts.leads.all()) == [0, 1]
    assert parts.kinds() == ["acquired", "acquired"] and changes
    assert [c.keys[0] for c in parts.executor.sent("lease_acquire")] == [
        keys(0).lease,
        keys(1).lease,
    ]
    (heartbeat,) = parts.executor.sent("ZADD")
    assert heartbeat.command[2:] == (START_MS + TTL_MS, TOKEN)

    parts.clock.advance(250)
    await leases.step()
    assert renewed_leases(parts) == [], "not due before the renew interval"
    parts.clock.advance(750)
    await leases.step()
    assert renewed_leases(parts) == [keys(0).lease, keys(1).lease]
    (renewal, _) = parts.executor.sent("SET")
    assert renewal.command == ("SET", keys(0).lease, TOKEN, "IFEQ", TOKEN, "PX", TTL_MS)


async def test_renews_first_after_a_failed_step(parts: NodeParts) -> None:
    Cluster(parts)
    leases = keeper(parts)
    await leases.step()
    parts.clock.advance(250)
    parts.executor.fail_next(RedisConnectionError("Connection refused"))
    with pytest.raises(RedisConnectionError):
        await leases.step()
    parts.clock.advance(10)  # far from the next renew interval
    before = len(parts.executor.rounds)
    await leases.step()
    assert names(parts.executor.rounds[before]) == ["SET", "SET"]
    assert len(parts.leads) == SHARDS


async def test_a_failure_after_the_renewal_still_renews_first_next_time(parts: NodeParts) -> None:
    Cluster(parts)
    leases = keeper(parts)
    await leases.step()
    parts.clock.advance(1000)
    parts.executor.answer("HGETALL", lambda call: RedisConnectionError("Connection reset"))
    with pytest.raises(RedisConnectionError):
        await leases.step()
    renewals = len(renewed_leases(parts))
    Cluster(parts)
    parts.clock.advance(10)
    await leases.step()
    assert len(renewed_leases(parts)) == renewals + SHARDS


async def test_a_lease_found_taken_is_dropped_at_once(parts: NodeParts) -> None:
    cluster = Cluster(parts)
    changes: list[int] = []
    leases = keeper(parts, changes)
    await leases.step()
    cluster.renewed[keys(1).lease] = False
    cluster.taken.add(keys(1).lease)
    parts.clock.advance(1000)
    await leases.step()
    assert [lead.keys.shard for lead in parts.leads.all()] == [0]
    assert parts.kinds()[-1] == "lost"


async def test_hands_over_its_least_preferred_shards_when_a_node_joins(parts: NodeParts) -> None:
    cluster = Cluster(parts)
    leases = keeper(parts)
    await leases.step()
    cluster.join("node-2")
    parts.clock.advance(250)
    await leases.step()
    assert len(parts.leads) == 1
    (release,) = parts.executor.sent("lease_release")
    assert release.keys[0] not in {lead.keys.lease for lead in parts.leads.all()}
    assert parts.kinds()[-1] == "released"


async def test_release_all_releases_every_lease_and_leaves(parts: NodeParts) -> None:
    Cluster(parts)
    leases = keeper(parts)
    await leases.step()
    assert await leases.release_all() == SHARDS
    assert len(parts.leads) == 0
    assert names(parts.executor.rounds[-2]) == ["lease_release", "lease_release", "ZREM"]
    assert names(parts.executor.rounds[-1]) == ["INCR"], "then: the others take the shards"


async def test_a_failing_keeper_shows_it_and_recovers_holding_its_leases(
    parts: NodeParts,
) -> None:
    Cluster(parts)
    leases = keeper(parts)
    await leases.start()
    try:
        await until(lambda: len(parts.leads) == SHARDS, what="both leases")
        slots = {lead.slot for lead in parts.leads.all()}
        parts.executor.answer("HGETALL", lambda call: RedisConnectionError("Connection reset"))
        parts.clock.advance(250)
        leases.wake()
        await until(lambda: leases.failures >= 2, what="failed steps")
        assert leases.status()["last_error"] == "ConnectionError: Connection reset"
        Cluster(parts)
        await until(lambda: leases.failures == 0, what="a step that got through")
        assert {lead.slot for lead in parts.leads.all()} == slots, "the same leads throughout"
        assert "lost" not in parts.kinds()
    finally:
        await leases.stop()


async def test_renews_by_script_once_the_server_refuses_set_ifeq(parts: NodeParts) -> None:
    cluster = Cluster(parts)
    parts.executor.answer("SET", lambda call: ResponseError("ERR syntax error"))
    leases = keeper(parts)
    await leases.step()
    parts.clock.advance(1000)
    await leases.step()
    assert [c.keys[0] for c in parts.executor.sent("lease_renew")] == [
        keys(0).lease,
        keys(1).lease,
    ], "the same renewal, by script"
    assert len(parts.leads) == SHARDS, "a refused SET is no lost lease"
    refused = len(parts.executor.sent("SET"))
    cluster.renewed[keys(1).lease] = False
    cluster.taken.add(keys(1).lease)
    parts.clock.advance(1000)
    await leases.step()
    assert len(parts.executor.sent("SET")) == refused, "not asked again"
    assert [lead.keys.shard for lead in parts.leads.all()] == [0], "taken: dropped"


async def test_heartbeats_with_the_renewals_and_reads_node_sets_only_when_they_may_change(
    parts: NodeParts,
) -> None:
    cluster = Cluster(parts)
    leases = keeper(parts)
    await leases.step()
    assert len(parts.executor.sent("ZADD")) == 1
    assert len(parts.executor.sent("INCR")) == 1, "joined: the others read the node set"
    parts.clock.advance(250)
    await leases.step()  # our own raise of the counter: read once more
    parts.clock.advance(250)
    reads = len(parts.executor.sent("ZRANGE"))
    await leases.step()
    assert len(parts.executor.sent("ZRANGE")) == reads, "nothing moved: no read"
    assert len(parts.executor.sent("ZADD")) == 1, "no heartbeat before the renew interval"
    cluster.join("joiner")
    parts.clock.advance(250)
    await leases.step()
    assert len(parts.executor.sent("ZRANGE")) == reads + 1, "the counter moved: read"
    assert len(parts.leads) == 1, "a node that joined gets its share at the next check"
    parts.clock.advance(TTL_MS // 3)
    await leases.step()
    (_, beat) = parts.executor.sent("ZADD")
    assert beat.command[2:] == (parts.clock.now_ms() + TTL_MS, TOKEN)


async def test_reads_a_node_set_again_when_a_known_node_heartbeat_runs_out(
    parts: NodeParts,
) -> None:
    cluster = Cluster(parts)
    cluster.nodes = [TOKEN, "peer"]
    leases = keeper(parts)
    await leases.step()
    parts.clock.advance(250)
    await leases.step()
    assert len(parts.leads) == 1, "half the shards: the peer has the other"
    cluster.nodes = [TOKEN]  # the peer died: its heartbeat runs out, nobody raises the counter
    reads = len(parts.executor.sent("ZRANGE"))
    parts.clock.advance(TTL_MS - 500)
    await leases.step()
    assert len(parts.executor.sent("ZRANGE")) == reads, "its heartbeat has not run out yet"
    parts.clock.advance(500)
    await leases.step()
    assert len(parts.executor.sent("ZRANGE")) == reads + 1
    assert len(parts.leads) == SHARDS, "its shards taken over"


async def test_reads_every_node_set_every_check_when_the_acl_refuses_the_counter(
    parts: NodeParts,
) -> None:
    cluster = Cluster(parts)
    refused = NoPermissionError("NOPERM No permissions to access a key")
    parts.executor.answer(
        "GET", lambda call: refused if call.command[1] == MEMBERSHIP_KEY else cluster.get(call)
    )
    leases = keeper(parts)
    for _ in range(3):
        await leases.step()
        parts.clock.advance(250)
    assert len(parts.executor.sent("ZRANGE")) == 3, "every check, as without the counter"
    assert parts.executor.sent("INCR") == [], "nor raised"
    assert len(parts.leads) == SHARDS


# --- fast failover -----------------------------------------------------------------------------


async def joined_by_other(parts: NodeParts, cluster: Cluster) -> LeaseKeeper:
    """This node leads shard 0; "other", alive and subscribed, leads shard 1. Two checks:
    the first learns the topics, the second counts their subscribers."""
    cluster.taken.add(keys(1).lease)
    cluster.subscribed.add(keys(1).wake_channel)
    cluster.nodes.append("other")
    leases = keeper(parts)
    await leases.step()
    parts.clock.advance(250)
    await leases.step()
    return leases


async def test_a_dead_leaders_shard_is_freed_once_the_grace_is_over_and_taken_at_once(
    parts: NodeParts,
) -> None:
    cluster = Cluster(parts)
    leases = await joined_by_other(parts, cluster)
    assert [lead.keys.shard for lead in parts.leads.all()] == [0]
    (watch,) = parts.executor.sent("lease_watch")
    assert watch.args == [keys(1).wake_channel], "only the shards others lead are watched"
    cluster.kill()
    cluster.nodes.remove("other")
    parts.clock.advance(250)
    wait_s = await leases.step()
    assert [c.keys[0] for c in parts.executor.sent("lease_reap")] == [keys(1).lease]
    assert parts.executor.sent("ZREM") == [], "gone for less than the grace: not freed yet"
    assert parts.executor.sent("CLIENT") == [], "its connections are looked for at the end"
    assert [lead.keys.shard for lead in parts.leads.all()] == [0]
    assert wait_s == pytest.approx(GRACE_MS / 1000), "asked again when the grace ends"
    parts.clock.advance(GRACE_MS)
    await leases.step()
    (looked,) = parts.executor.sent("CLIENT")
    assert looked.route == keys(1).lease, "on the shard's own server"
    assert [c.args[2] for c in parts.executor.sent("lease_reap")] == ["", "other"]
    assert [c.command[1:] for c in parts.executor.sent("ZREM")] == [
        (f"wheelq:nodes:{TOPIC}", "other")
    ]
    assert parts.executor.sent("INCR"), "the other nodes count without it at their next check"
    assert sorted(lead.keys.shard for lead in parts.leads.all()) == [0, 1]
    assert parts.kinds()[-2:] == ["taken_over_dead", "acquired"]


async def test_a_shard_never_seen_subscribed_or_still_subscribed_is_not_reaped(
    parts: NodeParts,
) -> None:
    cluster = Cluster(parts)
    cluster.taken.add(keys(1).lease)  # led by a node not subscribed (yet, or ever)
    cluster.nodes.append("other")
    leases = keeper(parts)
    for _ in range(3):
        await leases.step()
        parts.clock.advance(250)
    assert parts.executor.sent("lease_reap") == []
    cluster.subscribed.add(keys(1).wake_channel)
    await leases.step()
    parts.clock.advance(250)
    cluster.dead.add("other")  # its lease says dead, but the count has not fallen: alive
    await leases.step()
    assert parts.executor.sent("lease_reap") == []
    assert [lead.keys.shard for lead in parts.leads.all()] == [0]


async def test_a_leader_whose_count_fell_but_who_is_alive_keeps_its_lease(
    parts: NodeParts,
) -> None:
    cluster = Cluster(parts)
    leases = await joined_by_other(parts, cluster)
    cluster.subscribed.clear()  # a blip: the count fell, but the reap finds it unmarked/alive
    parts.clock.advance(250)
    await leases.step()
    assert len(parts.executor.sent("lease_reap")) == 1
    assert parts.executor.sent("ZREM") == [] and "taken_over_dead" not in parts.kinds()
    assert [lead.keys.shard for lead in parts.leads.all()] == [0]
    parts.clock.advance(250)
    await leases.step()
    assert len(parts.executor.sent("lease_reap")) == 1, "a shard is suspected once per fall"


async def test_a_leader_whose_liveness_connection_comes_back_within_the_grace_keeps_its_lease(
    parts: NodeParts,
) -> None:
    """Its connection killed, the other node's process reconnects before the grace is over:
    the reap at the grace's end finds it there, and nothing is freed."""
    cluster = Cluster(parts)
    leases = await joined_by_other(parts, cluster)
    cluster.subscribed.clear()
    cluster.dead.add("other")  # as far as the connection says
    parts.clock.advance(250)
    await leases.step()
    assert list(cluster.gone_since) == [keys(1).lease], "its grace started"
    cluster.subscribed.add(keys(1).wake_channel)  # back, registered again
    cluster.dead.discard("other")
    parts.clock.advance(GRACE_MS)
    await leases.step()
    assert len(parts.executor.sent("lease_reap")) == 2, "asked again at the grace's end"
    assert cluster.gone_since == {} and keys(1).lease in cluster.taken
    assert "taken_over_dead" not in parts.kinds()
    for _ in range(5):
        parts.clock.advance(GRACE_MS)
        await leases.step()
    assert len(parts.executor.sent("lease_reap")) == 2, "alive: not asked about again"
    assert [lead.keys.shard for lead in parts.leads.all()] == [0]


async def test_a_live_leader_whose_liveness_connection_alone_stays_gone_keeps_its_lease(
    parts: NodeParts,
) -> None:
    """Its subscription dropped and its process too starved to register again within the
    grace, the other node is still connected (CLIENT LIST names it): nothing is freed at the
    grace's end nor at any count after; once its process dies, the lease is freed at the next
    count, the grace long over."""
    cluster = Cluster(parts)
    leases = await joined_by_other(parts, cluster)
    cluster.subscribed.clear()
    cluster.dead.add("other")  # as far as the subscription says
    parts.clock.advance(250)
    await leases.step()
    for _ in range(10):
        parts.clock.advance(GRACE_MS)
        await leases.step()
    assert keys(1).lease in cluster.taken and "taken_over_dead" not in parts.kinds()
    looked = len(parts.executor.sent("CLIENT"))
    assert 5 <= looked <= 10, "looked for at each count once the grace is over"
    assert {c.args[2] for c in parts.executor.sent("lease_reap")} == {""}, "never named gone"
    cluster.connected.discard(node_client_name("other"))  # now its process dies
    cluster.nodes.remove("other")
    parts.clock.advance(GRACE_MS)
    await leases.step()
    assert keys(1).lease not in cluster.taken
    assert parts.kinds()[-2:] == ["taken_over_dead", "acquired"]


async def test_a_failed_look_frees_nothing_and_an_acl_refusing_it_leaves_the_grace_alone(
    parts: NodeParts, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = Cluster(parts)
    leases = await joined_by_other(parts, cluster)
    cluster.subscribed.clear()
    cluster.dead.add("other")  # its process alive as far as CLIENT LIST says
    parts.executor.answer("CLIENT", lambda call: RedisConnectionError("reset"))
    parts.clock.advance(250)
    await leases.step()
    parts.clock.advance(GRACE_MS)
    await leases.step()
    assert len(parts.executor.sent("CLIENT")) == 1 and keys(1).lease in cluster.taken
    parts.executor.answer("CLIENT", lambda call: NoPermissionError("no CLIENT"))
    parts.clock.advance(GRACE_MS)
    await leases.step()
    assert keys(1).lease not in cluster.taken, "the grace alone, as before looking"
    assert sum("cannot list clients" in r.message for r in caplog.records) == 1


async def test_without_fast_failover_nothing_is_watched() -> None:
    parts = NodeParts.make({"lease_ttl_ms": TTL_MS, "fast_failover": 0})
    cluster = Cluster(parts)
    leases = await joined_by_other(parts, cluster)
    cluster.subscribed.clear()
    cluster.dead.add("other")
    parts.clock.advance(250)
    await leases.step()
    assert parts.executor.sent("lease_watch") == parts.executor.sent("lease_reap") == []
    assert [lead.keys.shard for lead in parts.leads.all()] == [0]


async def test_an_acl_without_pubsub_turns_watching_off_once(
    parts: NodeParts, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = Cluster(parts)
    parts.executor.answer("lease_watch", lambda call: NoPermissionError("no PUBSUB"))
    leases = await joined_by_other(parts, cluster)
    parts.clock.advance(250)
    await leases.step()
    assert len(parts.executor.sent("lease_watch")) == 1
    assert sum("cannot count subscribers" in r.message for r in caplog.records) == 1
    assert [lead.keys.shard for lead in parts.leads.all()] == [0]
