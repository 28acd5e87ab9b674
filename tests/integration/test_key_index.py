"""The key index (docs/architecture.md, "Jobs by key"): every pending job with a key is in its
key's list on its shard, and each key's count is how many of its jobs are pending there,
through every write of a pending job (enqueue and its replace, debounce, schedules' runs, a
retry) and every way one leaves (fired by the scheduler or at once, dropped at its expiry,
cancelled, written over by another key's); a list holds about 1.25 times its count as jobs
leave out of order, and a key with none pending leaves no key behind. A job written before
the index (never noted, counted down as it fires) takes no other job's entry with it. On both
servers, one server and a cluster."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import re
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, NamedTuple

import pytest
import redis.asyncio

from tests.integration.test_web_dashboard import get, post
from tests.integration.test_worker import holds
from tests.support.cli import run_wheelq
from tests.support.waiting import eventually
from tests.support.web import serving
from wheelq import Admin, AsyncAdmin, AsyncClient, Client, Job, Scheduler, Worker
from wheelq.core.far_tier import id_bytes
from wheelq.core.keys import ShardKeys, all_shards, key_list_key, shard_of
from wheelq.errors import InvalidArgumentError
from wheelq.producer.by_key import KEY_CANCEL_BATCH

pytestmark = pytest.mark.cluster_too

SHARDS = 2
HOUR_S = 3600
HORIZON_MS = 600_000


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient.from_url(redis_url) as c:
        yield c


@pytest.fixture
async def universe(client: AsyncClient, topic: str) -> list[ShardKeys]:
    """`topic` of `SHARDS` shards, with a far tier past ten minutes."""
    await AsyncAdmin.of(client).create_topic(topic, SHARDS)
    shards = all_shards(topic, SHARDS)
    for keys in shards:
        await client.redis.hset(keys.limits, "far", HORIZON_MS)
    return shards


@contextlib.asynccontextmanager
async def leading(redis_url: str, topic: str) -> AsyncIterator[None]:
    """A scheduler node leading every shard of `topic`."""
    node = Scheduler.from_url(redis_url, [topic], preload_interval_ms=100, lease_ttl_ms=2000)
    await node.start()
    try:
        await eventually(
            holds(lambda: len(node.leads) == SHARDS), timeout_s=10, what="every shard led"
        )
        yield None
    finally:
        await node.stop()


@pytest.fixture
async def scheduler(redis_url: str, topic: str, universe: list[ShardKeys]) -> AsyncIterator[None]:
    async with leading(redis_url, topic):
        yield None


def entry_id(entry: bytes) -> str:
    """The id a list entry names (keyed.lua: 16 bytes of a generated id, or bytes 1 and the
    id)."""
    if len(entry) == 16:
        return _generated(entry)
    assert entry[:1] == b"\x01", entry
    return entry.lstrip(b"\x01").decode()


def _generated(raw: bytes) -> str:
    value = int.from_bytes(raw, "big")
    chars = []
    for _ in range(26):
        value, d = divmod(value, 32)
        chars.append("0123456789ABCDEFGHJKMNPQRSTVWXYZ"[d])
    job_id = "".join(reversed(chars))
    assert id_bytes(job_id) == b"\0" + raw  # the far tier's packing: 0, then the same 16
    return job_id


def key_hash(key: str) -> int:
    """A key's 31-bit hash in the index (keyed.lua's wq_keyed_hash)."""
    return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) % 2**31


def records(value: bytes) -> list[tuple[int, str]]:
    """A bucket's records: (key hash, id) each, in order."""
    out, at = [], 0
    while at < len(value):
        head = int.from_bytes(value[at : at + 4], "big")
        if head >= 2**31:
            size = 6 + value[at + 4]
            out.append((head - 2**31, value[at + 5 : at + size].decode()))
        else:
            size = 20
            out.append((head, _generated(value[at + 4 : at + 20])))
        at += size
    return out


class Shard(NamedTuple):
    """One shard's key index as stored: the listed keys' counts and entries, and the small
    keys' records by key (a hash no key of `names` has: '#' and the hash)."""

    listed: dict[str, tuple[int, list[str]]]
    small: dict[str, list[str]]


