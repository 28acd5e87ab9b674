"""Key names, hash tags and shard placement: the one place Redis key strings are made
(docs/architecture.md#key-layout; a test checks it against this module).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from wheelq.errors import (
    InvalidArgumentError,
    InvalidJobIdError,
    InvalidTopicError,
    TopicConfigError,
    int_in,
)

TOPICS_KEY = "wheelq:topics"
MEMBERSHIP_KEY = "wheelq:membership"
SCHEDULED_KEY = "wheelq:scheduled"
CALLBACK_TOPICS_KEY = "wheelq:callback_topics"
RECEIPT_KEY = "wheelq:receipt_key"
PAUSED_KEY = "wheelq:paused"
"""HASH: ``topic`` or ``topic<US>group`` -> Redis ms it was paused (`wheelq.core.pause`)."""
PAUSED_CHANNEL = "wheelq:paused"
"""Pub/sub channel (not a key): the topic whose pauses, job events setting or due line changed,
so its workers read them again at once (worker/pause_watch.py)."""
PROCESSES_KEY = "wheelq:{processes}"
"""ZSET: live process id -> Redis ms its record expires (`wheelq.core.process`)."""
PROCESS_RECORDS_KEY = "wheelq:{processes}:records"
"""HASH: process id -> its msgpack record; one slot with `PROCESSES_KEY` (its hash tag)."""

MAX_TOPIC_LENGTH = 100
MAX_JOB_ID_BYTES = 256
MAX_SHARDS = 1024
MAX_GROUP_CHARS = 200

DATA_KEY_NAMES = (
    "delayed",
    "jobs",
    "ready",
    "dead",
    "lease",
    "followed",
    "horizon",
    "inbox",
    "spooled",
    "history",
    "history_old",
    "cancelled",
    "debounce",
    "limits",
    "schedules",
    "sched_state",
    "sched_epoch",
    "sched_marks",
    "callbacks",
    "retries",
    "waiters",
    "done",
    "events",
    "far",
    "held",
    "turns",
    "weights",
    "keyed",
    "followers",
    "notices",
    "waiting",
)
"""The `ShardKeys` attributes of every key a shard stores, in `ShardKeys.data_keys` order."""

_TOPIC_RE = re.compile(rf"[A-Za-z0-9_.\-]{{1,{MAX_TOPIC_LENGTH}}}")
_COUNT_RE = re.compile(rb"[1-9][0-9]{0,3}")


def validate_topic(topic: object) -> str:
    """`topic` if it is 1-100 characters from [A-Za-z0-9_.-], else InvalidTopicError."""
    if not isinstance(topic, str) or not _TOPIC_RE.fullmatch(topic):
        raise InvalidTopicError(
            "topic",
            f"topic must be 1-{MAX_TOPIC_LENGTH} characters from [A-Za-z0-9_.-], got {topic!r}",
        )
    return topic


def topic_set(topics: object) -> frozenset[str]:
    """One topic name (a str, never its characters) or an iterable of them, validated, as a set."""
    if isinstance(topics, str):
        return frozenset((validate_topic(topics),))
    if isinstance(topics, bytes | bytearray | Mapping) or not isinstance(topics, Iterable):
        raise InvalidArgumentError(
            "topics",
            f"topics must be a topic name or an iterable of topic names, got {topics!r:.60}",
        )
    names = frozenset(validate_topic(t) for t in topics)
    if not names:
        raise InvalidArgumentError(
            "topics", "topics must name at least one topic (None: every topic), got none"
        )
    return names


def validate_job_id(job_id: object) -> str:
    """`job_id` if it is a printable str of 1-256 UTF-8 bytes, else InvalidJobIdError."""
    if (
        not isinstance(job_id, str)
        or not job_id
        or len(job_id.encode("utf-8", "surrogatepass")) > MAX_JOB_ID_BYTES
        or not job_id.isprintable()
    ):
        raise InvalidJobIdError(
            "job_id",
            f"job_id must be a non-empty printable str of at most {MAX_JOB_ID_BYTES} "
            f"UTF-8 bytes, got {job_id!r}",
        )
    return job_id


def validate_group(group: object) -> str:
    """`group` if it is a printable str of 1-200 characters, else InvalidArgumentError."""
    if (
        not isinstance(group, str)
        or not group
        or len(group) > MAX_GROUP_CHARS
        or not group.isprintable()
    ):
        raise InvalidArgumentError(
            "group",
            f"group must be a printable str of 1-{MAX_GROUP_CHARS} characters, got {group!r:.80}",
        )
    return group


def validate_shards(shards: object) -> int:
    """`shards` if it is an int in [1, 1024], else InvalidArgumentError."""
    return int_in("shards", shards, 1, MAX_SHARDS)


def parse_shard_count(topic: str, value: object) -> int:
    """A shard count read from the registry: a decimal int in [1, 1024], else TopicConfigError."""
    raw = value.encode() if isinstance(value, str) else value
    if isinstance(raw, bytes) and _COUNT_RE.fullmatch(raw) and int(raw) <= MAX_SHARDS:
        return int(raw)
    raise TopicConfigError(
        f"topic {topic!r} has shard count {value!r:.40} in {TOPICS_KEY}; a shard count must "
        f"be an int in [1, {MAX_SHARDS}] (fix or delete the registry entry)"
    )


@dataclass(frozen=True, slots=True)
class Registry:
    """The topic registry as read: valid entries, and the errors of invalid ones."""

    shards: dict[str, int]
    """Topic -> shard count, for every valid entry."""
    invalid: dict[str, TopicConfigError]
    """Topic -> why its entry cannot be used."""

    def check(self) -> dict[str, int]:
        """Every topic's shard count; raises the first invalid entry's error, by topic name."""
        if self.invalid:
            raise self.invalid[min(self.invalid)]
        return dict(self.shards)


def parse_registry(raw: Mapping[bytes, bytes]) -> Registry:
    """Parse the registry hash (HGETALL of ``wheelq:topics``) entry by entry."""
    shards: dict[str, int] = {}
    invalid: dict[str, TopicConfigError] = {}
    for name, value in raw.items():
        topic = name.decode("utf-8", "replace")
        try:
            if not _TOPIC_RE.fullmatch(topic):
                raise TopicConfigError(
                    f"{TOPICS_KEY} has an entry {topic!r:.120}, which is not a topic name "
                    f"(1-{MAX_TOPIC_LENGTH} characters from [A-Za-z0-9_.-])"
                )
            shards[topic] = parse_shard_count(topic, value)
        except TopicConfigError as exc:
            invalid[topic] = exc
    return Registry(shards, invalid)


def shard_of(job_id: str, shards: int) -> int:
    """The shard a job id lives in: ``crc32(utf-8 id) % shards``."""
    return zlib.crc32(job_id.encode("utf-8", "surrogatepass")) % shards


READY = "ready"
CALLBACKS = "callbacks"
STREAMS = (READY, CALLBACKS)
"""The streams a job can fire into: ``ready`` (consumer groups) and ``callbacks`` (deliverer)."""


class _Key:
    """A key of the shard named after its attribute: ``{topic:shard}:<name>``."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.suffix = ":" + name

    def __get__(self, keys: ShardKeys, owner: object = None) -> str:
        return keys.tag + self.suffix


