"""The Redis the chaos soak runs against: one embedded server with its AOF on, or a Redis
Cluster of 3 primaries with a replica each.

On one server, every process connects through the soak's proxy, and `restart_one` kills
the server with -9 and starts it again on the same AOF. A cluster's clients follow MOVED
replies to the nodes' own ports, past any single proxy, so the cluster runs without the
proxy faults; it has two faults of its own instead: a slot of the topic moved to another
primary key by key under load, and a coordinated failover of a primary to its replica.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import redis
import redis.asyncio
from redis.crc import key_slot

from benchlib.chaos_faults import Arena, Event, Fault
from wheelq.core.keys import all_shards
from wheelq.embedded import ServerBinary
from wheelq.testing import EmbeddedCluster, EmbeddedServer, find_server_binaries

PROXY_FAULTS = ("proxy_cut", "proxy_stall", "proxy_slow")
SERVER_ARGS = ("--appendfsync", "everysec", "--maxmemory-policy", "noeviction")


def binary(kind: str | None) -> ServerBinary:
    found = [b for b in find_server_binaries() if kind is None or b.kind == kind]
    if not found:
        raise SystemExit(f"no {kind or 'server'} binary found")
    return found[0]


class Standalone:
    """One server, `appendonly yes`; clients go through the proxy."""

    def __init__(self, kind: str | None, extra_args: tuple[str, ...] = ()) -> None:
        """`extra_args` go to the server after `SERVER_ARGS`, at every start."""
        self.server = EmbeddedServer(
            binary(kind), appendonly=True, extra_args=(*SERVER_ARGS, *extra_args)
        )
        self.server.start()
        self.url, self.port = self.server.url, self.server.port

    def url_via(self, proxy_port: int) -> str:
        return f"redis://127.0.0.1:{proxy_port}"

    def connect(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=10)

    def connect_async(self) -> redis.asyncio.Redis:
        return redis.asyncio.Redis.from_url(self.url)

    def describe(self) -> str:
        return f"{self.server.kind}, one server, appendonly yes, appendfsync everysec"

    def primaries(self) -> list[redis.Redis]:
        return [redis.Redis.from_url(self.url, socket_timeout=5)]

    def restart_one(self, rng: random.Random, down_s: float) -> str:
        self.server.kill()
        time.sleep(down_s)
        self.server.restart(timeout_s=120)
        return f"kill -9, down {down_s:.1f} s, restarted from its AOF"

    def extra_faults(self) -> dict[str, Fault]:
        return {}

    def excluded(self) -> tuple[str, ...]:
        return ()

    def close(self) -> None:
        self.server.stop()


class Cluster:
    """3 primaries with a replica each, `appendonly yes`; clients connect directly."""

    def __init__(self, kind: str | None, topic: str, shards: int) -> None:
        self.cluster = EmbeddedCluster(binary(kind), primaries=3, replicas=1, appendonly=True)
        self.cluster.start()
        self.topic, self.shards = topic, shards
        self.url = self.cluster.url
        self.port = self.cluster.primaries[0].port

    def url_via(self, proxy_port: int) -> str:
        return self.url

    def connect(self) -> redis.RedisCluster:
        return redis.RedisCluster.from_url(self.url, socket_timeout=10)

    def connect_async(self) -> redis.asyncio.RedisCluster:
        return redis.asyncio.RedisCluster.from_url(self.url)

    def describe(self) -> str:
        kind = self.cluster.primaries[0].kind
        return f"{kind}, cluster of 3 primaries with a replica each, appendonly yes"

    def primaries(self) -> list[redis.Redis]:
        return [self.cluster.client(node) for node in self.cluster.primaries if node.pid]

    def restart_one(self, rng: random.Random, down_s: float) -> str:
        replica = rng.choice([n for n in self.cluster.replicas if n.pid])
        old = self.cluster.failover(replica)
        return f"coordinated failover: {replica.port} took over from {old.port}"

    def extra_faults(self) -> dict[str, Fault]:
        return {"slot_migration": self._migrate}

    def excluded(self) -> tuple[str, ...]:
        return PROXY_FAULTS

    def _migrate(self, arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
        keys = rng.choice(all_shards(self.topic, self.shards))
        slot = key_slot(keys.delayed.encode())
        for _ in range(10):  # right after a failover a node may still name the old owner
            owner = self.cluster.owner(slot)
            to = rng.choice([n for n in self.cluster.primaries if n is not owner and n.pid])
            try:
                moved = self.cluster.migrate_slot(slot, to, pause_s=0.05)
            except redis.ResponseError as exc:  # refused before anything moved
                event.detail["refused"] = repr(exc)
                time.sleep(0.5)
                continue
            event.detail.update(shard=keys.shard, slot=slot, to=to.port, keys=moved)
            break
        yield 0.0

    def close(self) -> None:
        self.cluster.stop()