async def index_of(
    r: redis.asyncio.Redis, universe: list[ShardKeys], names: set[str]
) -> dict[str, Shard]:
    """Per shard tag, its index, checked on the way: the buckets' state counts their records
    and each record sits in its key's bucket."""
    by_hash = {key_hash(name): name for name in names}
    out: dict[str, Shard] = {}
    for keys in universe:
        fields = await r.hgetall(keys.keyed)
        state = fields.pop(b"\0", b"0 0 0").decode()
        level, split, count = (int(part) for part in state.split())
        shard = Shard({}, {})
        total = 0
        for field, value in fields.items():
            if field.startswith(b"\0"):
                bucket = int(field[1:])
                for h, job_id in records(value):
                    at = h % 2**level
                    assert (at if at >= split else h % 2 ** (level + 1)) == bucket, (field, h)
                    shard.small.setdefault(by_hash.get(h, f"#{h}"), []).append(job_id)
                    total += 1
            else:
                key = field.decode()
                listed = await r.lrange(key_list_key(keys, key), 0, -1)
                shard.listed[key] = (int(value), [entry_id(e) for e in listed])
        assert total == count, (keys.tag, state, total)
        assert not set(shard.small) & set(shard.listed), keys.tag
        out[keys.tag] = shard
    return out


async def assert_index(
    r: redis.asyncio.Redis, topic: str, universe: list[ShardKeys], pending: dict[str, str]
) -> None:
    """The index holds exactly `pending` (job id -> key): a small key's records on each shard
    are its jobs there, each once; a listed key's count is its jobs there and its list holds
    each of them (about 1.25 times its count at most); no key is left without a job."""
    want: dict[str, dict[str, Counter[str]]] = {keys.tag: {} for keys in universe}
    for job_id, key in pending.items():
        tag = ShardKeys(topic, shard_of(job_id, SHARDS)).tag
        want[tag].setdefault(key, Counter())[job_id] += 1
    got = await index_of(r, universe, set(pending.values()))
    for keys in universe:
        shard, wanted = got[keys.tag], want[keys.tag]
        assert set(shard.small) | set(shard.listed) == set(wanted), keys.tag
        for key, ids in shard.small.items():
            assert Counter(ids) == wanted[key], (keys.tag, key)
        for key, (count, listed) in shard.listed.items():
            assert count == sum(wanted[key].values()), (keys.tag, key)
            assert set(wanted[key]) <= set(listed), (keys.tag, key)
            assert len(listed) <= count * 1.25 + 8 + 1, (keys.tag, key, len(listed), count)
        for key in list(await r.keys(f"{keys.keyed}:*")):
            name = key.decode()[len(keys.keyed) + 1 :]
            assert name in shard.listed, f"{key!r} outlived its key's jobs"


