"""Pull consumers and receipts (docs/security.md, "Pull consumers")."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import random
import re
import secrets
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgpack
from redis.exceptions import ResponseError

from wheelq.core.clock import Clock
from wheelq.core.expiry import expired
from wheelq.core.job import Field, Job
from wheelq.core.keys import RECEIPT_KEY, ShardKeys, all_shards, validate_topic
from wheelq.core.payload import jsonable
from wheelq.core.retry import Reason, RetryPolicy, retry_envelope
from wheelq.errors import InvalidArgumentError, UnknownGroupError, UnknownTopicError, int_in
from wheelq.runtime.outage import wait_for_either
from wheelq.store import consume, groups, pauses, settle, streams, topics
from wheelq.store.call import Call
from wheelq.store.connect import BlockingReads
from wheelq.store.executor import AsyncExecutor, Executor
from wheelq.store.scripts import GroupOutcome
from wheelq.worker.settler import ACKS_PER_CALL

MAX_RECEIPTS = 10_000
MAX_RECEIPT_CHARS = 2000
MAC_BYTES = 16  # An HMAC-SHA256 truncated to 128 bits: forging one is a 2**-128 guess per try.
_ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


class Outcome(StrEnum):
    """What settling one receipt did."""

    ACKED = "acked"
    RETRIED = "retried"
    DEAD_LETTERED = "dead_lettered"
    SETTLED_BEFORE = "settled_before"
    """The entry was settled already; nothing changed."""
    STALE = "stale"
    """The entry was taken over since; only the newest receipt settles it."""
    CANCELLED = "cancelled"
    """Nacked after the job was cancelled: acked, not retried (a cancel is final)."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a receipt names: the entry, its job, the pull time (ms) and the delivery."""

    shard: int
    entry_id: str
    job_id: str
    pulled_ms: int
    consumer: str
    deliveries: int


