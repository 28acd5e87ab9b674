"""Which shards a node leads (docs/architecture.md, "Leases and failover")."""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from wheelq.core.keys import MEMBERSHIP_KEY, Registry, ShardKeys, all_shards
from wheelq.runtime.service import Service
from wheelq.scheduler.led_shards import Lead, NodeContext
from wheelq.store import leases
from wheelq.store.call import Call
from wheelq.store.executor import Executor
from wheelq.store.topics import all_topics

log = logging.getLogger(__name__)

S = TypeVar("S")


def quota(node_id: str, live_nodes: Iterable[str], total_shards: int) -> int:
    """Shards `node_id` should lead among `live_nodes` (it counts itself in)."""
    members = sorted(set(live_nodes) | {node_id})
    base, extra = divmod(total_shards, len(members))
    return base + (1 if members.index(node_id) < extra else 0)


def preference(node_id: str, shard_name: str) -> int:
    """Rendezvous weight of a shard for a node: higher is preferred."""
    return zlib.crc32(f"{node_id}/{shard_name}".encode())


def rank(node_id: str, shards: Sequence[S], name: dict[S, str]) -> list[S]:
    return sorted(shards, key=lambda s: preference(node_id, name[s]), reverse=True)


class NodeSets:
    """The live nodes of each served topic, and when to read them again."""

    def __init__(self, node_id: str, refresh_ms: int) -> None:
        self._node_id = node_id
        self._refresh_ms = refresh_ms
        self._live: dict[str, list[str]] = {}
        self._next_ms: dict[str, int] = {}
        self._version: int | None = None

    def to_read(self, topics: Iterable[str], now_ms: int, version: int | None) -> list[str]:
        """Topics whose node set must be read, given the membership counter (None: all)."""
        if version is None or version != self._version:
            self._version = version
            return list(topics)
        return [t for t in topics if t not in self._live or now_ms >= self._next_ms[t]]

    def update(self, topic: str, members: list[tuple[str, int]], now_ms: int) -> None:
        """Note a read of `topic`'s live nodes: (node id, heartbeat expiry ms) pairs."""
        self._live[topic] = [node for node, _ in members]
        expiries = [expiry for node, expiry in members if node != self._node_id]
        self._next_ms[topic] = min([*expiries, now_ms + self._refresh_ms])

    def live(self, topic: str) -> list[str]:
        return self._live.get(topic, [])

    def forget(self, topics: Iterable[str]) -> None:
        for topic in topics:
            self._live.pop(topic, None)
            self._next_ms.pop(topic, None)

    def stale(self) -> None:
        """Read every node set at the next check (after a failed step)."""
        self._version = None