async def test_each_write_and_each_leaving_moves_the_count_of_the_jobs_key(
    client: AsyncClient, topic: str, universe: list[ShardKeys]
) -> None:
    r = client.redis
    pending: dict[str, str] = {}
    # New jobs: near and far, generated and own ids, some with a key.
    for i in range(40):
        key = f"k{i % 3}" if i % 4 else None
        due = HOUR_S if i % 2 else 60  # far (past the horizon) or near
        own = f"own-{i}" if i % 5 == 0 else None
        job_id = await client.enqueue(topic, i, delay=due, key=key, job_id=own)
        if key:
            pending[job_id] = key
    await assert_index(r, topic, universe, pending)
    # A replace with another key, with the same key, with none; near and far.
    await client.enqueue(topic, "x", delay=60, key="k9", job_id="own-5", replace=True)
    pending["own-5"] = "k9"
    await client.enqueue(topic, "x", delay=HOUR_S, key="k9", job_id="own-5", replace=True)
    await client.enqueue(topic, "x", delay=60, job_id="own-10", replace=True)
    pending.pop("own-10", None)
    await client.enqueue(topic, "x", delay=HOUR_S, key="k1", job_id="own-15", replace=True)
    pending["own-15"] = "k1"
    await assert_index(r, topic, universe, pending)
    # Cancelled, fired at once by a reschedule and by a replace due now.
    keyed = [job_id for job_id in pending if not job_id.startswith("own-")]
    for job_id in keyed[:6]:
        assert await client.cancel(topic, job_id)
        del pending[job_id]
    for job_id in keyed[6:10]:
        await client.reschedule(topic, job_id, delay=0)
        del pending[job_id]
    await client.enqueue(topic, "now", delay=0, key="k2", job_id="own-15", replace=True)
    del pending["own-15"]
    await assert_index(r, topic, universe, pending)
    # Debounced: each call writes over the last; one whose key changes moves it.
    await client.enqueue(topic, "d", key="k5", job_id="deb", debounce=60)
    pending["deb"] = "k5"
    await client.enqueue(topic, "d", key="k6", job_id="deb", debounce=60)
    pending["deb"] = "k6"
    await assert_index(r, topic, universe, pending)
    # Every one cancelled: nothing left of the index.
    for job_id in list(pending):
        assert await client.cancel(topic, job_id)
    await client.cancel(topic, "deb")
    await assert_index(r, topic, universe, {})
    for keys in universe:
        assert await r.exists(keys.keyed) == 0


async def test_jobs_of_a_key_that_fire_out_of_order_leave_a_short_list_then_none(
    client: AsyncClient, topic: str, universe: list[ShardKeys], redis_url: str
) -> None:
    """A key of many jobs has a list of its own, lazily kept: as the key's jobs fire (not in
    the order they were noted) it stays within about 1.25 times its count, and goes when the
    last has fired."""
    r = client.redis
    rng = random.Random(7)
    seconds, micros = await r.time()
    base = seconds + micros / 1e6 + 1
    dues = [base + rng.random() * 3 for _ in range(1000)]
    ids = await client.enqueue_many(
        topic, [{"payload": i, "at": due, "key": "flood"} for i, due in enumerate(dues)]
    )
    # A job already due when its batch reached Redis (a loaded machine) fired at once and
    # left the index then: the index holds the others.
    pending = {
        job_id: "flood"
        for job_id in ids
        if (await client.get(topic, job_id)).state.value == "pending"
    }
    assert len(pending) >= 500, "most are pending, so the key keeps a list of its own"
    await assert_index(r, topic, universe, pending)
    got = await index_of(r, universe, {"flood"})
    assert all("flood" in got[keys.tag].listed for keys in universe)
    # Far-off jobs of the same key keep the list alive while the near ones fire.
    stay = await client.enqueue_many(
        topic, [{"payload": i, "delay": HOUR_S + i, "key": "flood"} for i in range(20)]
    )
    async with leading(redis_url, topic):  # now, so that none fired before the look above
        longest = await fired_watching_lists(client, topic, universe, ids)
    assert longest <= 1, "a list grew past 1.25 times its count as its jobs fired"
    await assert_index(r, topic, universe, dict.fromkeys(stay, "flood"))
    for job_id in stay:
        await client.cancel(topic, job_id)
    await assert_index(r, topic, universe, {})


async def fired_watching_lists(
    client: AsyncClient, topic: str, universe: list[ShardKeys], ids: list[str]
) -> int:
    """Once every one of `ids` has fired: how far past 1.25 times its count (and 8) the key
    "flood"'s lists grew meanwhile, at most."""
    r, longest = client.redis, 0
    while True:
        got = await index_of(r, universe, {"flood"})
        for keys in universe:
            count, listed = got[keys.tag].listed.get("flood", (0, []))
            longest = max(longest, len(listed) - int(count * 1.25) - 8)
        fired = [
            job_id for job_id in ids if (await client.get(topic, job_id)).state.value != "pending"
        ]
        if len(fired) == len(ids):
            return longest
        await asyncio.sleep(0.2)


