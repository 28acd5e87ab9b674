"""The producer spool on real servers with real faults: Redis killed and restarted while jobs
are enqueued, a replay whose reply is lost after Redis applied it, and the producer itself
killed with -9 while spooling. Every id a client returned is in Redis exactly once after the
drain: pending in its shard's sorted set, or fired into its ready stream. A job a test writes
straight to Redis and expects to survive the server's SIGKILL is written at the ack level that
promises that (`enqueue_to_survive_a_crash`), not at the default, which promises less."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support import spool_proc
from tests.support.servers import dedicated_server, free_port
from tests.support.spool_proc import SpoolProducer
from tests.support.spooling import (
    DRAIN_S,
    HOUR_S,
    SHARDS,
    EitherClient,
    found_ids,
)
from tests.support.waiting import eventually_sync, until
from wheelq import AckUnsupportedError, Admin, AsyncClient, Client, SpoolLockedError, SpoolStats
from wheelq.core.clock import ManualClock
from wheelq.core.due import DueSpec
from wheelq.core.job import Envelope
from wheelq.core.keys import all_shards, shard_of
from wheelq.core.settings import ClientSettings
from wheelq.producer import spool
from wheelq.producer.operations import Producer
from wheelq.producer.spool import FENCE_MS, Drain, Spool
from wheelq.runtime.breaker import Breaker
from wheelq.runtime.clock import WallClock, wall_ms
from wheelq.store.call import Call
from wheelq.store.enqueue import JobWrite
from wheelq.store.executor import SyncExecutor, drive
from wheelq.testing import EmbeddedServer, ServerBinary
from wheelq.testing.proxy import ProxyThread

pytestmark = pytest.mark.both_servers  # the server killed and restarted


@pytest.fixture
def srv(server_binary: ServerBinary) -> Iterator[EmbeddedServer]:
    # always: with everysec a server whose fsync runs slow acknowledges writes it has not
    # yet written, and its kill -9 loses them (once on CI: 1,089 of 1,100).
    always = ["--appendfsync", "always"]
    with dedicated_server(server_binary, appendonly=True, extra_args=always) as server:
        yield server


async def enqueue_to_survive_a_crash(
    client: EitherClient, srv: EmbeddedServer, topic: str, payload: Any
) -> str:
    """Enqueue straight to Redis at the level that promises the job survives a SIGKILL.

    The default, ack="primary", promises only that the server applied the write. With
    appendfsync everysec the server may answer before the write is even in its AOF file: a
    write that comes while a background fsync still runs waits behind it (up to 2 s) while
    the reply goes out, so a SIGKILL then loses it. ack="persisted" (WAITAOF, which needs the
    client's ``ack_replicas=0`` on a single server) returns only once it is fsynced. On a
    server without WAITAOF (redis-server 7.0; refused before anything is written) the server
    is set to appendfsync always, which writes and fsyncs before it replies.
    """
    try:
        return str(await client.call("enqueue", topic, payload, ack="persisted"))
    except AckUnsupportedError:
        with redis.Redis.from_url(srv.url) as r:
            r.config_set("appendfsync", "always")
        return str(await client.call("enqueue", topic, payload))


async def test_jobs_enqueued_while_redis_is_down_are_spooled_then_each_replayed_once(
    srv: EmbeddedServer, client_kind: str, topic: str, tmp_path: Path
) -> None:
    """The 100 jobs enqueued during the outage are spooled, then each is replayed once.

    `before`, written straight to Redis just before the SIGKILL, must survive the crash, so
    it asks for that (`enqueue_to_survive_a_crash`). At the default ack="primary" it was
    lost in 16 of 960 runs beside two CPU-bound processes, and in 38 of 40 with a 300 ms
    fsync (issue 30, item 16): the client had the server's reply, but the write still sat in
    the server's AOF buffer behind a background fsync when the kill came. The spooled jobs
    need no such promise: they are replayed after the restart, into the server then read.
    """
    client = EitherClient(
        client_kind, srv.url, spool=tmp_path / "spool.db", default_shards=SHARDS, ack_replicas=0
    )
    try:
        before = await enqueue_to_survive_a_crash(client, srv, topic, "before the outage")
        srv.kill()
        ids = [
            await client.call("enqueue", topic, {"n": n}, delay=0 if n % 2 else HOUR_S)
            for n in range(40)
        ]
        ids += await client.call(
            "enqueue_many", topic, [{"payload": n, "delay": n % 3 * HOUR_S} for n in range(60)]
        )
        spooled = client.spool_stats()
        assert spooled.depth == 100
        assert spooled.age_ms >= 0
        srv.restart()

        await until(lambda: client.spool_stats().depth == 0, timeout_s=DRAIN_S, what="drain")

        assert found_ids(srv.url, topic) == Counter([before, *ids])
        stats = await client.manage("stats", topic)
        assert client.spool_stats() == SpoolStats(str(tmp_path / "spool.db"), 0, 0, 0, None)
        assert stats.pending + stats.ready == 101
    finally:
        await client.close()


async def test_a_spooled_delay_counts_from_the_call_not_from_the_replay(
    srv: EmbeddedServer, client_kind: str, topic: str, tmp_path: Path
) -> None:
    client = EitherClient(client_kind, srv.url, spool=tmp_path / "spool.db", default_shards=SHARDS)
    try:
        await client.manage("create_topic", topic)
        srv.kill()
        job_id = await client.call("enqueue", topic, "x", delay=HOUR_S)
        returned_ms = wall_ms()
        # Let the outage last, so a delay counted from the replay would be visibly late.
        await until(lambda: wall_ms() > returned_ms + 300, what="300 ms of outage")
        restarted_ms = wall_ms()
        srv.restart()
        await until(lambda: client.spool_stats().depth == 0, timeout_s=DRAIN_S, what="drain")

        with redis.Redis.from_url(srv.url) as r:
            keys = all_shards(topic, SHARDS)[shard_of(job_id, SHARDS)]
            due = int(r.zscore(keys.delayed, job_id))
            called_ms = Envelope.unpack(r.hget(keys.jobs, job_id)).enqueued_ms
        assert called_ms + HOUR_S * 1000 <= due < restarted_ms + HOUR_S * 1000
    finally:
        await client.close()


class LosingReplies:
    """A real executor that loses the reply of the first replay round after Redis ran it."""

    def __init__(self, executor: SyncExecutor) -> None:
        self.executor = executor
        self.lost = 0

    def run(self, calls: Sequence[Call[Any]]) -> list[Any]:
        replies = self.executor.run(calls, return_exceptions=True)
        if not self.lost and any(call.script == "enqueue" for call in calls):
            self.lost += 1
            raise redis.ConnectionError("Connection reset by peer (reply lost after it ran)")
        return replies


def test_a_replay_whose_reply_is_lost_after_redis_ran_it_fires_each_job_once(
    redis_url: str, topic: str, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool.db")
    producer = Producer(ClientSettings(default_shards=SHARDS))
    drain = Drain(spool, producer, Breaker(1000, ManualClock()), WallClock())
    now = wall_ms()
    due_now = [
        JobWrite(f"j{n}", DueSpec("delay", 0), False, Envelope(b"p", 1, 5, now).pack())
        for n in range(30)
    ]
    spool.append(topic, due_now, now)
    with redis.Redis.from_url(redis_url) as r:
        losing = LosingReplies(SyncExecutor(r))

        with pytest.raises(redis.ConnectionError, match="reply lost"):
            drive(drain.step(), losing.run)
        assert spool.depth == 30  # not confirmed: kept
        assert found_ids(redis_url, topic) == Counter(w.id for w in due_now)  # but applied

        assert drive(drain.step(), losing.run) == 30
        assert drive(drain.step(), losing.run) == 0  # settles the tokens
    spool.close()

    assert found_ids(redis_url, topic) == Counter(w.id for w in due_now)  # each fired once
    with redis.Redis.from_url(redis_url) as r:  # kept two fences more, not spool_record_ms
        sec, usec = r.time()
        latest = int(sec) * 1000 + int(usec) // 1000 + 2 * FENCE_MS
        kept = [
            score
            for keys in all_shards(topic, SHARDS)
            for _, score in r.zrange(keys.spooled, 0, -1, withscores=True)
        ]
    assert len(kept) == 30 and max(kept) <= latest


def test_a_producer_killed_9_while_spooling_loses_no_id_it_returned(
    srv: EmbeddedServer, topic: str, tmp_path: Path
) -> None:
    path = tmp_path / "spool.db"
    srv.kill()
    child = SpoolProducer(srv.url, topic, path, 100_000, tmp_path)
    try:
        eventually_sync(lambda: len(child.ids()) >= 200, timeout_s=60, what="200 ids printed")
        child.signal(signal.SIGKILL)
        child.proc.wait(timeout=10)
    finally:
        child.finish()
    printed = child.ids()
    srv.restart()

    with Client.from_url(srv.url, spool=path, default_shards=SHARDS) as client:
        eventually_sync(
            lambda: client.spool_stats().depth == 0, timeout_s=DRAIN_S, what="the drain"
        )
    found = found_ids(srv.url, topic)

    assert 200 <= len(printed) < 100_000
    assert [job_id for job_id in printed if found[job_id] != 1] == []
    assert len(set(found) - set(printed)) <= 1  # the call killed after its commit, if any
    assert all(count == 1 for count in found.values())


def test_a_spooling_producer_stopped_right_after_a_restart_exits_within_its_timeout(
    srv: EmbeddedServer, topic: str, tmp_path: Path
) -> None:
    """Issue 43, item 19: a chaos-soak producer did not exit within 180 s of SIGTERM right
    after a Redis restart. The soak's producer (`steady`: enqueue_many through the spool,
    socket timeouts) spools through a kill -9, the server restarts from its AOF, and the
    SIGTERM comes at once, while the drain replays: the producer drains its spool and exits
    within its own bound (`DRAIN_S`, then `Client.close`), having lost nothing.

    What hung was the producer's SIGTERM handler: it set a `threading.Event` and ran, as
    Python runs handlers, on the main thread, which was inside that Event's `wait` holding
    its lock (the busier the drain's thread, the likelier), so `set()` waited for ever.
    Under `signal_race` the SIGTERM is always handled inside the producer's wait."""
    path = tmp_path / "spool.db"
    child = SpoolProducer(srv.url, topic, path, "steady", tmp_path, signal_race=True)

    def said(key: str, least: int) -> bool:
        return any(line.get(key, 0) >= least for line in child.lines())

    try:
        eventually_sync(lambda: said("enqueued", 500), timeout_s=60, what="500 enqueued")
        srv.kill()
        eventually_sync(lambda: said("spooled", 500), timeout_s=60, what="500 spooled")
        srv.restart()
        child.signal(signal.SIGTERM)
        bound_s = spool_proc.DRAIN_S + spool.CLOSE_WAIT_S + 10  # its own, and slack
        try:
            child.proc.wait(timeout=bound_s)
        except subprocess.TimeoutExpired:
            child.signal(signal.SIGUSR1)  # every thread's stack, into its log
            eventually_sync(lambda: "Thread" in child.log_tail(), timeout_s=5, what="stacks")
            raise AssertionError(
                f"no exit {bound_s} s after SIGTERM:\n{child.log_tail(8000)}"
            ) from None
        assert child.proc.returncode == 0, child.log_tail()
        assert child.lines()[-1] == {"stopped": True, "spool_left": 0}, child.log_tail()
    finally:
        child.finish()
    enqueued = max(line.get("enqueued", 0) for line in child.lines())
    assert sum(found_ids(srv.url, topic).values()) == enqueued


def test_close_ends_within_its_bound_while_the_drain_waits_on_a_stalled_redis(
    srv: EmbeddedServer, topic: str, tmp_path: Path
) -> None:
    """Issue 43, item 19: a producer's stop is bounded whatever Redis does. The drain sends
    its replay into a stalled connection without a socket timeout (redis-py's default
    before 8.0), where it would wait for ever; `close()` cuts that connection, returns
    within `CLOSE_WAIT_S`, and what was not replayed stays in the file."""
    path = tmp_path / "spool.db"
    with ProxyThread(srv.port) as proxy:
        client = Client.from_url(
            f"redis://127.0.0.1:{proxy.port}",
            spool=path,
            default_shards=SHARDS,
            redis_options={"socket_timeout": None, "socket_connect_timeout": None},
        )
        admin = Admin.of(client)
        try:
            admin.create_topic(topic)
            proxy.refuse(True)
            proxy.cut()
            ids = [client.enqueue(topic, n, delay=HOUR_S) for n in range(10)]  # spooled
            accepted = proxy.accepted
            proxy.stall()
            proxy.refuse(False)
            eventually_sync(
                lambda: proxy.accepted > accepted, timeout_s=30, what="the drain's next try"
            )
        finally:
            began = time.monotonic()
            client.close()
            took_s = time.monotonic() - began
    assert took_s < spool.CLOSE_WAIT_S + 2, took_s

    kept = Spool(path)
    kept.close()
    assert kept.depth == 10
    with Client.from_url(srv.url, spool=path, default_shards=SHARDS) as again:
        eventually_sync(lambda: again.spool_stats().depth == 0, timeout_s=DRAIN_S, what="drain")  # type: ignore[union-attr]
    assert found_ids(srv.url, topic) == Counter(ids)


async def test_close_keeps_what_was_not_replayed_for_the_next_client_on_the_file(
    srv: EmbeddedServer, client_kind: str, topic: str, tmp_path: Path
) -> None:
    path = tmp_path / "spool.db"
    client = EitherClient(client_kind, srv.url, spool=path, default_shards=SHARDS)
    srv.kill()
    ids = [await client.call("enqueue", topic, n, delay=HOUR_S) for n in range(10)]
    await client.close()
    srv.restart()

    again = EitherClient(client_kind, srv.url, spool=path, default_shards=SHARDS)
    try:
        assert again.spool_stats().depth == 10
        await again.call(
            "get", topic, ids[0]
        )  # the async client's drain starts with its first call
        await until(lambda: again.spool_stats().depth == 0, timeout_s=DRAIN_S, what="drain")
        assert found_ids(srv.url, topic) == Counter(ids)
    finally:
        await again.close()


def test_a_second_client_on_the_same_spool_file_is_refused(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "spool.db"
    with Client.from_url(redis_url, spool=path):
        with pytest.raises(SpoolLockedError, match="one client per file"):
            Client.from_url(redis_url, spool=path)
        with pytest.raises(SpoolLockedError):
            AsyncClient.from_url(redis_url, spool=path)
    with Client.from_url(redis_url, spool=path) as after:
        assert after.spool_stats() == SpoolStats(str(path), 0, 0)


CLOSE_IN_HANDLER = """
import os, signal, sys

import wheelq
from wheelq.producer import spool

url, path = sys.argv[1], sys.argv[2]
client = wheelq.Client.from_url(url, spool=path)
signal.signal(signal.SIGUSR1, lambda *_: client.close())  # the user's handler: close at once
inner = spool.Spool._transaction


def signalled(self):  # SIGUSR1 lands while the spool's lock is held, as it did by chance
    os.kill(os.getpid(), signal.SIGUSR1)
    return inner(self)


spool.Spool._transaction = signalled
job_id = client.enqueue("t", {"n": 1})
spool.Spool._transaction = inner
print("spooled", job_id, flush=True)
"""


def test_close_in_a_signal_handler_that_lands_inside_a_spooled_enqueue_does_not_hang(
    tmp_path: Path,
) -> None:
    """The black-box check of issue 43, item 19: a user's SIGTERM handler calling
    `client.close()` right after a Redis restart hung 1-3 times in 15. The signal had landed
    while the enqueue held the spool's lock, and close waited for that lock on the same
    thread. Here the signal always lands there (Redis unreachable: the enqueue spools): the
    close happens as the enqueue returns, and the process exits."""
    url = f"redis://127.0.0.1:{free_port()}"  # nothing listens: every enqueue spools
    script = tmp_path / "close_in_handler.py"
    script.write_text(CLOSE_IN_HANDLER)
    try:
        done = subprocess.run(
            [sys.executable, str(script), url, str(tmp_path / "spool.db")],
            capture_output=True, text=True, timeout=30, check=False, cwd=tmp_path,
        )  # fmt: skip
    except subprocess.TimeoutExpired as hung:
        raise AssertionError(f"close() in the handler hung: {hung.stderr!r}") from None
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("spooled "), (done.stdout, done.stderr)
    with Client.from_url(url, spool=tmp_path / "spool.db") as again:  # the file was let go
        stats = again.spool_stats()
    assert stats is not None and stats.depth == 1, stats  # the job stayed, for a next client