class CrashWatch:
    """Which shards led by other nodes lost their leader's process (docs/architecture.md,
    "Leases and failover").

    A leader subscribes to the wake channel of each shard it leads, on the shard's own
    server, and registers that subscription as its liveness connection (it marks the shard
    followed). Redis drops a dead process's connections at once (its operating system closed
    them), so every `interval_ms` a node counts the subscribers of every watched channel, one
    call per server, and a shard whose count fell to 0 since the count before is a suspect:
    `lease_reap.lua` starts its grace. Once the connection has stayed gone that long without
    the leader registering again, the node looks for the leader's other connections (CLIENT
    LIST, by the name it gives them: `leases.node_client_name`) and frees the lease only if
    none is left: the process is gone. A live leader whose liveness connection alone was
    dropped keeps its lease however long it takes to register again (a starved CPU); one
    paused, slow or cut off keeps its connections, so it keeps its lease until the TTL.
    """

    def __init__(self, executor: Executor, grace_ms: int, interval_ms: int) -> None:
        self._executor = executor
        self.grace_ms = grace_ms
        self._interval_ms = interval_ms
        self._subscribed: set[ShardKeys] = set()
        """Watched shards that had a subscriber at the last count."""
        self._asked: list[list[ShardKeys]] = []
        self._pending: dict[ShardKeys, float] = {}
        """Suspects whose grace runs: when (node clock ms) to ask `lease_reap` again."""
        self._holders: dict[ShardKeys, str] = {}
        """The leader of each pending suspect, as `lease_reap` last named it."""
        self._next_count_ms = 0.0
        self.looks = True
        """Look for a leader's connections before freeing its lease; False once an ACL refused
        CLIENT LIST (then the grace alone decides, as when the leader's are not named)."""

    def calls(
        self, served: dict[str, int], led: Iterable[ShardKeys], now_ms: float
    ) -> list[Call[list[int]]]:
        """The counting calls for the shards of `served` not in `led`: one per server (per
        `WATCHED_PER_CALL` shards), routed by the first shard's key."""
        mine = set(led)
        by_server: dict[str, list[ShardKeys]] = {}
        for topic, shards in served.items():
            for keys in all_shards(topic, shards):
                if keys not in mine:
                    by_server.setdefault(self._executor.node_of(keys.lease), []).append(keys)
        per = leases.WATCHED_PER_CALL
        self._asked = [g[i : i + per] for g in by_server.values() for i in range(0, len(g), per)]
        watched = {keys for asked in self._asked for keys in asked}
        self._pending = {k: at for k, at in self._pending.items() if k in watched}
        self._holders = {k: h for k, h in self._holders.items() if k in self._pending}
        self._next_count_ms = now_ms + self._interval_ms
        return [leases.lease_watch(a[0], [k.wake_channel for k in a]) for a in self._asked]

    def suspects(self, replies: Sequence[Any], now_ms: float) -> list[ShardKeys]:
        """The shards whose channel lost its last subscriber since the count before, and those
        whose grace is over by `now_ms`; a failed count leaves its shards as they were."""
        now: set[ShardKeys] = set()
        gone = []
        for asked, counts in zip(self._asked, replies, strict=True):
            if isinstance(counts, BaseException):
                now |= self._subscribed.intersection(asked)
                continue
            for keys, n in zip(asked, counts, strict=True):
                if n > 0:
                    now.add(keys)
                elif keys in self._subscribed:
                    gone.append(keys)
        self._subscribed = now
        due = [k for k, at in self._pending.items() if at <= now_ms and k not in gone]
        return gone + due

    def over(self, suspects: Iterable[ShardKeys], now_ms: float) -> dict[ShardKeys, str]:
        """The suspects whose grace is over by now as far as this node knows, with their
        leader: those to look for the connections of before asking `lease_reap` to free."""
        return {
            k: self._holders[k]
            for k in suspects
            if k in self._holders
            and k not in self._subscribed
            and self._pending.get(k, math.inf) <= now_ms
        }

    def noted(
        self,
        keys: ShardKeys,
        reap: leases.Reap | BaseException,
        now_ms: float,
        looked: bool = False,
    ) -> None:
        """Note what `lease_reap` answered for `keys`: a grace under way is asked again when
        it ends, a failed call at the next count; a grace over for a leader not seen gone at
        once if its connections were not `looked` for, else at the next count."""
        if isinstance(reap, BaseException):
            self._pending[keys] = now_ms + self._interval_ms
        elif reap.state is leases.Reaped.GONE:
            self._pending[keys] = now_ms + reap.wait_ms
            self._holders[keys] = reap.holder
        elif reap.state is leases.Reaped.OVER:
            self._pending[keys] = now_ms + (self._interval_ms if looked else 0)
            self._holders[keys] = reap.holder
        else:
            self._pending.pop(keys, None)
            self._holders.pop(keys, None)

    def next_ms(self) -> float:
        """When the next count or reap is due (inf: nothing watched)."""
        counted = self._next_count_ms if self._asked else math.inf
        return min(counted, *self._pending.values(), math.inf)