class ReceiptSeal:
    """Seals receipts with a MAC under `key`, the same on every service of a deployment."""

    def __init__(self, key: bytes) -> None:
        if not key:
            raise ValueError("key must not be empty")
        self._key = key

    def _mac(self, fields: list[object], topic: str, group: str) -> bytes:
        signed = msgpack.packb([topic, group, *fields], use_bin_type=True)
        return hmac.new(self._key, signed, hashlib.sha256).digest()[:MAC_BYTES]

    def issue(self, receipt: Receipt, topic: str, group: str) -> str:
        fields: list[object] = [
            receipt.shard,
            receipt.entry_id,
            receipt.job_id,
            receipt.pulled_ms,
            receipt.consumer,
            receipt.deliveries,
        ]
        packed = msgpack.packb([*fields, self._mac(fields, topic, group)], use_bin_type=True)
        return base64.urlsafe_b64encode(packed).rstrip(b"=").decode("ascii")

    def open(self, text: object, where: str, topic: str, group: str) -> Receipt:
        """The receipt `text` names, if its MAC verifies; else `InvalidArgumentError` on `where`."""
        fields: object = None
        if isinstance(text, str) and len(text) <= MAX_RECEIPT_CHARS:
            try:
                fields = msgpack.unpackb(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            except (ValueError, TypeError, binascii.Error, msgpack.UnpackException):
                fields = None
        if (
            isinstance(fields, list)
            and len(fields) == 7
            and isinstance(fields[0], int)
            and fields[0] >= 0
            and isinstance(fields[1], str)
            and _ENTRY_ID.fullmatch(fields[1])
            and isinstance(fields[2], str)
            and isinstance(fields[3], int)
            and isinstance(fields[4], str)
            and isinstance(fields[5], int)
            and fields[5] >= 1
            and isinstance(fields[6], bytes)
            and hmac.compare_digest(fields[6], self._mac(fields[:6], topic, group))
        ):
            return Receipt(*fields[:6])
        raise InvalidArgumentError(
            where,
            f"{where} is not a receipt this service gave for this topic and group "
            f"(altered, forged, or another's), got {text!r:.60}; nothing was changed",
        )

    def open_all(self, receipts: Sequence[object], topic: str, group: str) -> list[Receipt]:
        """Open 1 to `MAX_RECEIPTS` receipts, all before any is settled."""
        if isinstance(receipts, str | bytes) or not isinstance(receipts, Sequence):
            raise InvalidArgumentError("receipts", "receipts must be a list of receipts")
        if not 1 <= len(receipts) <= MAX_RECEIPTS:
            raise InvalidArgumentError(
                "receipts",
                f"receipts must hold 1 to {MAX_RECEIPTS} receipts, got {len(receipts)}",
            )
        return [self.open(r, f"receipts[{i}]", topic, group) for i, r in enumerate(receipts)]


_SETTLED = {1: None, 0: Outcome.SETTLED_BEFORE, -1: Outcome.STALE}
"""`ack_delivered` answer -> outcome (None: as asked)."""


async def ack_receipts(
    executor: Executor, now_ms: int, topic: str, group: str, receipts: list[Receipt]
) -> list[Outcome]:
    """Ack the receipts' entries and record the successes; each receipt's outcome, in order."""
    by_shard: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(receipts):
        by_shard[r.shard].append(i)
    parts = [
        (shard, mine[i : i + ACKS_PER_CALL])
        for shard, mine in by_shard.items()
        for i in range(0, len(mine), ACKS_PER_CALL)
    ]
    calls = [
        settle.ack_delivered(
            ShardKeys(topic, shard),
            group,
            [_done(receipts[i], now_ms) for i in part],
            [(receipts[i].consumer, receipts[i].deliveries) for i in part],
        )
        for shard, part in parts
    ]
    outcomes = [Outcome.ACKED] * len(receipts)
    for (_, part), got in zip(parts, await executor.run(calls), strict=True):
        for i, code in zip(part, got, strict=True):
            outcomes[i] = _SETTLED[code] or Outcome.ACKED
    return outcomes


def _done(r: Receipt, now_ms: int) -> settle.Done:
    return (r.entry_id, r.job_id, now_ms, now_ms - r.pulled_ms, None, 0)  # attempt: not known


async def nack_receipts(
    executor: Executor,
    now_ms: int,
    policy: RetryPolicy,
    topic: str,
    group: str,
    receipts: list[Receipt],
    delay_ms: int | None,
) -> list[Outcome]:
    """Retry or dead-letter the receipts' jobs; each receipt's outcome, in order."""
    reads = [consume.read_ready(ShardKeys(topic, r.shard), r.entry_id, 1) for r in receipts]
    found = await executor.run(reads) if reads else []
    outcomes = [Outcome.SETTLED_BEFORE] * len(receipts)  # trimmed: it was acked long ago
    calls: list[Call[Any]] = []
    asked: list[int] = []
    for i, (r, rows) in enumerate(zip(receipts, found, strict=True)):
        if not rows or rows[0][0] != r.entry_id:
            continue
        keys = ShardKeys(topic, r.shard)
        delivery = (r.consumer, r.deliveries)
        asked.append(i)
        try:
            job = Job.from_entry(r.entry_id, rows[0][1], r.shard)
        except ValueError as exc:
            entry = (r.entry_id, Reason.MALFORMED, str(exc))
            calls.append(settle.dead_letter_delivered(keys, group, entry, delivery))
            continue
        error = f"nacked by a pull consumer (attempt {job.attempt} of {job.max_attempts})"
        if job.attempt >= job.max_attempts:
            entry = (r.entry_id, Reason.FAILED, error)
            calls.append(settle.dead_letter_delivered(keys, group, entry, delivery))
            continue
        wait = policy.backoff_ms(job.attempt, random.random()) if delay_ms is None else delay_ms
        envelope = retry_envelope(job, rows[0][1][Field.PAYLOAD], now_ms, group)
        calls.append(
            settle.retry(keys, group, r.entry_id, job.id, wait, envelope, error, now_ms, delivery)
        )
    for i, reply in zip(asked, await executor.run(calls) if calls else [], strict=True):
        if isinstance(reply, settle.Retried) and reply.cancelled:
            outcomes[i] = Outcome.CANCELLED
        elif isinstance(reply, settle.Retried):
            code = 1 if reply.done else -1 if reply.stale else 0
            outcomes[i] = _SETTLED[code] or Outcome.RETRIED
        else:
            outcomes[i] = _SETTLED[int(reply)] or Outcome.DEAD_LETTERED
    return outcomes


MAX_PULL = 1000
MAX_WAIT_MS = 30_000
PAUSED_POLL_MS = 250
"""While its group is paused, how often a waiting pull reads the pause state again."""
CLUSTER_BLOCK_MS = 100
MAX_BLOCK_MS = 2000  # One blocking read at most (and within the socket timeout: block_ms).
FILL_ROUNDS = 4


@dataclass(frozen=True, slots=True)
class Pulled:
    """A pulled job, its payload as JSON types (`jsonable`) and the receipt that acks or
    nacks it. No handler runs here, so no `current_job()` is set: the pulled job (its
    fields in the answer) is the consumer's whole context (docs/guides/pull.md)."""

    job: Job
    payload: Any
    receipt: str
    size: int = 0
    """Bytes of its stream entry's fields as stored (what `Puller.max_bytes` counts)."""


class Paused(StrEnum):
    """Why a pull handed out nothing: what is paused (`wheelq.core.pause`)."""

    TOPIC = "topic"
    """The topic as a whole: every group on it."""
    GROUP = "group"
    """The pulling group on its own."""


@dataclass(frozen=True, slots=True)
class Pulls:
    """What one pull hands out: its jobs, or none and why (`paused`, None: not paused)."""

    jobs: list[Pulled]
    paused: Paused | None = None


class Puller:
    """Pull, ack and nack for any topic and group; `receipt_secret` empty: a key kept in Redis."""

    def __init__(
        self,
        executor: AsyncExecutor,
        clock: Clock,
        *,
        visibility_timeout_ms: int = 30_000,
        max_deliveries: int = 5,
        policy: RetryPolicy | None = None,
        claim_interval_ms: int = 1000,
        receipt_secret: str = "",
        pull_connections: int = 32,
        max_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self._executor = executor
        self.max_bytes = max_bytes
        """Stored entry bytes one pull hands out (at least one job, however large)."""
        self._largest: dict[tuple[str, str], int] = {}
        """The largest entry the group's last pull read (bytes): how many a read asks for."""
        self._reads = BlockingReads(executor, pull_connections)
        self._clock = clock
        self.visibility_timeout_ms = visibility_timeout_ms
        self.max_deliveries = max_deliveries
        self.policy = policy or RetryPolicy()
        self.claim_interval_ms = claim_interval_ms
        self._shards: dict[str, int] = {}
        self._groups: set[tuple[str, str]] = set()
        self._cursors: dict[tuple[str, str, int], str] = {}
        self._claimed_at: dict[tuple[str, str], int] = {}
        self._turn = 0
        self._spare: dict[tuple[str, str], list[tuple[Pulled, int, str]]] = {}
        """Entries read past a pull's count, with their read time (ms) and consumer."""
        self.dead_lettered = 0
        self._closing = asyncio.Event()
        self._seal = ReceiptSeal(receipt_secret.encode()) if receipt_secret else None

    async def seal(self) -> ReceiptSeal:
        """The receipt seal: the configured secret, else the deployment's key in Redis."""
        if self._seal is None:
            calls = consume.shared_secret(RECEIPT_KEY, secrets.token_hex(32))
            key = (await self._executor.run(calls))[-1]
            self._seal = ReceiptSeal(key.encode())
        return self._seal

    def close(self) -> None:
        """End every wait now: waiting pulls answer with none, later ones do not wait."""
        self._closing.set()

    async def aclose(self) -> None:
        self.close()
        await self._reads.aclose()

    async def shards(self, topic: str) -> int:
        """The topic's shard count, or `UnknownTopicError`."""
        validate_topic(topic)
        count = self._shards.get(topic)
        if count is None:
            (count,) = await self._executor.run([topics.topic_shards(topic)])
            if count is None:
                raise UnknownTopicError(topic)
            self._shards[topic] = count
        return count

    async def pull(
        self, topic: str, group: str, consumer: str, count: int, wait_ms: int = 0
    ) -> Pulls:
        """Up to `count` jobs for `group`, waiting up to `wait_ms` when there are none.

        While the topic or the group is paused, it hands out none (nothing is read or taken
        over, as a paused worker takes nothing) and says so in `Pulls.paused`, after waiting
        up to `wait_ms` for a resume (read again every `PAUSED_POLL_MS`).

        Raises:
            InvalidArgumentError: `count` not in [1, 1000], `wait_ms` not in [0, 30000].
            UnknownTopicError: The topic is not registered.
            UnknownGroupError: No shard has the group.
        """
        int_in("max", count, 1, MAX_PULL)
        int_in("wait_ms", wait_ms, 0, MAX_WAIT_MS)
        shards = await self.shards(topic)
        await self.seal()  # before any read: every job read gets its receipt
        keys = list(all_shards(topic, shards))
        await self._join(topic, group, keys)
        deadline = self._clock.now_ms() + wait_ms
        paused = await self._paused_until_resumed(topic, group, deadline)
        if paused is not None:
            return Pulls([], paused)
        wait_ms = max(0, deadline - self._clock.now_ms())
        out = self._take_spare(topic, group, count)
        spared = len(out)
        if len(out) < count and sum(p.size for p in out) < self.max_bytes:
            wanted = self._affordable(topic, group, count - len(out), out, len(keys))
            out += await self._claim(topic, group, consumer, keys, wanted)
        if not out:
            out = await self._read_new(topic, group, consumer, keys, count, wait_ms)
        if len(out) > spared:
            self._largest[(topic, group)] = max(p.size for p in out[spared:])
        n = self._within(out, count)  # never fewer than `spared`: they were within it
        if len(out) > n:
            self._keep_spare(topic, group, consumer, out[n:])
        return Pulls(out[:n])

    def _within(self, jobs: Sequence[Pulled], count: int) -> int:
        """How many of `jobs`, in order, one answer hands out: at most `count`, and only as
        many as keep their bytes within `max_bytes` (but at least one)."""
        total = 0
        for i, p in enumerate(jobs[:count]):
            total += p.size
            if total > self.max_bytes and i > 0:
                return i
        return min(count, len(jobs))

    def _affordable(
        self, topic: str, group: str, wanted: int, got: Sequence[Pulled], shards: int
    ) -> int:
        """How many entries to read after `got`: `wanted`, fewer when that many entries as
        large as the largest seen (in `got`, or in the group's last pull) would pass
        `max_bytes`; one a shard while no size is known. At least one."""
        largest = max([self._largest.get((topic, group), 0), *(p.size for p in got)])
        if largest == 0:
            return min(wanted, shards)
        left = self.max_bytes - sum(p.size for p in got)
        return max(1, min(wanted, left // largest))

    async def _paused_until_resumed(
        self, topic: str, group: str, deadline_ms: int
    ) -> Paused | None:
        """What is paused of `group` once resumed (None), `deadline_ms` passed or closing."""
        while True:
            (state,) = await self._executor.run([pauses.read_pause_state(topic, [group])])
            if not state.group_paused(group):
                return None
            left_ms = min(deadline_ms - self._clock.now_ms(), PAUSED_POLL_MS)
            if left_ms <= 0 or self._closing.is_set():
                return Paused.TOPIC if state.paused else Paused.GROUP
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), left_ms / 1000)

    def _take_spare(self, topic: str, group: str, count: int) -> list[Pulled]:
        """Entries read past an earlier pull's count, while well inside the visibility timeout."""
        spare = self._spare.pop((topic, group), [])
        now = self._clock.now_ms()
        # one past its expiry is not handed out: still pending, it is claimed and dropped then
        fresh = [
            (p, read_ms, consumer)
            for p, read_ms, consumer in spare
            if now - read_ms < self.visibility_timeout_ms // 2
            and (p.job.expires is None or not expired(p.job.expires, now))
        ]
        n = self._within([p for p, _, _ in fresh], count)
        if len(fresh) > n:
            self._spare[(topic, group)] = fresh[n:]
        # Still the delivery they were read in: pending to its consumer, not delivered since.
        return [
            Pulled(p.job, p.payload, self._receipt(topic, group, p.job, now, consumer), p.size)
            for p, _, consumer in fresh[:n]
        ]

    def _keep_spare(self, topic: str, group: str, consumer: str, extra: list[Pulled]) -> None:
        now = self._clock.now_ms()
        self._spare.setdefault((topic, group), []).extend((p, now, consumer) for p in extra)

    async def _join(self, topic: str, group: str, keys: list[ShardKeys]) -> None:
        """Check the group exists on some shard (re-made where its stream vanished)."""
        if (topic, group) in self._groups:
            return
        found = await self._executor.run([groups.delete_group(k, group, "check") for k in keys])
        missing = [
            k for k, f in zip(keys, found, strict=True) if f.outcome == GroupOutcome.NO_GROUP
        ]
        if len(missing) == len(keys):
            raise UnknownGroupError(topic, group)
        calls = [consume.create_group(k, group, "0") for k in missing]
        for reply in await self._executor.run(calls, return_exceptions=True) if calls else []:
            if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
                raise reply
        self._groups.add((topic, group))

    async def _claim(
        self, topic: str, group: str, consumer: str, keys: list[ShardKeys], count: int
    ) -> list[Pulled]:
        now = self._clock.now_ms()
        if now - self._claimed_at.get((topic, group), -(10**15)) < self.claim_interval_ms:
            return []
        self._claimed_at[(topic, group)] = now
        chosen, share = self._shares(keys, count)
        calls = [
            consume.claim(
                k,
                group,
                consumer,
                self.visibility_timeout_ms,
                self._cursors.get((topic, group, k.shard), streams.ZERO_ID),
                share,
                self.max_deliveries,
            )
            for k in chosen
        ]
        try:
            replies = await self._executor.run(calls)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._groups.discard((topic, group))  # deleted since: check again
            await self._join(topic, group, keys)
            return []
        out: list[Pulled] = []
        for k, got in zip(chosen, replies, strict=True):
            self._cursors[(topic, group, k.shard)] = got.cursor
            self.dead_lettered += got.dead_lettered
            out += await self._accept(group, consumer, k, got.entries, got.deliveries)
        return out

    def _shares(self, keys: list[ShardKeys], count: int) -> tuple[list[ShardKeys], int]:
        """Every shard, starting at the next in turn, and each one's share of `count`."""
        self._turn = (self._turn + 1) % len(keys)
        return keys[self._turn :] + keys[: self._turn], max(1, count // len(keys))

    async def _read_new(
        self,
        topic: str,
        group: str,
        consumer: str,
        keys: list[ShardKeys],
        count: int,
        wait_ms: int,
    ) -> list[Pulled]:
        """New entries, waiting up to `wait_ms` for some on `BlockingReads`."""
        deadline = self._clock.now_ms() + wait_ms
        wanted = len(keys) if self._executor.cluster else 1
        async with self._reads.slots(wanted, wait_ms / 1000, self._closing) as taken:
            if not taken:
                return []
            reach = taken if self._executor.cluster else len(keys)  # one read: every shard
            out: list[Pulled] = []
            full: list[ShardKeys] = []
            first = self._affordable(topic, group, count, (), len(keys))
            while not out:
                left = deadline - self._clock.now_ms()
                block = None if left <= 0 or self._closing.is_set() else left
                # With fewer slots than shards (a cluster), a round reads some of them; the
                # next round starts at the next shard (`_shares`).
                chosen, share = self._shares(keys, first)
                out, full = await self._read(
                    topic, group, consumer, keys, chosen[:reach], share, block
                )
                if block is None:
                    break
            # A read asks each shard for a share of `count`: while shards gave a full share
            # (they may have more), read on from them without blocking, so a pull of n
            # returns n when n are there, as far as `max_bytes` goes.
            for _ in range(FILL_ROUNDS):
                left_n = count - len(out)
                if not full or left_n <= 0 or sum(p.size for p in out) >= self.max_bytes:
                    break
                left_n = self._affordable(topic, group, left_n, out, len(keys))
                more, full = await self._read(
                    topic, group, consumer, keys, full, max(1, left_n // len(full)), None
                )
                out += more
            return out

    async def _read(
        self,
        topic: str,
        group: str,
        consumer: str,
        keys: list[ShardKeys],
        chosen: list[ShardKeys],
        share: int,
        block_ms: int | None,
    ) -> tuple[list[Pulled], list[ShardKeys]]:
        """Read `share` entries of each of `chosen`; the jobs, and the shards that gave all."""
        executor = self._reads.executor()
        if self._executor.cluster:
            block = None if block_ms is None else min(block_ms, CLUSTER_BLOCK_MS)
            calls = [consume.read_group([k], group, consumer, share, block) for k in chosen]
        else:
            block = (
                None if block_ms is None else self._executor.block_ms(min(block_ms, MAX_BLOCK_MS))
            )
            calls = [consume.read_group(chosen, group, consumer, share, block)]
        reads = asyncio.gather(*(executor.run([c]) for c in calls))
        try:
            if block is not None:
                await wait_for_either(reads, self._closing, None)
                if not reads.done():  # close(): the reads' connections are dropped
                    reads.cancel()
                    await asyncio.gather(reads, return_exceptions=True)
                    return [], []
            replies = await reads
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._groups.discard((topic, group))  # deleted, or its stream was: check again
            await self._join(topic, group, keys)
            return [], []
        by_shard = {k.shard: k for k in keys}
        out: list[Pulled] = []
        full: list[ShardKeys] = []
        for (got,) in replies:
            entries: dict[int, list[streams.Entry]] = defaultdict(list)
            for shard, entry in got:
                entries[shard].append(entry)
            for shard, found in entries.items():
                out += await self._accept(group, consumer, by_shard[shard], found, ())
                if len(found) >= share:
                    full.append(by_shard[shard])
        return out, full

    async def _accept(
        self,
        group: str,
        consumer: str,
        keys: ShardKeys,
        entries: list[streams.Entry],
        deliveries: Sequence[int],
    ) -> list[Pulled]:
        """Jobs with receipts; malformed entries (one whose payload cannot be rendered as
        JSON too) dead-lettered each on its own, another group's acked, expired ones acked
        unrun (noted expired)."""
        now = self._clock.now_ms()
        out: list[Pulled] = []
        calls: list[Call[int]] = []
        gone: list[settle.Expired] = []  # read past their expiry: acked unrun, noted expired
        for i, (entry_id, fields) in enumerate(entries):
            try:
                job = Job.from_entry(
                    entry_id, fields, keys.shard, deliveries[i] if deliveries else 1
                )
                if job.group is not None and job.group != group:
                    calls.append(settle.ack(keys, group, [entry_id]))
                    continue
                if job.expires is not None and expired(job.expires, now):
                    gone.append((entry_id, job.id, now, job.attempt))
                    continue
                payload = jsonable(job.payload, exact=True)
            except ValueError as exc:
                calls.append(
                    settle.dead_letter(keys, group, [(entry_id, Reason.MALFORMED, str(exc))])
                )
                continue
            receipt = self._receipt(keys.topic, group, job, now, consumer)
            out.append(Pulled(job, payload, receipt, sum(map(len, fields.values()))))
        if gone:
            calls.append(settle.ack_expired(keys, group, gone))
        if calls:
            await self._executor.run(calls)
        return out

    def _receipt(self, topic: str, group: str, job: Job, pulled_ms: int, consumer: str) -> str:
        assert self._seal is not None  # pull() called seal() first
        receipt = Receipt(job.shard, job.entry_id, job.id, pulled_ms, consumer, job.deliveries)
        return self._seal.issue(receipt, topic, group)

    async def ack(self, topic: str, group: str, receipts: Sequence[object]) -> list[Outcome]:
        """Ack pulled jobs: ``ACKED``, ``SETTLED_BEFORE`` or ``STALE`` each; a foreign receipt
        acks none."""
        parsed = (await self.seal()).open_all(receipts, topic, group)
        shards = await self.shards(topic)
        now = self._clock.now_ms()
        return await _on_shards(
            parsed, shards, lambda mine: ack_receipts(self._executor, now, topic, group, mine)
        )

    async def nack(
        self, topic: str, group: str, receipts: Sequence[object], delay_ms: int | None = None
    ) -> list[Outcome]:
        """Retry after `delay_ms` (None: backoff) or dead-letter pulled jobs; each one's outcome.
        A foreign receipt or `delay_ms` outside [0, 30 days] changes none."""
        parsed = (await self.seal()).open_all(receipts, topic, group)
        if delay_ms is not None:
            int_in("delay_ms", delay_ms, 0, 30 * 86_400_000)
        shards = await self.shards(topic)
        now = self._clock.now_ms()
        return await _on_shards(
            parsed,
            shards,
            lambda mine: nack_receipts(
                self._executor, now, self.policy, topic, group, mine, delay_ms
            ),
        )


async def _on_shards(
    receipts: list[Receipt],
    shards: int,
    settle: Callable[[list[Receipt]], Awaitable[list[Outcome]]],
) -> list[Outcome]:
    """`settle` the receipts; one for a shard the topic lacks is ``SETTLED_BEFORE``."""
    mine = [i for i, r in enumerate(receipts) if r.shard < shards]
    outcomes = [Outcome.SETTLED_BEFORE] * len(receipts)
    if mine:
        for i, outcome in zip(mine, await settle([receipts[i] for i in mine]), strict=True):
            outcomes[i] = outcome
    return outcomes