async def test_a_retry_is_noted_again_and_leaves_when_it_fires(
    redis_url: str, client: AsyncClient, topic: str, universe: list[ShardKeys], scheduler: None
) -> None:
    r = client.redis
    seen: list[int] = []

    async def handler(job: Job) -> None:
        seen.append(job.attempt)
        if job.attempt == 1:
            raise RuntimeError("once")

    worker = Worker.from_url(redis_url, topic, handler, retry_base_ms=60_000, retry_jitter_pct=0)
    await worker.start()
    try:
        job_id = await client.enqueue(topic, "r", key="tenant-a", max_attempts=3)
        await eventually(
            holds(lambda: worker.status()["retried"] == 1), timeout_s=10, what="a retry"
        )
        await assert_index(r, topic, universe, {job_id: "tenant-a"})  # fired, then noted again
        await client.reschedule(topic, job_id, delay=0)  # the retry fires at once
        await assert_index(r, topic, universe, {})
        await eventually(holds(lambda: seen == [1, 2]), timeout_s=10, what="the retry to run")
    finally:
        await worker.stop()


async def test_a_job_written_before_the_index_takes_no_entry_of_another(
    client: AsyncClient, topic: str, universe: list[ShardKeys]
) -> None:
    """A key's count is a hint: a job the index never noted (written by an earlier version)
    that leaves counts the key down to 0, and the list, read whole, keeps the job still
    pending."""
    r = client.redis
    old = await client.enqueue(topic, "old", delay=HOUR_S, key="k", job_id="old-1")
    keys = ShardKeys(topic, shard_of(old, SHARDS))
    await r.delete(keys.keyed, key_list_key(keys, "k"))  # as an earlier version left it
    new = next(
        job_id
        for job_id in (f"new-{i}" for i in range(100))
        if shard_of(job_id, SHARDS) == keys.shard
    )
    await client.enqueue(topic, "new", delay=HOUR_S, key="k", job_id=new)
    assert await client.cancel(topic, old)  # counts "k" down to 0 on that shard
    await assert_index(r, topic, universe, {new: "k"})


@pytest.mark.both_servers
async def test_keys_of_few_jobs_share_buckets_that_split_and_merge_back(
    client: AsyncClient, topic: str, universe: list[ShardKeys]
) -> None:
    """Thousands of keys of a job or two: their records fill buckets that split as they grow
    (each record in its key's bucket, the state counting them) and merge back as the jobs
    leave, until nothing of the index is left. Own ids of every length are recorded too."""
    r = client.redis
    odd = ["o" * 15, "p" * 16, "q" * 17, "é" * 128]  # 15 to 256 bytes
    items: list[dict[str, Any]] = [
        {"payload": i, "delay": HOUR_S + i if i % 2 else 60 + i, "key": f"c-{i // 2}"}
        for i in range(6000)
    ]
    for i, job_id in enumerate(odd):
        items[i * 7]["job_id"] = job_id
    ids = await client.enqueue_many(topic, items)
    pending = {job_id: item["key"] for job_id, item in zip(ids, items, strict=True)}
    await assert_index(r, topic, universe, pending)
    for keys in universe:
        level, split, count = map(int, (await r.hget(keys.keyed, "\0")).split())
        assert 2**level + split >= count // 64 > 10, (level, split, count)
    listed = await AsyncAdmin.of(client).jobs(topic, "pending", key="c-7")
    assert [j.id for j in listed] == [odd[2], ids[15]]  # items 14 and 15, in due order
    for i in range(0, 3000, 3):  # a third of the keys by key, a few records cut at a time
        assert await client.cancel(topic, key=f"c-{i}") == 2
        del pending[ids[2 * i]], pending[ids[2 * i + 1]]
    await assert_index(r, topic, universe, pending)
    # the rest at once: many records cut from each bucket in one pass
    outcome = await AsyncAdmin.of(client).bulk(topic, "cancel", state="pending")
    assert outcome.acted == len(pending), outcome
    await assert_index(r, topic, universe, {})
    for keys in universe:
        assert await r.exists(keys.keyed) == 0