class LeaseKeeper(Service):
    """Takes, renews, hands over and releases shard leases for one node."""

    name = "leases"
    title = "lease keeper"

    def __init__(
        self,
        ctx: NodeContext,
        node_id: str,
        topics: frozenset[str] | None,
        on_change: Callable[[], None],
    ) -> None:
        s = ctx.settings
        # Paused no longer than a renew interval: leases are renewed as soon as Redis is back.
        pause_ms = min(s.failure_pause_max_ms, s.renew_interval_ms)
        super().__init__(ctx.clock, log, max_pause_ms=pause_ms)
        self._ctx = ctx
        self.node_id = node_id
        self._topics = topics
        self._on_change = on_change
        self._next_renew_ms = 0.0
        self._next_check_ms = 0.0
        self._served: dict[str, int] = {}
        self._invalid: dict[str, str] = {}
        self._next_beat_ms = 0.0
        self._sets = NodeSets(node_id, s.lease_ttl_ms)
        self._counter = True
        """Use the membership counter; False when an ACL refuses it (read every set each check)."""
        self._ifeq = True
        """Renew with SET ... IFEQ; False once the server refused it (then the script)."""
        self._watch: CrashWatch | None = None
        if s.fast_failover:
            watch_ms = min(s.check_interval_ms, s.failover_grace_ms)
            self._watch = CrashWatch(ctx.executor, s.failover_grace_ms, watch_ms)

    @property
    def served(self) -> tuple[str, ...]:
        """The topics the node takes part in (as of its last check)."""
        return tuple(self._served)

    async def step(self) -> float:
        """Renew when due, then heartbeat and balance when due; between checks, count the
        other leaders' liveness connections and reap when due."""
        now_ms = self.clock.now_ms()
        settings = self._ctx.settings
        try:
            if now_ms >= self._next_renew_ms:
                self._next_renew_ms = now_ms + settings.renew_interval_ms
                await self.renew()
            check = now_ms >= self._next_check_ms
            if not check and self._watch is not None and now_ms >= self._watch.next_ms():
                check = await self._reap(await self._count())  # freed: take it over at once
            if check:
                self._next_check_ms = now_ms + settings.check_interval_ms
                await self.balance()
        except BaseException:
            # renew, beat and check first when back
            self._next_renew_ms = self._next_beat_ms = self._next_check_ms = 0.0
            self._sets.stale()
            raise
        due = [self._next_renew_ms, self._next_check_ms]
        if self._watch is not None:
            due.append(self._watch.next_ms())
        return max(0.0, (min(due) - self.clock.now_ms()) / 1000)

    async def renew(self) -> None:
        leads = self._ctx.leads.all()
        if not leads:
            return
        ttl, token = self._ctx.settings.lease_ttl_ms, self._ctx.leads.token
        sent_ms = self.clock.now_ms()  # a renewal counts from when it was sent
        replies: list[Any] = []
        if self._ifeq:
            calls = [leases.lease_renew_ifeq(lead.keys, token, ttl) for lead in leads]
            replies = await self._ctx.executor.run(calls, return_exceptions=True)
            if any(leases.lacks_set_ifeq(reply) for reply in replies):
                log.info("the server has no SET ... IFEQ: leases are renewed by a script")
                self._ifeq = False
            else:
                for reply in replies:
                    if isinstance(reply, BaseException):
                        raise reply
        if not self._ifeq:
            calls = [leases.lease_renew(lead.keys, token, ttl) for lead in leads]
            replies = await self._ctx.executor.run(calls)
        for lead, renewed in zip(leads, replies, strict=True):
            if renewed:
                lead.renewed_ms = sent_ms
            else:
                log.warning("lease of %s was taken over", lead.keys.tag)
                self.drop(lead, "lost")

    async def balance(self) -> None:
        """Heartbeat into each served topic's node set and move towards this node's quota."""
        version: int | None = None
        watching = self._watching()
        if self._counter:
            registry, version, *counts = await self._ctx.executor.run(
                [all_topics(), leases.membership_version(), *watching],
                return_exceptions=True,
            )
            if leases.refused_by_acl(version):  # an ACL user without the key
                log.warning(
                    "cannot read %s (%s): reading every node set every check instead",
                    MEMBERSHIP_KEY,
                    version,
                )
                self._counter, version = False, None
            for reply in (registry, version):
                if isinstance(reply, BaseException):
                    raise reply
        else:
            registry, *counts = await self._ctx.executor.run(
                [all_topics(), *watching], return_exceptions=True
            )
            if isinstance(registry, BaseException):
                raise registry
        if watching and await self._reap(counts):
            version = None  # a dead node left its node sets: read them all again
        self._skip_invalid(registry)
        served = {
            t: n
            for t, n in sorted(registry.shards.items())
            if self._topics is None or t in self._topics
        }
        gone = [t for t in self._served if t not in served]
        joined = [t for t in served if t not in self._served]
        self._served = served
        topics = list(served.items())
        if gone:  # dropped or filtered out: stop heartbeating there, leave no member behind
            await self._ctx.executor.run(
                [leases.leave(topic, self.node_id) for topic in gone], return_exceptions=True
            )
            self._sets.forget(gone)
        for lead in self._ctx.leads.all():
            if lead.keys.topic not in self._served:
                await self._release([lead])  # topic gone or filtered out
        if topics:
            await self._read_sets(topics, version, beat_now=bool(joined))
        if (joined or gone) and self._counter:  # after the heartbeats and leaves landed
            await self._ctx.executor.run([leases.membership_changed()])
        if topics:
            await self._move_to_quota(topics)

    def _watching(self) -> list[Call[list[int]]]:
        """This check's counting calls (none without fast failover)."""
        if self._watch is None:
            return []
        return self._watch.calls(self._served, self._ctx.leads.by_keys, self.clock.now_ms())

    async def _count(self) -> list[Any]:
        """Count the watched liveness connections between checks (one call per server)."""
        calls = self._watching()
        return await self._ctx.executor.run(calls, return_exceptions=True) if calls else []

    async def _reap(self, counts: list[Any]) -> bool:
        """Free the leases of shards whose leader's liveness connection stayed gone past the
        grace, and take their dead holders out of those topics' node sets; whether any was
        freed (the node sets are then read again)."""
        if self._watch is None:
            return False
        for reply in counts:
            if leases.refused_by_acl(reply):  # an ACL user without PUBSUB: the TTL it is
                log.warning("cannot count subscribers (%s): failover waits for lease TTLs", reply)
                self._watch = None
                return False
        now_ms = self.clock.now_ms()
        suspects = self._watch.suspects(counts, now_ms)
        if not suspects:
            return False
        over = self._watch.over(suspects, now_ms)
        gone = await self._gone(over)
        grace_ms = self._watch.grace_ms
        replies = await self._ctx.executor.run(
            [leases.lease_reap(keys, grace_ms, gone.get(keys, "")) for keys in suspects],
            return_exceptions=True,
        )
        dead: dict[str, set[str]] = {}
        answered_ms = self.clock.now_ms()  # a grace's wait counts from its answer
        for keys, reply in zip(suspects, replies, strict=True):
            self._watch.noted(keys, reply, answered_ms, looked=keys in over)
            if isinstance(reply, BaseException):  # asked again at the next count
                log.warning("could not check whether %s's leader is alive: %s", keys.tag, reply)
            elif reply.state is leases.Reaped.FREED:
                log.warning(
                    "the process leading %s (%s) is gone: its lease is free", keys.tag, reply.holder
                )
                self._ctx.event("taken_over_dead", keys)
                dead.setdefault(keys.topic, set()).add(reply.holder)
            elif reply.state is leases.Reaped.GONE:
                log.debug(
                    "the liveness connection of %s's leader (%s) is gone: freed in %d ms if it "
                    "does not come back and its process is gone",
                    keys.tag,
                    reply.holder,
                    reply.wait_ms,
                )
            elif reply.state is leases.Reaped.OVER and keys in over:
                log.debug(
                    "the liveness connection of %s's leader (%s) is gone, but not its process: "
                    "its lease is kept",
                    keys.tag,
                    reply.holder,
                )
        if not dead:
            return False
        self._sets.stale()
        calls: list[Call[Any]] = [
            leases.leave(topic, node) for topic, gone in dead.items() for node in gone
        ]
        if self._counter:
            calls.append(leases.membership_changed())  # the other nodes count without it too
        await self._ctx.executor.run(calls, return_exceptions=True)
        return True

    async def _gone(self, over: dict[ShardKeys, str]) -> dict[ShardKeys, str]:
        """Of the leaders of `over`, those with no connection left on their shard's server
        (CLIENT LIST, one call per server): their process is gone. A failed look finds none
        gone (looked at again at the next count); an ACL refusing CLIENT LIST turns looking
        off, and then every leader whose grace is over counts as gone."""
        if not over or self._watch is None:
            return {}
        if not self._watch.looks:
            return dict(over)
        by_server: dict[str, list[ShardKeys]] = {}
        for keys in over:
            by_server.setdefault(self._ctx.executor.node_of(keys.lease), []).append(keys)
        groups = list(by_server.values())
        names = [{leases.node_client_name(over[k]) for k in group} for group in groups]
        replies = await self._ctx.executor.run(
            [leases.connected(group[0], named) for group, named in zip(groups, names, strict=True)],
            return_exceptions=True,
        )
        gone: dict[ShardKeys, str] = {}
        for group, reply in zip(groups, replies, strict=True):
            if leases.refused_by_acl(reply):
                log.warning(
                    "cannot list clients (%s): a leader whose liveness connection stays gone "
                    "for the grace counts as dead, live or not",
                    reply,
                )
                self._watch.looks = False
                return dict(over)
            if isinstance(reply, BaseException):
                log.warning("could not look for the connections of %s's leader: %s", group, reply)
                continue
            for keys in group:
                if leases.node_client_name(over[keys]) not in reply:
                    gone[keys] = over[keys]
        return gone

    async def _read_sets(
        self, topics: list[tuple[str, int]], version: int | None, beat_now: bool
    ) -> None:
        """Heartbeat when due and read the node sets that may have changed."""
        now_ms = self._ctx.clock.now_ms()
        ttl = self._ctx.settings.lease_ttl_ms
        beat = beat_now or now_ms >= self._next_beat_ms
        if beat:
            self._next_beat_ms = now_ms + self._ctx.settings.renew_interval_ms
        reading = self._sets.to_read([t for t, _ in topics], now_ms, version)
        calls: list[Call[Any]] = []
        for topic, _ in topics if beat else ():
            calls += [
                leases.heartbeat(topic, self.node_id, now_ms + ttl),
                leases.forget_dead_nodes(topic, now_ms - 10 * ttl),
            ]
        calls += [leases.live_nodes(topic, now_ms) for topic in reading]
        if not calls:
            return
        replies = await self._ctx.executor.run(calls)
        for topic, members in zip(reading, replies[len(replies) - len(reading) :], strict=True):
            self._sets.update(topic, members, now_ms)

    async def _move_to_quota(self, topics: list[tuple[str, int]]) -> None:
        to_take: list[tuple[list[ShardKeys], int]] = []
        for topic, shards in topics:
            universe = all_shards(topic, shards)
            names = {keys: keys.tag for keys in universe}
            share = quota(self.node_id, self._sets.live(topic), shards)
            held = [lead for lead in self._ctx.leads.all() if lead.keys.topic == topic]
            if len(held) > share:
                extra = set(rank(self.node_id, [lead.keys for lead in held], names)[share:])
                await self._release([lead for lead in held if lead.keys in extra])
            elif len(held) < share:
                others = [
                    k
                    for k in rank(self.node_id, universe, names)
                    if k not in self._ctx.leads.by_keys
                ]
                to_take.append((others, share - len(held)))
        if to_take:
            await self._acquire(to_take)

    def _skip_invalid(self, registry: Registry) -> None:
        """Log each served topic with an invalid registry entry once; it is not served."""
        invalid = {
            topic: str(err)
            for topic, err in registry.invalid.items()
            if self._topics is None or topic in self._topics
        }
        for topic, why in sorted(invalid.items()):
            if self._invalid.get(topic) != why:
                log.error("not serving topic %r: %s", topic, why)
        self._invalid = invalid

    async def _acquire(self, wants: list[tuple[list[ShardKeys], int]]) -> None:
        """For each (candidates in preference order, how many): take the first free ones."""
        candidates = [keys for others, _ in wants for keys in others]
        holders = await self._ctx.executor.run([leases.lease_holder(keys) for keys in candidates])
        free = {keys for keys, holder in zip(candidates, holders, strict=True) if holder is None}
        chosen = [keys for others, n in wants for keys in [k for k in others if k in free][:n]]
        if not chosen:
            return
        ttl = self._ctx.settings.lease_ttl_ms
        calls = [leases.lease_acquire(keys, self._ctx.leads.token, ttl) for keys in chosen]
        for keys, attempt in zip(chosen, await self._ctx.executor.run(calls), strict=True):
            if attempt.held and keys not in self._ctx.leads.by_keys:
                self._ctx.leads.add(keys, attempt.server_now_ms, self._served.get(keys.topic, 1))
                log.info("leading %s", keys.tag)
                self._ctx.event("acquired", keys)
        self._on_change()

    async def _release(self, leads: list[Lead]) -> None:
        if not leads:
            return
        calls: list[Call[Any]] = [
            leases.lease_release(lead.keys, self._ctx.leads.token) for lead in leads
        ]
        for lead in leads:
            self.drop(lead, "released")
        await self._ctx.executor.run(calls, return_exceptions=True)

    async def release_all(self) -> int:
        """Release every lease and leave the node sets in one round trip; returns how many."""
        leads = self._ctx.leads.all()
        calls: list[Call[Any]] = [
            leases.lease_release(lead.keys, self._ctx.leads.token) for lead in leads
        ]
        calls += [leases.leave(topic, self.node_id) for topic in self._served]
        for lead in leads:
            self.drop(lead, "released")
        if calls:
            await self._ctx.executor.run(calls, return_exceptions=True)
        if self._served and self._counter:  # after the leaves: the others take the shards
            await self._ctx.executor.run([leases.membership_changed()], return_exceptions=True)
        return len(leads)

    def drop(self, lead: Lead, why: str) -> None:
        """Forget a lead (lost or released); its wheel entries die with its slot."""
        if self._ctx.leads.remove(lead.keys) is not None:
            self._ctx.event(why, lead.keys)
            self._on_change()