@dataclass(frozen=True, slots=True)
class ShardKeys:
    """The Redis names of one shard of one topic; `lane` is the stream its consumer reads."""

    topic: str
    shard: int
    lane: str = READY

    delayed = _Key()
    jobs = _Key()
    ready = _Key()
    callbacks = _Key()
    dead = _Key()
    lease = _Key()
    followed = _Key()
    horizon = _Key()
    inbox = _Key()
    spooled = _Key()
    history = _Key()
    history_old = _Key()
    cancelled = _Key()
    retries = _Key()
    debounce = _Key()
    limits = _Key()
    schedules = _Key()
    sched_state = _Key()
    sched_epoch = _Key()
    sched_marks = _Key()
    waiters = _Key()
    done = _Key()
    events = _Key()
    far = _Key()
    held = _Key()
    turns = _Key()
    weights = _Key()
    keyed = _Key()
    followers = _Key()
    notices = _Key()
    waiting = _Key()

    @property
    def tag(self) -> str:
        return f"{{{self.topic}:{self.shard}}}"

    @property
    def stream(self) -> str:
        """The stream this view's consumer group reads (`lane`)."""
        return f"{self.tag}:{self.lane}"

    @property
    def data_keys(self) -> tuple[str, ...]:
        """Every key the shard stores (to drop a topic: one slot, so one DEL)."""
        return tuple(getattr(self, name) for name in DATA_KEY_NAMES)

    @property
    def wake_channel(self) -> str:
        return f"{self.tag}:wake"


