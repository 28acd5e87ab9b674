"""Key names, hash tags and shard placement: the one place Redis key strings are made.

Every key of one shard carries the hash tag ``{topic:shard}``, so each Lua
script touches exactly one Redis Cluster slot:

```
{emails:3}:delayed   ZSET    job id -> due time (ms, Redis clock)
{emails:3}:jobs      HASH    job id -> msgpack envelope
{emails:3}:ready     STREAM  fired jobs, read by consumer groups
{emails:3}:callbacks STREAM  fired jobs that carry an HTTP callback, read by the deliverer's group
{emails:3}:dead      STREAM  dead letters: jobs out of attempts or deliveries, malformed entries
{emails:3}:lease     STRING  token of the scheduler node leading the shard
{emails:3}:horizon   STRING  ms up to which the leader has preloaded (expires with the lease)
{emails:3}:inbox     LIST    "due:id" of jobs written at or below the horizon
{emails:3}:wake      channel the same "due:id", published for a prompt pick-up
{emails:3}:spooled   ZSET    token of a spooled write replayed here -> Redis ms it was applied
{emails:3}:history   HASH    job id -> its latest entry; "id<US>group" -> that group's outcome
{emails:3}:history_old HASH  the previous generation of the history (dropped whole, see trim)
{emails:3}:cancelled ZSET    job id -> Redis ms it was cancelled
{emails:3}:retries   ZSET    "id<US>group<US>entry" -> 0: retries stored under an alias member
{emails:3}:debounce  HASH    job id -> ms its debounce series must fire by (max_wait_ms)
{emails:3}:limits    HASH    "pending" / "ready" -> this shard's share of the topic's limits
{emails:3}:schedules HASH    schedule name -> its definition (schedules whose home is shard 3)
{emails:3}:sched_state HASH  schedule name -> ms planned up to ("p:" + ms while paused)
{emails:3}:sched_epoch STRING fencing epoch of the shard's schedule planner
{emails:3}:sched_marks HASH  schedule name -> "epoch:ms": its latest run written to shard 3
wheelq:scheduled     SET     "topic:shard" of every shard that is home to schedules
wheelq:topics        HASH    topic -> shard count (the topic registry)
wheelq:callback_topics SET   topics that have had a job with a callback (the deliverer's list)
wheelq:nodes:emails  ZSET    scheduler node id -> membership expiry (ms), per topic
```

A job's shard is ``crc32(job id) % shards``: stable, and easy to compute in
any language. Registry entries are checked when read (`parse_shard_count`,
`parse_registry`): anything but a topic name with a count in [1, 1024] is a
`TopicConfigError`, never a shard count used as found.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from wheelq.core.checks import int_in
from wheelq.errors import (
    InvalidArgumentError,
    InvalidJobIdError,
    InvalidTopicError,
    TopicConfigError,
)

TOPICS_KEY = "wheelq:topics"
MEMBERSHIP_KEY = "wheelq:membership"
"""A counter every scheduler node raises after it joins or leaves a topic's node set; nodes
read it every check and read the node sets again only when it moved (or a known node's
heartbeat ran out)."""
SCHEDULED_KEY = "wheelq:scheduled"
CALLBACK_TOPICS_KEY = "wheelq:callback_topics"
"""Topics a producer wrote a job with a callback to: where `wheelq serve` delivers."""
RECEIPT_KEY = "wheelq:receipt_key"
"""The HMAC key of pull receipts when ``[serve] receipt_secret`` is unset: made once at
random by the first `wheelq serve` (SET NX), read by every other (`wheelq.worker.pull`)."""

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
)
"""The `ShardKeys` attributes of every key a shard stores, in `ShardKeys.data_keys` order."""

_TOPIC_RE = re.compile(rf"[A-Za-z0-9_.\-]{{1,{MAX_TOPIC_LENGTH}}}")
_COUNT_RE = re.compile(rb"[1-9][0-9]{0,3}")


def validate_topic(topic: object) -> str:
    """Return `topic` if it is a valid topic name.

    Raises:
        InvalidTopicError: Not a str of 1-100 characters from [A-Za-z0-9_.-].
    """
    if not isinstance(topic, str) or not _TOPIC_RE.fullmatch(topic):
        raise InvalidTopicError(
            "topic",
            f"topic must be 1-{MAX_TOPIC_LENGTH} characters from [A-Za-z0-9_.-], got {topic!r}",
        )
    return topic


def topic_set(topics: object) -> frozenset[str]:
    """Validate one topic name (a str) or an iterable of them, as a set.

    A str is one topic, never the characters of its name.

    Raises:
        InvalidTopicError: A name is not a valid topic name.
        InvalidArgumentError: `topics` is neither a str nor an iterable of them, or is empty.
    """
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
    """Return `job_id` if it can be used as a job id.

    Raises:
        InvalidJobIdError: Not a non-empty str of at most 256 UTF-8 bytes
            without control characters.
    """
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
    """Return `group` if it can name a consumer group.

    Raises:
        InvalidArgumentError: Not a printable str of 1-200 characters.
    """
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
    """Return `shards` if it is a valid shard count.

    Raises:
        InvalidArgumentError: Not an int in [1, 1024].
    """
    return int_in("shards", shards, 1, MAX_SHARDS)


def parse_shard_count(topic: str, value: object) -> int:
    """A shard count read from the topic registry, checked: a decimal int in [1, 1024].

    Raises:
        TopicConfigError: The stored value is anything else (the registry was written by
            hand or by something other than wheelq).
    """
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
        """Every topic's shard count.

        Raises:
            TopicConfigError: Some entry is invalid (the first, by topic name).
        """
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
"""The streams a job can fire into: ``ready`` (read by the topic's consumer groups) and
``callbacks`` (jobs that carry an HTTP callback, read by the deliverer's group only)."""


@dataclass(frozen=True, slots=True)
class ShardKeys:
    """The Redis names of one shard of one topic.

    `stream` names the stream a consumer of this view reads: ``ready`` by default, or
    ``callbacks`` for the deliverer (`wheelq.callbacks.delivery`).
    """

    topic: str
    shard: int
    lane: str = READY
    """Which of `STREAMS` `stream` is."""

    @property
    def tag(self) -> str:
        return f"{{{self.topic}:{self.shard}}}"

    @property
    def delayed(self) -> str:
        return f"{self.tag}:delayed"

    @property
    def jobs(self) -> str:
        return f"{self.tag}:jobs"

    @property
    def ready(self) -> str:
        return f"{self.tag}:ready"

    @property
    def callbacks(self) -> str:
        return f"{self.tag}:callbacks"

    @property
    def stream(self) -> str:
        """The stream this view's consumer group reads (`lane`)."""
        return f"{self.tag}:{self.lane}"

    @property
    def dead(self) -> str:
        return f"{self.tag}:dead"

    @property
    def lease(self) -> str:
        return f"{self.tag}:lease"

    @property
    def horizon(self) -> str:
        return f"{self.tag}:horizon"

    @property
    def inbox(self) -> str:
        return f"{self.tag}:inbox"

    @property
    def spooled(self) -> str:
        """Tokens of the producer spool's writes this shard applied (replayed exactly once)."""
        return f"{self.tag}:spooled"

    @property
    def history(self) -> str:
        """Where each job last fired and what each group made of it (`wheelq.core.history`)."""
        return f"{self.tag}:history"

    @property
    def history_old(self) -> str:
        """The history's previous generation: read after `history`, dropped whole once the
        stream is trimmed past every entry it can name."""
        return f"{self.tag}:history_old"

    @property
    def cancelled(self) -> str:
        """Jobs cancelled while pending, with when (kept as long as the history)."""
        return f"{self.tag}:cancelled"

    @property
    def retries(self) -> str:
        """A retry stored under an alias member ("id<US>group<US>entry": the id's plain member
        was taken), all at score 0 so one id's aliases are one lex range (cancel, reschedule)."""
        return f"{self.tag}:retries"

    @property
    def debounce(self) -> str:
        """Debounced jobs with a max wait: the ms each series must fire by."""
        return f"{self.tag}:debounce"

    @property
    def limits(self) -> str:
        """This shard's share of the topic's backpressure limits (`wheelq.core.limits`)."""
        return f"{self.tag}:limits"

    @property
    def schedules(self) -> str:
        """Definitions of the schedules whose home is this shard (`wheelq.core.recurring`)."""
        return f"{self.tag}:schedules"

    @property
    def sched_state(self) -> str:
        """Per schedule homed here: the ms its runs are planned up to, "p:"-prefixed if paused."""
        return f"{self.tag}:sched_state"

    @property
    def sched_epoch(self) -> str:
        """The planner's fencing epoch: raised by each new planner and each pause or removal."""
        return f"{self.tag}:sched_epoch"

    @property
    def sched_marks(self) -> str:
        """Per schedule: the epoch that last wrote here and the latest run it wrote."""
        return f"{self.tag}:sched_marks"

    @property
    def data_keys(self) -> tuple[str, ...]:
        """Every key the shard stores (to drop a topic: one slot, so one DEL)."""
        return tuple(getattr(self, name) for name in DATA_KEY_NAMES)

    @property
    def wake_channel(self) -> str:
        return f"{self.tag}:wake"


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
