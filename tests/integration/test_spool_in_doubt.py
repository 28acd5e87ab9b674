"""A spooling client's direct enqueue whose outcome is unknown: the request reached Redis
(or did not), the reply never came back, so the client spooled the jobs and replays them.
Each job must be applied exactly once either way, even one due now that fired before the
replay (``enqueue.lua`` records the direct call's token; the replay skips its writes).

The proxy throws away the server's replies (`drop_replies`) or holds every byte (`stall`);
the client's socket timeout ends the call.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import redis

from tests.support.servers import dedicated_server
from tests.support.waiting import eventually_sync
from wheelq import Admin, Client
from wheelq.core.keys import all_shards
from wheelq.testing import ServerBinary
from wheelq.testing.proxy import ProxyThread

pytestmark = pytest.mark.both_servers  # the protocol: replies lost

SHARDS = 2
TIMEOUTS = {"socket_timeout": 0.5, "socket_connect_timeout": 0.5}


def fired_ids(r: redis.Redis, topic: str) -> Counter[str]:
    return Counter(
        fields[b"id"].decode()
        for keys in all_shards(topic, SHARDS)
        for _, fields in r.xrange(keys.ready)
    )


def drained(client: Client) -> bool:
    stats = client.spool_stats()
    return stats is not None and stats.depth == 0


def test_a_direct_call_applied_but_unanswered_is_replayed_without_firing_twice(
    server_binary: ServerBinary, tmp_path: Path
) -> None:
    with dedicated_server(server_binary) as srv, redis.Redis.from_url(srv.url) as r:
        with Admin.from_url(srv.url) as admin:
            admin.create_topic("doubt", SHARDS)
        with ProxyThread(srv.port) as proxy:
            url = f"redis://127.0.0.1:{proxy.port}"
            spool = str(tmp_path / "spool.db")
            with Client.from_url(url, spool=spool, redis_options=TIMEOUTS) as client:
                client.enqueue("doubt", "warm", job_id="warm")  # connected, scripts loaded
                proxy.drop_replies = True  # on that connection, which the next call takes
                items = [{"payload": i, "job_id": f"j{i}"} for i in range(20)]  # due now
                ids = client.enqueue_many("doubt", items)  # applied; no reply: spooled
                spooled = client.spool_stats()
                eventually_sync(
                    lambda: set(ids) <= set(fired_ids(r, "doubt")),
                    timeout_s=5,
                    what="the unanswered call's jobs to fire",
                )
                proxy.drop_replies = False
                proxy.cut()  # the link that lost its replies is dropped: the drain reconnects
                eventually_sync(lambda: drained(client), timeout_s=15, what="the replay")
        counts = fired_ids(r, "doubt")
    assert spooled is not None and spooled.depth == 20, "the outcome was unknown: spooled"
    assert {i: counts[i] for i in ids} == dict.fromkeys(ids, 1), "each fired exactly once"


def test_a_direct_call_that_never_reached_redis_is_replayed_once(
    server_binary: ServerBinary, tmp_path: Path
) -> None:
    with dedicated_server(server_binary) as srv, redis.Redis.from_url(srv.url) as r:
        with Admin.from_url(srv.url) as admin:
            admin.create_topic("doubt", SHARDS)
        with ProxyThread(srv.port) as proxy:
            url = f"redis://127.0.0.1:{proxy.port}"
            spool = str(tmp_path / "spool.db")
            with Client.from_url(url, spool=spool, redis_options=TIMEOUTS) as client:
                client.enqueue("doubt", "warm", job_id="warm")
                proxy.stall()
                items = [{"payload": i, "job_id": f"j{i}"} for i in range(20)]
                ids = client.enqueue_many("doubt", items)  # held in the proxy: spooled
                proxy.cut()  # the held request dies with its connection: never applied
                proxy.unstall()
                eventually_sync(lambda: drained(client), timeout_s=15, what="the replay")
        counts = fired_ids(r, "doubt")
    assert {i: counts[i] for i in ids} == dict.fromkeys(ids, 1), "replayed, once each"