def colliding_keys() -> tuple[str, str]:
    """Two keys of one 31-bit hash: their records share a bucket and a head."""
    seen: dict[int, str] = {}
    for i in range(1_000_000):
        key = f"k{i}"
        h = key_hash(key)
        if h in seen:
            return seen[h], key
        seen[h] = key
    raise AssertionError("no two keys of one hash")


@pytest.mark.both_servers
async def test_two_keys_of_one_hash_stay_apart_small_and_listed(
    client: AsyncClient, topic: str, universe: list[ShardKeys]
) -> None:
    """Records carry a key's hash, not its name: a key's jobs listed, cancelled or moved by
    key are its own, never another key's of the same hash, when both are small and when one
    of them has a list of its own beside the other's records."""
    admin = AsyncAdmin.of(client)
    a, b = colliding_keys()
    mine = await client.enqueue_many(
        topic, [{"payload": i, "delay": HOUR_S, "key": a} for i in range(5)]
    )
    theirs = await client.enqueue_many(
        topic, [{"payload": i, "delay": HOUR_S, "key": b} for i in range(5)]
    )
    assert sorted(j.id for j in await admin.jobs(topic, "pending", key=b)) == sorted(theirs)
    assert await client.cancel(topic, key=a) == 5  # b's records taken with a's, noted again
    await assert_index(client.redis, topic, universe, dict.fromkeys(theirs, b))
    assert sorted(j.id for j in await admin.jobs(topic, "pending", key=b)) == sorted(theirs)
    # a grows a list of its own; b's records stay in the bucket beside it
    many = await client.enqueue_many(
        topic, [{"payload": i, "delay": HOUR_S, "key": a} for i in range(1500)]
    )
    assert await client.reschedule(topic, key=b, by=60) == 5
    assert sorted(j.id for j in await admin.jobs(topic, "pending", 100, key=b)) == sorted(theirs)
    assert await client.cancel(topic, key=b) == 5
    assert await client.cancel(topic, key=a) == len(many)
    states = {(await client.get(topic, job_id)).state.value for job_id in mine + theirs + many}
    assert states == {"cancelled"}


@pytest.mark.both_servers
async def test_an_own_id_of_any_length_in_a_listed_key_is_found_and_cancelled(
    client: AsyncClient, topic: str, universe: list[ShardKeys]
) -> None:
    """A list entry of an own id is never read as a generated id's 16 bytes (one of 15
    characters, after its byte 1, was 16 bytes long)."""
    odd = ["o" * 15, "p" * 16, "q" * 14, "é" * 128]
    items = [{"payload": i, "delay": HOUR_S + i, "key": "big"} for i in range(1500)]
    items += [
        {"payload": job_id, "delay": HOUR_S, "key": "big", "job_id": job_id} for job_id in odd
    ]
    ids = await client.enqueue_many(topic, items)
    got = await index_of(client.redis, universe, {"big"})
    assert all("big" in got[keys.tag].listed for keys in universe)
    first = await AsyncAdmin.of(client).jobs(topic, "pending", 10, key="big")
    assert set(odd) <= {j.id for j in first}  # due first
    assert await client.cancel(topic, key="big") == len(ids)
    for job_id in odd:
        assert (await client.get(topic, job_id)).state.value == "cancelled"


# --- a key's jobs at once: listed, cancelled, moved ---------------------------------------


async def keyed_jobs(client: AsyncClient, topic: str) -> tuple[list[str], list[str]]:
    """Jobs of "cust-1" (near and far, own ids and generated, a first attempt and a job on
    the far tier) among jobs of other keys and of none; (cust-1's ids, the others')."""
    mine, others = [], []
    for i in range(24):
        key = "cust-1" if i % 3 == 0 else "cust-2" if i % 3 == 1 else None
        own = f"own-{i}" if i % 4 == 0 else None
        job_id = await client.enqueue(
            topic, i, delay=HOUR_S + i if i % 2 else 60 + i, key=key, job_id=own
        )
        (mine if key == "cust-1" else others).append(job_id)
    return mine, others