def result_key(keys: ShardKeys, field: str) -> str:
    """A result kept for a task's ``result_ttl`` (a STRING with that TTL), in the shard's slot;
    `field` is the history field (``id<US>group``) whose ``S`` record says it is there."""
    return f"{keys.tag}:result:{field}"


def selection_key(keys: ShardKeys, name: str) -> str:
    """A bulk action's selection of the shard's jobs (`wheelq.core.bulk_actions`), in its slot."""
    return f"{keys.tag}:bulk:{name}"


def selection_stamps_key(keys: ShardKeys, name: str) -> str:
    """The stamps of a bulk action's selected jobs (which write put each there), in its slot."""
    return selection_key(keys, name) + ":stamps"


def selection_mark_key(topic: str, name: str) -> str:
    """A bulk action's selection is open (acts on it may go on): in shard 0's slot."""
    return selection_key(ShardKeys(topic, 0), name) + ":open"


def key_list_key(keys: ShardKeys, key: str) -> str:
    """The key index's list of the shard's jobs of `key` (``store/lua/includes/keyed.lua``
    writes it; its count is in `ShardKeys.keyed`)."""
    return f"{keys.keyed}:{key}"


def lane_key(keys: ShardKeys, lane: str) -> str:
    """One lane of the shard's due line (docs/architecture.md, "The due line"): ``""`` the
    shared lane, ``"k:<key>"`` a key's; the scripts make it from `ShardKeys.held`."""
    return f"{keys.tag}:lane:{lane}"


def early_key(keys: ShardKeys, token: str) -> str:
    """Outcomes heard before the waiting job of `token` was written (``resolve.lua`` makes it
    from `ShardKeys.waiting`; `wheelq.core.follow`)."""
    return f"{keys.waiting}:{token}"


def children_key(keys: ShardKeys, job_id: str) -> str:
    """A join's children, in order, on its parent's shard (``resolve.lua`` makes it from
    `ShardKeys.waiting`; `wheelq.core.follow`)."""
    return f"{keys.tag}:children:{job_id}"


def joined_key(keys: ShardKeys, token: str) -> str:
    """A join's references still waited on (``resolve.lua`` makes it from
    `ShardKeys.waiting`; `wheelq.core.follow`)."""
    return f"{keys.waiting}:{token}:left"


def far_leaf_key(keys: ShardKeys, leaf: int | str) -> str:
    """A far-tier leaf's list of records (the scripts make it from `ShardKeys.far`)."""
    return f"{keys.far}:{leaf}"


def far_buckets_key(keys: ShardKeys) -> str:
    """The far tier's leaves, in time order."""
    return f"{keys.far}:buckets"


def far_live_key(keys: ShardKeys) -> str:
    """Each far-tier leaf's count of live records."""
    return f"{keys.far}:live"


def far_index_key(keys: ShardKeys, n: int | str) -> str:
    """Hash `n` of the far tier's index (fingerprint -> location)."""
    return f"{keys.far}:ix:{n}"


def nodes_key(topic: str) -> str:
    """The sorted set of scheduler nodes serving `topic` (member: node id, score: expiry ms)."""
    return f"wheelq:nodes:{topic}"


def scheduled_member(keys: ShardKeys) -> str:
    """A shard's member in `SCHEDULED_KEY`."""
    return f"{keys.topic}:{keys.shard}"


def parse_scheduled(member: bytes | str) -> ShardKeys | None:
    """The shard a `SCHEDULED_KEY` member names, None if it is not one."""
    text = member.decode("utf-8", "replace") if isinstance(member, bytes) else member
    topic, _, shard = text.rpartition(":")
    if not _TOPIC_RE.fullmatch(topic) or not shard.isdigit() or int(shard) >= MAX_SHARDS:
        return None
    return ShardKeys(topic, int(shard))


def all_shards(topic: str, shards: int, lane: str = READY) -> list[ShardKeys]:
    """Every shard of a topic, in shard order (`lane`: the stream a consumer of them reads)."""
    return [ShardKeys(topic, s, lane) for s in range(shards)]
