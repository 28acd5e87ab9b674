"""docs/architecture.md, invariant 7: bad input raises a typed error at the call site, its
message names the parameter and the accepted range, and Redis is left exactly as it was.

Each case runs through `Client` and `AsyncClient` against a topic that already holds
a pending job and a fired one; the topic's keys (DUMP + PTTL), its node set and the
topic registry are compared before and after the bad call.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from tests.support.clients import SyncAsAsync, admin_of
from wheelq import (
    AsyncClient,
    Client,
    DuplicateJobError,
    EnqueueItem,
    InvalidArgumentError,
    InvalidDelayError,
    InvalidJobIdError,
    InvalidTopicError,
    PayloadTooLargeError,
    PayloadTypeError,
    Scheduler,
    TopicConfigError,
    WheelqError,
)
from wheelq.core.keys import TOPICS_KEY

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

PENDING_ID = "pending-1"
SHARDS = 4
MAX_PAYLOAD_BYTES = 100


@pytest.fixture(params=["sync", "async"])
async def client(request: pytest.FixtureRequest, redis_url: str, topic: str) -> AsyncIterator[Any]:
    """A client of the kind under test; `topic` has one pending and one fired job."""
    settings = {"max_payload_bytes": MAX_PAYLOAD_BYTES, "default_shards": SHARDS}
    if request.param == "sync":
        sync = Client.from_url(redis_url, **settings)
        c: Any = SyncAsAsync(sync)
    else:
        c = AsyncClient.from_url(redis_url, **settings)
    await c.enqueue(topic, {"v": 1}, delay=3600, job_id=PENDING_ID)
    await c.enqueue(topic, "fired")
    yield c
    if request.param == "sync":
        sync.close()
    else:
        await c.aclose()


def _glob(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def snapshot(r: redis.Redis, *topics: object) -> dict[Any, Any]:
    """Everything wheelq may write for `topics` (non-str names are skipped), plus the registry."""
    state: dict[Any, Any] = {TOPICS_KEY: r.hgetall(TOPICS_KEY)}
    for name in topics:
        if not isinstance(name, str):
            continue
        keys = set(r.scan_iter(match=f"*{{{_glob(name)}:*", count=1000))
        keys.add(f"wheelq:nodes:{name}".encode())
        for key in keys:
            state[key] = (r.dump(key), r.pttl(key))
    return state


Call = Callable[[Any, str], Awaitable[Any]]


@dataclass(frozen=True)
class Bad:
    """One bad call: `call(client, topic)` must raise `error` and change nothing."""

    call: Call
    error: type[Exception]
    parameter: str | None  # `err.parameter`, for InvalidArgumentError and subclasses
    says: tuple[str, ...]  # fragments the message must contain
    topic: object = None  # the bad topic name, to snapshot its keys too


def case(
    case_id: str,
    call: Call,
    error: type[Exception],
    parameter: str | None,
    says: tuple[str, ...],
    topic: object = None,
) -> Any:
    return pytest.param(Bad(call, error, parameter, says, topic), id=case_id)


TOPIC_SAYS = ("topic", "1-100", "[A-Za-z0-9_.-]")
DELAY_SAYS = ("delay", ">= 0", "315360000")
DELAY_TYPE_SAYS = ("delay", "int, float", "timedelta")
AT_SAYS = ("at", "[0, ")
AT_TYPE_SAYS = ("at", "epoch seconds", "aware datetime")
JOB_ID_SAYS = ("job_id", "256")
ATTEMPTS_SAYS = ("max_attempts", "[1, 1000]")
SHARDS_SAYS = ("shards", "[1, 1024]")
AWARE_PAST = datetime(2020, 1, 1, tzinfo=UTC)

BAD_TOPICS: list[tuple[str, object]] = [
    ("empty", ""),
    ("101-chars", "t" * 101),
    ("brace", "a{b"),
    ("closing-brace", "a}b"),
    ("colon", "a:b"),
    ("space", "a b"),
    ("newline", "ab\n"),
    ("non-ascii", "tópico"),
    ("none", None),
    ("int", 7),
    ("bytes", b"emails"),
]
TOPIC_CALLS: list[tuple[str, Callable[[Any, Any], Awaitable[Any]]]] = [
    ("enqueue", lambda c, n: c.enqueue(n, "x", delay=1)),
    ("enqueue_many", lambda c, n: c.enqueue_many(n, [EnqueueItem(payload="x")])),
    ("get", lambda c, n: c.get(n, PENDING_ID)),
    ("cancel", lambda c, n: c.cancel(n, PENDING_ID)),
    ("reschedule", lambda c, n: c.reschedule(n, PENDING_ID, delay=1)),
    ("create_topic", lambda c, n: admin_of(c).create_topic(n, 2)),
    ("stats", lambda c, n: admin_of(c).stats(n)),
]
BAD_DELAYS: list[tuple[str, object, tuple[str, ...]]] = [
    ("nan", math.nan, (*DELAY_SAYS, "got nan")),
    ("inf", math.inf, (*DELAY_SAYS, "got inf")),
    ("minus-inf", -math.inf, (*DELAY_SAYS, "got -inf")),
    ("negative", -0.001, (*DELAY_SAYS, "got -0.001")),
    ("negative-timedelta", timedelta(seconds=-1), DELAY_SAYS),
    ("over-ten-years", 10 * 365 * 86_400 + 1, DELAY_SAYS),
    ("huge-timedelta", timedelta(days=999_999), DELAY_SAYS),
    ("huge-int", 10**400, DELAY_SAYS),
    ("true", True, (*DELAY_TYPE_SAYS, "got True")),
    ("false", False, (*DELAY_TYPE_SAYS, "got False")),
    ("str", "5", DELAY_TYPE_SAYS),
    ("decimal-str", "1e3", DELAY_TYPE_SAYS),
]
DELAY_CALLS: list[tuple[str, Callable[[Any, str, Any], Awaitable[Any]]]] = [
    ("enqueue", lambda c, t, v: c.enqueue(t, "x", delay=v)),
    ("reschedule", lambda c, t, v: c.reschedule(t, PENDING_ID, delay=v)),
    ("enqueue_many", lambda c, t, v: c.enqueue_many(t, [{"payload": 1, "delay": v}])),
]
BAD_ATS: list[tuple[str, object, tuple[str, ...]]] = [
    ("naive-datetime", datetime(2030, 1, 1), ("at", "aware")),
    ("nan", math.nan, (*AT_SAYS, "got nan")),
    ("inf", math.inf, (*AT_SAYS, "got inf")),
    ("negative", -1, (*AT_SAYS, "got -1")),
    ("before-epoch", datetime(1969, 12, 31, tzinfo=UTC), AT_SAYS),
    ("past-2-53-ms", 2**53 / 1000 + 1, AT_SAYS),
    ("huge-int", 10**400, AT_SAYS),
    ("bool", True, AT_TYPE_SAYS),
    ("str", "2030-01-01T00:00:00Z", AT_TYPE_SAYS),
]
AT_CALLS: list[tuple[str, Callable[[Any, str, Any], Awaitable[Any]]]] = [
    ("enqueue", lambda c, t, v: c.enqueue(t, "x", at=v)),
    ("reschedule", lambda c, t, v: c.reschedule(t, PENDING_ID, at=v)),
    ("enqueue_many", lambda c, t, v: c.enqueue_many(t, [EnqueueItem(payload=1, at=v)])),
]
BAD_PAYLOADS: list[tuple[str, object]] = [
    ("object", object()),
    ("set", {1, 2}),
    ("datetime", datetime(2030, 1, 1, tzinfo=UTC)),
    ("nested-set", {"a": [1, {"b": {3}}]}),
    ("int-over-64-bits", 2**64),
    ("lone-surrogate", "\ud800"),
    ("function", len),
    # msgpack packs these, but a tuple key comes back as a list, which no reader can hash
    ("tuple-key", {(1, 2): "x"}),
    ("nested-tuple-key", {"a": [{"b": {(1,): 2}}]}),
    ("tuple-key-in-a-tuple", ({(): None},)),
]
BAD_JOB_IDS: list[tuple[str, object]] = [
    ("empty", ""),
    ("257-bytes", "j" * 257),
    ("257-bytes-of-utf8", "é" * 128 + "j"),
    ("int", 42),
    ("bytes", b"abc"),
    ("newline", "a\nb"),
    ("nul", "a\x00b"),
    ("escape", "a\x1bb"),
    ("del", "a\x7fb"),
    ("lone-surrogate", "a\ud800"),
]
BAD_BATCH_ITEMS: list[tuple[str, object, type[Exception], str | None, tuple[str, ...]]] = [
    ("nan-delay", EnqueueItem(payload=0, delay=math.nan), InvalidDelayError, "delay", DELAY_SAYS),
    ("set-payload", EnqueueItem(payload={1}), PayloadTypeError, None, ("payload",)),
    ("tuple-key-payload", EnqueueItem(payload={(1, 2): "x"}), PayloadTypeError, None, ("payload",)),
    (
        "nested-tuple-key-payload",
        {"payload": [1, {"k": {("a", "b"): 1}}]},
        PayloadTypeError,
        None,
        ("payload", "dict keys"),
    ),
    (
        "large-payload",
        EnqueueItem(payload="x" * 200),
        PayloadTooLargeError,
        "payload",
        ("at most",),
    ),
    ("bad-job_id", {"payload": 1, "job_id": ""}, InvalidJobIdError, "job_id", JOB_ID_SAYS),
    (
        "bad-attempts",
        {"payload": 1, "max_attempts": 0},
        InvalidArgumentError,
        "max_attempts",
        ATTEMPTS_SAYS,
    ),
    (
        "bad-replace",
        {"payload": 1, "replace": "no"},
        InvalidArgumentError,
        "replace",
        ("replace", "bool"),
    ),
    (
        "unknown-key",
        {"payload": 1, "dealy": 5},
        InvalidArgumentError,
        "dealy",
        ("dealy", "payload", "delay", "job_id"),
    ),
    ("no-payload", {"delay": 5}, InvalidArgumentError, "payload", ("payload",)),
    ("not-an-item", ("payload", 1), InvalidArgumentError, "items", ("items", "tuple")),
]


def _batch_with_bad_last(n: int, bad: object) -> Call:
    return lambda c, t: c.enqueue_many(
        t, [*[EnqueueItem(payload=i, delay=1) for i in range(n - 1)], bad]
    )


ALIKE_DELAY = 30
ALIKE_BAD_PAYLOADS: list[tuple[str, object, type[Exception], str | None, tuple[str, ...]]] = [
    ("set", {1}, PayloadTypeError, None, ("payload",)),
    ("tuple-key", {(1, 2): "x"}, PayloadTypeError, None, ("payload", "dict keys")),
    ("large", "x" * 200, PayloadTooLargeError, "payload", ("at most",)),
    ("object", object(), PayloadTypeError, None, ("payload",)),
]


def _alike_batch_with_bad_last(n: int, bad: object) -> Call:
    """Plain items sharing one delay (enqueue_bulk's columns take them), the last payload bad:
    the error names that item, as the items' path names it."""
    return lambda c, t: c.enqueue_many(
        t, [EnqueueItem(payload=p, delay=ALIKE_DELAY) for p in [*range(n - 1), bad]]
    )


CASES: list[Any] = [
    *[
        case(
            f"topic-{label}-{method}",
            lambda c, t, f=f, n=name: f(c, n),
            InvalidTopicError,
            "topic",
            TOPIC_SAYS,
            topic=name,
        )
        for label, name in BAD_TOPICS
        for method, f in TOPIC_CALLS
    ],
    *[
        case(
            f"{method}-delay-{label}",
            lambda c, t, f=f, v=value: f(c, t, v),
            InvalidDelayError,
            "delay",
            says,
        )
        for label, value, says in BAD_DELAYS
        for method, f in DELAY_CALLS
    ],
    *[
        case(
            f"{method}-at-{label}",
            lambda c, t, f=f, v=value: f(c, t, v),
            InvalidDelayError,
            "at",
            says,
        )
        for label, value, says in BAD_ATS
        for method, f in AT_CALLS
    ],
    case(
        "enqueue-delay-and-at",
        lambda c, t: c.enqueue(t, "x", delay=1, at=AWARE_PAST),
        InvalidDelayError,
        "delay",
        ("delay", "at", "not both"),
    ),
    case(
        "reschedule-delay-and-at",
        lambda c, t: c.reschedule(t, PENDING_ID, delay=0, at=1),
        InvalidDelayError,
        "delay",
        ("delay", "at", "not both"),
    ),
    *[
        case(
            f"payload-{label}",
            lambda c, t, p=p: c.enqueue(t, p, delay=1),
            PayloadTypeError,
            None,
            ("payload", "msgpack"),
        )
        for label, p in BAD_PAYLOADS
    ],
    case(
        "payload-too-large",
        lambda c, t: c.enqueue(t, "x" * MAX_PAYLOAD_BYTES, delay=1),
        PayloadTooLargeError,
        "payload",
        ("payload", f"at most {MAX_PAYLOAD_BYTES}", "got 102"),
    ),
    case(
        "payload-too-large-nested",
        lambda c, t: c.enqueue(t, [b"x" * 60, b"y" * 60]),
        PayloadTooLargeError,
        "payload",
        ("payload", f"at most {MAX_PAYLOAD_BYTES}"),
    ),
    *[
        case(
            f"job_id-{label}",
            lambda c, t, j=j: c.enqueue(t, "x", delay=1, job_id=j),
            InvalidJobIdError,
            "job_id",
            JOB_ID_SAYS,
        )
        for label, j in BAD_JOB_IDS
    ],
    case("get-job_id-empty", lambda c, t: c.get(t, ""), InvalidJobIdError, "job_id", JOB_ID_SAYS),
    case(
        "cancel-job_id-tab",
        lambda c, t: c.cancel(t, "a\tb"),
        InvalidJobIdError,
        "job_id",
        JOB_ID_SAYS,
    ),
    case(
        "reschedule-job_id-too-long",
        lambda c, t: c.reschedule(t, "j" * 257, delay=1),
        InvalidJobIdError,
        "job_id",
        JOB_ID_SAYS,
    ),
    *[
        case(
            f"max_attempts-{label}",
            lambda c, t, m=m: c.enqueue(t, "x", max_attempts=m),
            InvalidArgumentError,
            "max_attempts",
            ATTEMPTS_SAYS,
        )
        for label, m in [
            ("0", 0),
            ("1001", 1001),
            ("true", True),
            ("negative", -1),
            ("float", 3.0),
            ("str", "3"),
        ]
    ],
    *[
        case(
            f"replace-{label}",
            lambda c, t, r=r: c.enqueue(t, "x", job_id="new", replace=r),
            InvalidArgumentError,
            "replace",
            ("replace", "bool"),
        )
        for label, r in [("int", 1), ("str", "yes"), ("none", None)]
    ],
    case(
        "replace-int-on-pending-id",
        lambda c, t: c.enqueue(t, "x", delay=1, job_id=PENDING_ID, replace=1),
        InvalidArgumentError,
        "replace",
        ("replace", "bool"),
    ),
    case(
        "duplicate-pending-id",
        lambda c, t: c.enqueue(t, {"v": 2}, delay=5, job_id=PENDING_ID),
        DuplicateJobError,
        None,
        ("job_id", PENDING_ID, "replace=True"),
    ),
    case(
        "duplicate-pending-id-due-now",
        lambda c, t: c.enqueue(t, {"v": 2}, job_id=PENDING_ID),
        DuplicateJobError,
        None,
        ("job_id", PENDING_ID, "replace=True"),
    ),
    # batches: one bad item anywhere and nothing is written
    *[
        case(f"enqueue_many-item-{n}-{label}", _batch_with_bad_last(n, bad), error, param, says)
        for n in (500, 10_000)
        for label, bad, error, param, says in BAD_BATCH_ITEMS
    ],
    *[
        case(
            f"enqueue_many-alike-{n}-{label}",
            _alike_batch_with_bad_last(n, bad),
            error,
            param,
            (f"items[{n - 1}]", *says),
        )
        for n in (500, 10_000)
        for label, bad, error, param, says in ALIKE_BAD_PAYLOADS
    ],
    case(
        "enqueue_many-alike-bad-delay",
        lambda c, t: c.enqueue_many(t, [EnqueueItem(payload=i, delay=-1) for i in range(500)]),
        InvalidDelayError,
        "delay",
        ("items[0]", *DELAY_SAYS),
    ),
    case(
        "enqueue_many-unknown-keys-of-mixed-types",
        lambda c, t: c.enqueue_many(t, [{"payload": 1, "dealy": 5, 7: "x"}]),
        InvalidArgumentError,
        "dealy",
        ("dealy", "unknown item key"),
    ),
    *[
        case(
            f"enqueue_many-items-{label}",
            lambda c, t, v=v: c.enqueue_many(t, v),
            InvalidArgumentError,
            "items",
            ("items", "an iterable of"),
        )
        # one item is a named tuple: iterable, but refused whole, not taken field by field
        for label, v in [
            ("none", None),
            ("int", 5),
            ("str", "ab"),
            ("one-item", EnqueueItem(payload=1)),
        ]
    ],
    case(
        "enqueue_many-same-job_id-twice",
        lambda c, t: c.enqueue_many(
            t,
            [
                {"payload": 1, "job_id": "twice"},
                *[EnqueueItem(payload=i) for i in range(1000)],
                EnqueueItem(payload=2, job_id="twice"),
            ],
        ),
        InvalidJobIdError,
        "job_id",
        ("job_id", "twice"),
    ),
    case(
        "enqueue_many-same-pending-job_id-twice",
        lambda c, t: c.enqueue_many(
            t,
            [
                {"payload": 1, "job_id": PENDING_ID},
                {"payload": 2, "job_id": PENDING_ID, "replace": True},
            ],
        ),
        InvalidJobIdError,
        "job_id",
        ("job_id", "twice"),
    ),
    # topic configuration
    *[
        case(
            f"create_topic-shards-{label}",
            lambda c, t, s=s: admin_of(c).create_topic(t, s),
            InvalidArgumentError,
            "shards",
            SHARDS_SAYS,
        )
        for label, s in [
            ("0", 0),
            ("1025", 1025),
            ("negative", -4),
            ("true", True),
            ("float", 2.0),
            ("str", "4"),
        ]
    ],
    *[
        case(
            f"create_topic-new-topic-shards-{label}",
            lambda c, t, s=s: admin_of(c).create_topic(f"{t}.new", s),
            InvalidArgumentError,
            "shards",
            SHARDS_SAYS,
        )
        for label, s in [("0", 0), ("1025", 1025)]
    ],
    *[
        case(
            f"create_topic-other-count-{s}",
            lambda c, t, s=s: admin_of(c).create_topic(t, s),
            TopicConfigError,
            None,
            ("shards", f"exists with {SHARDS} shards", f"shards={s}"),
        )
        for s in (1, SHARDS + 1, 1024)
    ],
]


@pytest.mark.parametrize("bad", CASES)
async def test_bad_input_raises_typed_error_and_changes_nothing(
    client: Any, redis_sync: redis.Redis, topic: str, bad: Bad
) -> None:
    other = f"{topic}.new"  # where "topic created on first use" would write
    before = snapshot(redis_sync, topic, other, bad.topic)
    pending_before = await client.get(topic, PENDING_ID)

    with pytest.raises(bad.error) as caught:
        await bad.call(client, topic)

    assert snapshot(redis_sync, topic, other, bad.topic) == before, "the bad call changed Redis"
    assert await client.get(topic, PENDING_ID) == pending_before
    err = caught.value
    assert isinstance(err, WheelqError)
    if isinstance(err, InvalidArgumentError):
        assert isinstance(err, ValueError)
        assert err.parameter == bad.parameter
    else:
        assert bad.parameter is None
    if isinstance(err, PayloadTypeError):
        assert isinstance(err, TypeError)
    message = str(err)
    for fragment in bad.says:
        assert fragment in message, f"{fragment!r} missing from {message!r}"


@pytest.mark.parametrize(
    "call",
    [
        lambda c, t: c.enqueue(t, "x", delay=1),
        lambda c, t: c.enqueue(t, "x"),
        lambda c, t: c.enqueue(t, "x", job_id=PENDING_ID, delay=5, replace=True),
        lambda c, t: c.enqueue_many(t, [EnqueueItem(payload=1, delay=1)]),
        lambda c, t: c.reschedule(t, PENDING_ID, delay=5),
        lambda c, t: c.cancel(t, PENDING_ID),
        lambda c, t: admin_of(c).create_topic(f"{t}.new", 2),
        lambda c, t: c.enqueue(f"{t}.new", "x", delay=1),
    ],
    ids=[
        "enqueue",
        "fire",
        "replace",
        "enqueue_many",
        "reschedule",
        "cancel",
        "create_topic",
        "first-use",
    ],
)
async def test_the_snapshot_sees_every_kind_of_valid_write(
    client: Any, redis_sync: redis.Redis, topic: str, call: Call
) -> None:
    """The control for the table above: a good call of each kind does change the snapshot."""
    other = f"{topic}.new"
    before = snapshot(redis_sync, topic, other)
    await call(client, topic)
    assert snapshot(redis_sync, topic, other) != before


async def test_bad_enqueue_on_a_new_topic_does_not_create_it(
    client: Any, admin: Any, redis_sync: redis.Redis, topic: str
) -> None:
    fresh = f"{topic}.fresh"
    for call in (
        lambda: client.enqueue(fresh, object()),
        lambda: client.enqueue(fresh, "x", delay=-1),
        lambda: client.enqueue_many(
            fresh, [EnqueueItem(payload=1), {"payload": 2, "max_attempts": 0}]
        ),
        lambda: admin.create_topic(fresh, 0),
    ):
        with pytest.raises(WheelqError):
            await call()
    assert redis_sync.hexists(TOPICS_KEY, fresh) == 0
    assert list(redis_sync.scan_iter(match=f"*{{{fresh}:*", count=1000)) == []
    assert await admin.stats(fresh) is None


async def test_duplicate_leaves_the_pending_payload_and_due_time(client: Any, topic: str) -> None:
    before = await client.get(topic, PENDING_ID)
    assert before is not None
    with pytest.raises(DuplicateJobError) as caught:
        await client.enqueue(topic, {"v": 2}, delay=5, max_attempts=9, job_id=PENDING_ID)
    assert caught.value.job_ids == [PENDING_ID]
    assert caught.value.enqueued == []
    after = await client.get(topic, PENDING_ID)
    assert after == before
    assert after.payload == {"v": 1}


async def test_reschedule_with_a_bad_delay_leaves_the_job_as_it_was(
    client: Any, topic: str
) -> None:
    before = await client.get(topic, PENDING_ID)
    for kwargs in ({"delay": math.nan}, {"delay": -1}, {"at": datetime(2030, 1, 1)}):
        with pytest.raises(InvalidDelayError):
            await client.reschedule(topic, PENDING_ID, **kwargs)
    assert await client.get(topic, PENDING_ID) == before


# --- settings ---------------------------------------------------------------------------


SETTING_CASES = [
    pytest.param({"bogus": 1}, "bogus", ("bogus", "known:", "default_shards"), id="unknown"),
    pytest.param({"max_payload": 1}, "max_payload", ("max_payload", "known:"), id="near-miss"),
    pytest.param(
        {"default_shards": 0}, "default_shards", ("default_shards", "[1, 1024]"), id="shards-0"
    ),
    pytest.param(
        {"default_shards": 1025},
        "default_shards",
        ("default_shards", "[1, 1024]"),
        id="shards-1025",
    ),
    pytest.param(
        {"default_shards": True},
        "default_shards",
        ("default_shards", "[1, 1024]"),
        id="shards-bool",
    ),
    pytest.param(
        {"max_payload_bytes": "100"}, "max_payload_bytes", ("max_payload_bytes",), id="payload-str"
    ),
    pytest.param(
        {"max_payload_bytes": 0}, "max_payload_bytes", ("max_payload_bytes", "[1, "), id="payload-0"
    ),
    pytest.param(
        {"default_max_attempts": 1001},
        "default_max_attempts",
        ("default_max_attempts", "[1, 1000]"),
        id="attempts-1001",
    ),
    pytest.param({"batch_size": 0}, "batch_size", ("batch_size", "[1, 10000]"), id="batch-0"),
    pytest.param({"batch_size": 2.5}, "batch_size", ("batch_size", "[1, 10000]"), id="batch-float"),
]


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(("settings", "parameter", "says"), SETTING_CASES)
async def test_client_from_url_rejects_bad_settings(
    redis_url: str, kind: str, settings: dict[str, Any], parameter: str, says: tuple[str, ...]
) -> None:
    cls: Any = Client if kind == "sync" else AsyncClient
    with pytest.raises(InvalidArgumentError) as caught:
        cls.from_url(redis_url, **settings)
    assert isinstance(caught.value, ValueError)
    assert caught.value.parameter == parameter
    for fragment in says:
        assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("settings", "parameter", "says"),
    [
        pytest.param({"bogus": 1}, "bogus", ("bogus", "known:", "lease_ttl_ms"), id="unknown"),
        pytest.param({"lease_ttl": 5000}, "lease_ttl", ("lease_ttl", "known:"), id="no-unit"),
        pytest.param(
            {"default_shards": 4},
            "default_shards",
            ("default_shards", "known:"),
            id="client-setting",
        ),
        pytest.param(
            {"lease_ttl_ms": 100},
            "lease_ttl_ms",
            ("lease_ttl_ms", "[500, 600000]"),
            id="lease-too-short",
        ),
        pytest.param({"tick_ms": 0}, "tick_ms", ("tick_ms", "[1, 1000]"), id="tick-0"),
        pytest.param({"wheel_size": 1}, "wheel_size", ("wheel_size", "[2, 65536]"), id="wheel-1"),
        pytest.param(
            {"window_ms": 3_600_001},
            "window_ms",
            ("window_ms", "[10, 3600000]"),
            id="window-too-long",
        ),
        pytest.param(
            {"emit_batch": True}, "emit_batch", ("emit_batch", "[1, 10000]"), id="emit-bool"
        ),
        pytest.param(
            {"sweep_grace_ms": -1},
            "sweep_grace_ms",
            ("sweep_grace_ms", "[0, 600000]"),
            id="grace-negative",
        ),
    ],
)
async def test_scheduler_from_url_rejects_bad_settings(
    redis_url: str, topic: str, settings: dict[str, Any], parameter: str, says: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        Scheduler.from_url(redis_url, [topic], **settings)
    assert isinstance(caught.value, ValueError)
    assert caught.value.parameter == parameter
    for fragment in says:
        assert fragment in str(caught.value)


@pytest.mark.parametrize("name", ["", "a:b", "a{b", "x" * 101, 5])
async def test_scheduler_from_url_rejects_bad_topic_names(
    redis_url: str, redis_sync: redis.Redis, name: object
) -> None:
    before = snapshot(redis_sync, name)
    with pytest.raises(InvalidTopicError) as caught:
        Scheduler.from_url(redis_url, ["good", name])
    assert caught.value.parameter == "topic"
    assert snapshot(redis_sync, name) == before