async def test_a_keys_pending_jobs_are_listed_in_due_order_page_by_page(
    client: AsyncClient, topic: str, universe: list[ShardKeys]
) -> None:
    admin = AsyncAdmin.of(client)
    mine, _ = await keyed_jobs(client, topic)
    seen, cursor = [], None
    while True:
        page = await admin.jobs(topic, "pending", 3, key="cust-1", cursor=cursor)
        assert all(job.key == "cust-1" for job in page)
        seen += [(job.due_ms, job.id) for job in page]
        if page.next is None:
            break
        cursor = page.next
    assert sorted(job_id for _, job_id in seen) == sorted(mine)
    assert seen == sorted(seen)  # due order, each once, across pages
    assert [j.id for j in await admin.jobs(topic, "retrying", key="cust-1")] == []
    assert [j.id for j in await admin.jobs(topic, "pending", key="nobody")] == []


async def test_cancel_by_key_cancels_that_keys_jobs_and_nothing_else(
    client: AsyncClient, topic: str, universe: list[ShardKeys]
) -> None:
    mine, others = await keyed_jobs(client, topic)
    assert await client.cancel(topic, key="cust-1") == len(mine)
    for job_id in mine:
        assert (await client.get(topic, job_id)).state.value == "cancelled"
    for job_id in others:
        assert (await client.get(topic, job_id)).state.value == "pending"
    assert await client.cancel(topic, key="cust-1") == 0
    pending = {j.id: j.key for j in await AsyncAdmin.of(client).jobs(topic, "pending", 100)}
    await assert_index(client.redis, topic, universe, {i: k for i, k in pending.items() if k})


async def test_cancel_by_key_takes_a_long_list_in_calls_and_leaves_rewritten_jobs(
    client: AsyncClient, topic: str, universe: list[ShardKeys]
) -> None:
    """A key's list is taken from its head a call at a time (`KEY_CANCEL_BATCH` entries),
    each id cancelled as it is taken: a key of more entries than one call takes is
    cancelled whole, a job written again under the same key is one of them, and one written
    again under another key is left alone (its entry here is stale)."""
    many = KEY_CANCEL_BATCH * SHARDS + 37
    items = [{"payload": i, "delay": 3600 + i, "key": "big"} for i in range(many)]
    ids = await client.enqueue_many(topic, items)
    moved = ids[:5]  # written again under another key: their entries under "big" are stale
    for job_id in moved:
        await client.enqueue(topic, "x", job_id=job_id, key="other", replace=True, delay=3600)
    again = ids[5]  # written again under the same key: still one of its jobs
    await client.enqueue(topic, "y", job_id=again, key="big", replace=True, delay=3600)
    assert await client.cancel(topic, key="big") == many - len(moved)
    states = {(await client.get(topic, job_id)).state.value for job_id in ids[5:]}
    assert states == {"cancelled"}
    for job_id in moved:
        assert (await client.get(topic, job_id)).state.value == "pending"
    for keys in universe:
        assert not await client.redis.exists(key_list_key(keys, "big"))
    pending = {j.id: j.key for j in await AsyncAdmin.of(client).jobs(topic, "pending", 100)}
    await assert_index(client.redis, topic, universe, {i: k for i, k in pending.items() if k})


async def test_reschedule_by_key_moves_each_job_by_its_shift_or_all_to_one_time(
    client: AsyncClient, topic: str, universe: list[ShardKeys]
) -> None:
    mine, others = await keyed_jobs(client, topic)
    before = {j: (await client.get(topic, j)).due_ms for j in mine + others}
    assert await client.reschedule(topic, key="cust-1", by=-30) == len(mine)
    for job_id in mine:
        assert (await client.get(topic, job_id)).due_ms == before[job_id] - 30_000
    for job_id in others:
        assert (await client.get(topic, job_id)).due_ms == before[job_id]
    to_s = (await client.redis.time())[0] + 2 * HOUR_S
    assert await client.reschedule(topic, key="cust-1", to=to_s) == len(mine)
    for job_id in mine:
        assert (await client.get(topic, job_id)).due_ms == to_s * 1000
    await assert_index(
        client.redis,
        topic,
        universe,
        dict.fromkeys(mine, "cust-1")
        | {
            j.id: str(j.key)
            for j in await AsyncAdmin.of(client).jobs(topic, "pending", 100)
            if j.key
        },
    )


