"""The outbox relay against the races of several relays, with relays in processes of their
own (docs/architecture.md, "The outbox relay"): a relay frozen after it took its rows whose
write lands after another relay placed and settled them fires nothing twice (the fence),
and an id's versions written with ``replace=True`` end with the last one committed, however
two relays split them.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from tests.support.relay_proc import RelayProcess
from tests.support.waiting import eventually_sync
from wheelq import Client, outbox
from wheelq.core import keys as k
from wheelq.core.job import Field
from wheelq.testing.proxy import ProxyThread

SHARDS = 4  # ClientSettings.default_shards: the topics these tests make
DEFAULT_FENCE_MS = 15_000  # RelaySettings.fence_ms


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    """A database of the test's own with the outbox's tables."""
    outbox.install(postgres_dsn)
    return postgres_dsn


def rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT count(*) FROM wheelq_outbox").fetchone()
        assert found is not None
        return int(found[0])


def lockable_rows(dsn: str) -> int:
    """Rows no relay's transaction holds."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        found = conn.execute(
            "SELECT count(*) FROM (SELECT seq FROM wheelq_outbox FOR UPDATE SKIP LOCKED) t"
        ).fetchone()
        assert found is not None
        return int(found[0])


def relay_sessions(dsn: str, state: str) -> int:
    """Sessions in `state` whose last statement was a relay's TAKE."""
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            "AND datname = current_database() AND state = %s AND query LIKE %s",
            (state, "%FOR UPDATE SKIP LOCKED%"),
        ).fetchone()
        assert found is not None
        return int(found[0])


def fired(r: redis.Redis, topic: str) -> Counter[str]:
    """Each job id in the topic's ready streams, with how many entries it has."""
    ids: Counter[str] = Counter()
    for shard in range(SHARDS):
        for _, fields in r.xrange(k.ShardKeys(topic, shard).ready):
            ids[fields[Field.ID].decode()] += 1
    return ids


def server_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000


def settled(r: redis.Redis, topic: str, fence_ms: int) -> bool:
    """No token of the topic's record is kept longer than a settled row's (2 fences)."""
    latest = server_ms(r) + 2 * fence_ms + 5000
    return all(
        score <= latest
        for shard in range(SHARDS)
        for _, score in r.zrange(k.ShardKeys(topic, shard).spooled, 0, -1, withscores=True)
    )


# --- a frozen relay's late write --------------------------------------------------------------


