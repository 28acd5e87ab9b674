"""Pull receipts under attack: a receipt settles only the delivery a service of this
deployment issued it for. Forged receipts (a real entry with a made-up job id, made-up
entries, a MAC from another key, a tampered field, another group's) are refused with 422
naming the receipt and change nothing: no ack, no history record, no phantom job; a batch
holding one is refused whole. Services sharing a Redis accept each other's receipts; an
ack of 10,000 receipts of one shard settles every one."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import pytest
import redis.asyncio

from tests.support.web import Served, serving
from wheelq.core.keys import ShardKeys

pytestmark = pytest.mark.cluster_too


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


def _fields(receipt: str) -> list[Any]:
    fields: list[Any] = msgpack.unpackb(
        base64.urlsafe_b64decode(receipt + "=" * (-len(receipt) % 4))
    )
    return fields


def _text(fields: list[Any]) -> str:
    packed = msgpack.packb(fields, use_bin_type=True)
    return base64.urlsafe_b64encode(packed).rstrip(b"=").decode("ascii")


def forged(receipt: str, index: int, value: Any) -> str:
    """`receipt` with field `index` (0 shard, 1 entry id, 2 job id, 3 pulled ms, 4 consumer,
    5 deliveries) replaced, and whatever else it carries kept as it was."""
    fields = _fields(receipt)
    fields[index] = value
    return _text(fields)


async def pulled(
    api: Served, topic: str, group: str, ids: list[str], *, enqueue: bool = True
) -> dict[str, str]:
    """Enqueue jobs `ids` due now (unless there already) and pull them into `group`, made
    first: job id -> receipt."""
    for i in range(0, len(ids), 2000) if enqueue else ():
        jobs = [{"payload": n, "id": n} for n in ids[i : i + 2000]]
        status, _, _ = await api.call("POST", f"/v1/topics/{topic}/jobs/batch", {"jobs": jobs})
        assert status == 200
    await api.service.admin.create_group(topic, group)
    got: dict[str, str] = {}
    while len(got) < len(ids):
        status, body, _ = await api.call(
            "POST", f"/v1/topics/{topic}/groups/{group}/pull", {"max": 1000, "wait_ms": 1000}
        )
        assert status == 200, body
        got.update({j["id"]: j["receipt"] for j in body["jobs"]})
    return got


async def history_sizes(r: redis.asyncio.Redis, topic: str, shards: int) -> list[int]:
    return [int(await r.hlen(ShardKeys(topic, s).history)) for s in range(shards)]


async def job_state(api: Served, topic: str, job_id: str) -> Any:
    status, info, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{job_id}")
    return info["state"] if status == 200 else status


async def test_forged_receipts_are_refused_and_change_nothing(
    api: Served, topic: str, redis_async: redis.asyncio.Redis
) -> None:
    from wheelq.worker.pull import Receipt, ReceiptSeal

    shards = await api.service.admin.create_topic(topic, 2)
    receipts = await pulled(api, topic, "g", ["real", "other"])
    real = receipts["real"]
    entry = _fields(real)[1]
    another_key = ReceiptSeal(b"not this deployment's key").issue(
        Receipt(*_fields(real)[:6]), topic, "g"
    )
    attacks = {
        "made-up job id": forged(real, 2, "never-existed"),
        "made-up entry": forged(real, 1, "1-0"),
        "another shard": forged(real, 0, 1 - _fields(real)[0]),
        "tampered deliveries": forged(real, 5, 7),
        "tampered consumer": forged(real, 4, "http:someone-else"),
        "tampered pulled_ms": forged(real, 3, 0),
        "MAC from another key": another_key,
        "no MAC": _text(_fields(real)[:6]),
        "MAC cut short": _text([*_fields(real)[:6], b"\0" * 4]),
    }
    made_up = [_text([0, f"{n + 1}-0", f"ghost-{n}", 0, "http:x", 1]) for n in range(50)]
    before = await history_sizes(redis_async, topic, shards)
    for what, receipt in [*attacks.items(), ("made-up entries", made_up)]:
        for path, extra in [("ack", {}), ("nack", {"delay_ms": 0})]:
            sent = receipt if isinstance(receipt, list) else [receipts["other"], receipt]
            status, problem, headers = await api.call(
                "POST", f"/v1/topics/{topic}/groups/g/{path}", {"receipts": sent, **extra}
            )
            where = "receipts[0]" if isinstance(receipt, list) else "receipts[1]"
            assert (status, problem.get("field")) == (422, where), (what, path, problem)
            assert headers["Content-Type"].startswith("application/problem+json")
    # Not even the genuine receipt sent beside a forged one was settled.
    assert await history_sizes(redis_async, topic, shards) == before
    assert await job_state(api, topic, "never-existed") == 404
    assert await job_state(api, topic, "ghost-0") == 404
    assert {await job_state(api, topic, i) for i in ("real", "other")} == {"running"}
    stream = ShardKeys(topic, _fields(real)[0]).stream
    assert [
        row["message_id"].decode()
        for row in await redis_async.xpending_range(stream, "g", min=entry, max=entry, count=1)
    ] == [entry]
    # The genuine receipts still settle.
    status, body, _ = await api.call(
        "POST", f"/v1/topics/{topic}/groups/g/ack", {"receipts": list(receipts.values())}
    )
    assert (status, body["acked"]) == (200, 2), body
    assert {await job_state(api, topic, i) for i in ("real", "other")} == {"succeeded"}


async def test_a_receipt_of_another_group_or_topic_is_refused(api: Served, topic: str) -> None:
    receipts = await pulled(api, topic, "g", ["j"])
    await api.service.admin.create_group(topic, "h")
    await api.call("POST", f"/v1/topics/{topic}-2/jobs", {"payload": 1})
    await api.service.admin.create_group(f"{topic}-2", "g")
    for path in (f"/v1/topics/{topic}/groups/h/ack", f"/v1/topics/{topic}-2/groups/g/ack"):
        status, problem, _ = await api.call("POST", path, {"receipts": [receipts["j"]]})
        assert (status, problem["field"]) == (422, "receipts[0]"), (path, problem)
    assert await job_state(api, topic, "j") == "running"


async def test_services_sharing_a_redis_accept_each_others_receipts(
    redis_url: str, topic: str
) -> None:
    """Behind a load balancer the ack may reach another instance than the pull: without a
    configured secret they share the key kept in Redis; with one, they share that."""
    for secret in ("", "a-shared-secret"):
        async with (
            serving(redis_url, receipt_secret=secret) as a,
            serving(redis_url, receipt_secret=secret) as b,
        ):
            receipts = await pulled(a, topic, "g", [f"j{secret}"])
            status, body, _ = await b.call(
                "POST", f"/v1/topics/{topic}/groups/g/ack", {"receipts": list(receipts.values())}
            )
            assert (status, body["acked"]) == (200, 1), (secret, body)
    async with (
        serving(redis_url, receipt_secret="one-secret") as a,
        serving(redis_url, receipt_secret="another-secret") as b,
    ):
        receipts = await pulled(a, topic, "g", ["mismatch"])
        status, problem, _ = await b.call(
            "POST", f"/v1/topics/{topic}/groups/g/ack", {"receipts": list(receipts.values())}
        )
        assert (status, problem["field"]) == (422, "receipts[0]")


async def test_an_ack_of_10000_receipts_of_one_shard_settles_every_one(
    api: Served, topic: str, redis_async: redis.asyncio.Redis
) -> None:
    await api.service.admin.create_topic(topic, 1)
    ids = [f"j{n}" for n in range(10_000)]
    receipts = await pulled(api, topic, "g", ids)
    status, body, _ = await api.call(
        "POST", f"/v1/topics/{topic}/groups/g/ack", {"receipts": list(receipts.values())}
    )
    assert status == 200, str(body)[:300]
    assert body["acked"] == len(ids)
    assert {r["outcome"] for r in body["results"]} == {"acked"}
    stream = ShardKeys(topic, 0).stream
    assert (await redis_async.xpending(stream, "g"))["pending"] == 0
    assert await job_state(api, topic, "j9999") == "succeeded"


async def test_the_ack_script_records_no_success_for_an_entry_not_in_the_stream(
    api: Served, topic: str, redis_async: redis.asyncio.Redis
) -> None:
    """Defence in depth: the worker's ack path (no receipts) writes a job's success record
    only for an entry it settled or one still in the stream (its own reply lost)."""
    from wheelq.store import settle

    await api.service.admin.create_topic(topic, 1)
    keys = ShardKeys(topic, 0)
    await redis_async.xgroup_create(keys.ready, "g", id="0", mkstream=True)
    ghosts = [(f"{n + 1}-0", f"ghost-{n}", 5, 1, None, 1) for n in range(100)]
    (acked,) = await api.service.client.executor.run([settle.ack_done(keys, "g", ghosts)])
    assert acked == 0
    assert await redis_async.hlen(keys.history) == 0
    assert await job_state(api, topic, "ghost-0") == 404