def test_the_sync_client_cancels_and_moves_a_keys_jobs(redis_url: str, topic: str) -> None:
    with Client.from_url(redis_url) as client:
        Admin.of(client).create_topic(topic, SHARDS)
        ids = [client.enqueue(topic, i, delay=600, key="k") for i in range(5)]
        client.enqueue(topic, "other", delay=600, key="j")
        assert [j.id for j in Admin.of(client).jobs(topic, "pending", key="k")] == sorted(
            ids, key=lambda i: (client.get(topic, i).due_ms or 0, i)
        )
        assert client.reschedule(topic, key="k", by=timedelta(seconds=60)) == 5
        assert client.cancel(topic, key="k") == 5
        assert [j.key for j in Admin.of(client).jobs(topic, "pending")] == ["j"]


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda c, t: c.cancel(t), "key"),
        (lambda c, t: c.cancel(t, "id", key="k"), "key"),
        (lambda c, t: c.cancel(t, key=""), "key"),
        (lambda c, t: c.cancel(t, key="x" * 300), "key"),
        (lambda c, t: c.cancel(t, key=7), "key"),
        (lambda c, t: c.reschedule(t, key="k"), "by"),
        (lambda c, t: c.reschedule(t, key="k", by=1, to=2), "by"),
        (lambda c, t: c.reschedule(t, key="k", delay=1), "delay"),
        (lambda c, t: c.reschedule(t, key="k", at=1), "at"),
        (lambda c, t: c.reschedule(t, "id", key="k", by=1), "key"),
        (lambda c, t: c.reschedule(t, "id", by=1), "by"),
        (lambda c, t: c.reschedule(t, "id", to=1), "to"),
        (lambda c, t: c.reschedule(t, key="k", by="soon"), "by"),
        (lambda c, t: c.reschedule(t, key="k", by=10**12), "by"),
        (lambda c, t: c.reschedule(t, key="k", to=-5), "to"),
        (lambda c, t: c.reschedule(t, key="k", to="tomorrow"), "to"),
    ],
)
async def test_bad_key_calls_name_their_parameter_and_change_nothing(
    client: AsyncClient, topic: str, universe: list[ShardKeys], call: Any, name: str
) -> None:
    job_id = await client.enqueue(topic, "x", delay=600, key="k")
    with pytest.raises(InvalidArgumentError) as caught:
        await call(client, topic)
    assert caught.value.parameter == name
    info = await client.get(topic, job_id)
    assert info.state.value == "pending"
    await assert_index(client.redis, topic, universe, {job_id: "k"})


# --- every face: HTTP, the console, the CLI, bulk actions ---------------------------------


async def test_http_lists_cancels_and_moves_a_keys_jobs(
    redis_url: str, client: AsyncClient, topic: str, universe: list[ShardKeys]
) -> None:
    mine, _ = await keyed_jobs(client, topic)
    before = {j: (await client.get(topic, j)).due_ms for j in mine}
    jobs = f"/v1/topics/{topic}/jobs"
    async with serving(redis_url) as api:
        rows = await api.job_rows(f"{jobs}?state=pending&limit=2&key=cust-1")
        assert [r["id"] for r in rows] == sorted(mine, key=lambda j: (before[j], j))
        assert {r["key"] for r in rows} == {"cust-1"}
        status, body, _ = await api.call("PATCH", f"{jobs}?key=cust-1", {"by_ms": 5000})
        assert (status, body) == (200, {"moved": len(mine)})
        for job_id in mine:
            assert (await client.get(topic, job_id)).due_ms == before[job_id] + 5000
        for bad, field in [
            ({}, "by_ms"),
            ({"by_ms": 1, "to": 2}, "by_ms"),
            ({"by_ms": 10**15}, "by_ms"),
            ({"to": "soon"}, "to"),
        ]:
            status, body, _ = await api.call("PATCH", f"{jobs}?key=cust-1", bad)
            assert status in (400, 422) and field in str(body), (bad, body)
        status, body, _ = await api.call("DELETE", f"{jobs}?key=")
        assert status in (400, 422)
        status, body, _ = await api.call("DELETE", f"{jobs}?key=cust-1")
        assert (status, body) == (200, {"cancelled": len(mine)})
        # bulk by key: a dry run counts, the act takes the key's jobs only
        dry = {"action": "cancel", "filter": {"state": "pending", "key": "cust-2"}}
        status, body, _ = await api.call("POST", f"{jobs}/bulk", {**dry, "dry_run": True})
        assert status == 200 and body["matched"] == len(
            await AsyncAdmin.of(client).jobs(topic, "pending", 100, key="cust-2")
        )
        status, body, _ = await api.call("POST", f"{jobs}/bulk", dry)
        assert status == 200 and body["acted"] == body["matched"] > 0
    left = await AsyncAdmin.of(client).jobs(topic, "pending", 100)
    assert {j.key for j in left} == {None}
    await assert_index(client.redis, topic, universe, {})