@pytest.mark.parametrize("fence_ms", [3000, None], ids=["deadline_passed", "default_fence"])
def test_a_frozen_relays_late_write_fires_nothing_twice(
    dsn: str,
    topic: str,
    redis_url: str,
    redis_sync: redis.Redis,
    tmp_path: Path,
    fence_ms: int | None,
) -> None:
    """Relay A takes 300 rows due now, its write held by a proxy, and is frozen (SIGSTOP);
    PostgreSQL ends its transaction; relay B places the rows, commits and settles their
    tokens; then A's write lands and A resumes. Each job fires once: with a short fence
    A's deadline has passed and its write is refused; with the default one it finds the
    settled tokens still kept (or is refused, on a machine slower than the fence)."""
    settings: dict[str, Any] = {"sweep_ms": 50, "idle_in_transaction_ms": 1000}
    if fence_ms is not None:
        settings["fence_ms"] = fence_ms
    port = int(redis_url.rsplit(":", 1)[1])
    live: RelayProcess | None = None
    with ProxyThread(port) as proxy:
        frozen = RelayProcess(f"redis://127.0.0.1:{proxy.port}", dsn, "frozen", tmp_path, settings)
        try:
            # A's first step measured its clock offset: the next steps need no round first
            eventually_sync(frozen.stepped, timeout_s=30, what="relay A's first step")
            proxy.stall()  # A's writes reach the proxy and wait there
            with psycopg.connect(dsn) as conn, conn.transaction():
                ids = [outbox.enqueue(conn, topic, {"n": i}) for i in range(300)]
            eventually_sync(
                lambda: relay_sessions(dsn, "idle in transaction"),
                timeout_s=30,
                what="relay A holding the rows, its write held",
            )
            took_ms = server_ms(redis_sync)
            frozen.signal(signal.SIGSTOP)
            eventually_sync(
                lambda: lockable_rows(dsn) == 300,
                timeout_s=30,
                what="PostgreSQL ending the frozen relay's transaction",
            )
            live = RelayProcess(redis_url, dsn, "live", tmp_path, settings)
            eventually_sync(
                lambda: set(fired(redis_sync, topic)) == set(ids) and rows(dsn) == 0,
                timeout_s=60,
                what="relay B placing every job and deleting the rows",
            )
            eventually_sync(
                lambda: settled(redis_sync, topic, fence_ms or DEFAULT_FENCE_MS),
                timeout_s=30,
                what="relay B settling the rows' tokens",
            )
            live.finish()
            if fence_ms is not None:  # A's deadline, read before its TAKE, is behind us
                eventually_sync(
                    lambda: server_ms(redis_sync) > took_ms + fence_ms + 1000,
                    timeout_s=30,
                    what="relay A's deadline passing",
                )
            proxy.unstall()  # A's write lands now
            frozen.signal(signal.SIGCONT)
            errors = eventually_sync(
                frozen.failures, timeout_s=30, what="relay A's step ending after its resume"
            )
            counts = fired(redis_sync, topic)
            assert set(counts) == set(ids)
            assert [i for i, n in counts.items() if n > 1] == []
            if fence_ms is not None:
                assert any(e.startswith("LateReplayError") for e in errors), errors
        finally:
            frozen.signal(signal.SIGCONT)
            frozen.finish()
            if live is not None:
                live.finish()


# --- two relays racing an id's versions -----------------------------------------------------


VERSIONS = 4
DELAY_S = 600  # version v is due DELAY_S + 60 * v seconds after its INSERT


@pytest.mark.cluster_too
def test_two_relays_leave_each_id_with_its_last_committed_version(
    dsn: str, topic: str, redis_url: str, tmp_path: Path
) -> None:
    """150 ids, 4 versions each (``replace=True``, each due a minute later than the one
    before), the versions of an id next to each other in the table; two relay processes
    taking 3 and 5 rows a step split them between them. Each id ends with its last version's
    payload and due time, as with one relay."""
    relays = [
        RelayProcess(redis_url, dsn, f"relay{n}", tmp_path, {"batch_size": size, "sweep_ms": 50})
        for n, size in enumerate((3, 5))
    ]
    try:
        for relay in relays:
            eventually_sync(relay.started, timeout_s=30, what="the relays started")
        before_ms = time.time() * 1000
        with psycopg.connect(dsn) as conn, conn.transaction():
            ids = [f"id{i:03}" for i in range(150)]
            for job_id in ids:
                for v in range(1, VERSIONS + 1):
                    delay = DELAY_S + 60 * v
                    outbox.enqueue(conn, topic, {"v": v}, job_id=job_id, delay=delay, replace=True)
        after_ms = time.time() * 1000
        eventually_sync(lambda: rows(dsn) == 0, timeout_s=120, what="every row relayed")
    finally:
        for relay in relays:
            relay.finish()
    last_s = DELAY_S + 60 * VERSIONS
    with Client.from_url(redis_url) as client:
        jobs = {job_id: client.get(topic, job_id) for job_id in ids}
    wrong = {
        job_id: (job.payload, job.due_ms)
        for job_id, job in jobs.items()
        if job.payload != {"v": VERSIONS}
        or not before_ms + last_s * 1000 - 30_000
        <= (job.due_ms or 0)
        <= after_ms + last_s * 1000 + 5000
    }
    assert wrong == {}, f"{len(wrong)} ids ended with an older version: {list(wrong.items())[:5]}"