async def test_the_console_filters_by_key_and_acts_on_all_matching(
    redis_url: str, client: AsyncClient, topic: str, universe: list[ShardKeys]
) -> None:
    mine, others = await keyed_jobs(client, topic)
    async with serving(redis_url) as api:
        html, _ = await get(api, f"/ui/topics/{topic}/jobs?state=pending&limit=50&key=cust-1")
        assert sorted(re.findall(r'<tr data-job="([^"]*)"', html)) == sorted(mine)
        assert 'name="key" type="text" maxlength="256" size="14" value="cust-1"' in html
        bulk = f"/ui/topics/{topic}/jobs/bulk"
        form = [("state", "pending"), ("all", "1"), ("key", "cust-1")]
        status, asked = await post(api, f"{bulk}/cancel", form)
        assert status == 200 and f"Cancel {len(mine)} pending jobs" in asked
        assert "of key cust-1" in asked
        token = re.search(r'name="selection" value="([^"]+)"', asked)
        assert token is not None
        done = [("state", "pending"), ("selection", token[1]), ("confirm", "1")]
        status, _ = await post(api, f"{bulk}/cancel", done)
        assert status == 303
    for job_id in mine:
        assert (await client.get(topic, job_id)).state.value == "cancelled"
    for job_id in others:
        assert (await client.get(topic, job_id)).state.value == "pending"


def test_the_cli_lists_cancels_and_moves_a_keys_jobs(redis_url: str, topic: str) -> None:
    with Client.from_url(redis_url) as client:
        Admin.of(client).create_topic(topic, SHARDS)
        ids = [client.enqueue(topic, i, delay=600, key="k") for i in range(3)]
        other = client.enqueue(topic, "o", delay=600, key="j")
        url = ("--redis-url", redis_url)
        listed = run_wheelq("jobs", "list", topic, "--state", "pending", "--key", "k", *url)
        assert listed.returncode == 0, listed.stderr
        assert sorted(line.split()[0] for line in listed.stdout.splitlines()) == sorted(ids)
        due = {j: client.get(topic, j).due_ms for j in ids}
        moved = run_wheelq("reschedule", topic, "--key", "k", "--by", "-60", *url)
        assert (moved.returncode, moved.stdout) == (0, "rescheduled 3 jobs of key 'k'\n")
        assert {j: client.get(topic, j).due_ms for j in ids} == {
            j: d - 60_000 for j, d in due.items()
        }
        bad = run_wheelq("reschedule", topic, "--key", "k", *url)
        assert bad.returncode == 2 and "--by" in bad.stderr
        gone = run_wheelq("cancel", topic, "--key", "k", *url)
        assert (gone.returncode, gone.stdout) == (0, "cancelled 3 jobs of key 'k'\n")
        assert client.get(topic, other).state.value == "pending"
        assert [j.id for j in Admin.of(client).jobs(topic, "pending")] == [other]
