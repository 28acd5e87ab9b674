"""core.expiry: ``expires=`` checked into the epoch ms an envelope stores (a relative one
counted from the call's clock), the one test of an expiry, and every way a value is refused
naming ``expires``."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from wheelq.core.expiry import ExpiresIn, absolute, expired, expires_datetime, validate_expires
from wheelq.core.job import Envelope, Job
from wheelq.core.options import EnqueueItem
from wheelq.core.retry import retry_envelope
from wheelq.core.settings import ClientSettings
from wheelq.errors import InvalidArgumentError, InvalidDelayError
from wheelq.producer.items import EncodeBatch, validate_batch, validate_item, validate_options

NOW_MS = 1_800_000_000_000
TEN_YEARS_S = 10 * 365 * 86_400


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        (0, 0),
        (5, 5_000),
        (0.0011, 2),  # rounded up: never earlier than asked
        (timedelta(minutes=2), 120_000),
        (timedelta(microseconds=1), 1),
        (TEN_YEARS_S, TEN_YEARS_S * 1000),
    ],
)
def test_seconds_and_timedeltas_count_from_the_calls_clock(given: Any, stored: int) -> None:
    value = validate_expires(given)
    assert type(value) is ExpiresIn and value == stored
    item = EnqueueItem(payload=1, expires=given)
    write = validate_item(ClientSettings(), item, EncodeBatch(NOW_MS))
    assert Envelope.unpack(write.envelope).expires == NOW_MS + stored


def test_an_aware_datetime_is_its_epoch_ms_whatever_its_zone() -> None:
    when = datetime(2030, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    ms = 1_893_456_000_000
    assert validate_expires(when) == ms and type(validate_expires(when)) is int
    write = validate_item(ClientSettings(), EnqueueItem(payload=1, expires=when), EncodeBatch(7))
    assert Envelope.unpack(write.envelope).expires == ms
    assert expires_datetime(ms) == when


def test_an_expiry_before_the_due_time_is_taken_the_job_then_ends_expired() -> None:
    """Accepted (as Celery takes an eta after its expires): the job is dropped when due."""
    item = EnqueueItem(payload=1, delay=10, expires=5)
    write = validate_item(ClientSettings(), item, EncodeBatch(NOW_MS))
    assert Envelope.unpack(write.envelope).expires == NOW_MS + 5_000
    past = datetime(2001, 1, 1, tzinfo=UTC)
    assert validate_expires(past) == 978_307_200_000


@pytest.mark.parametrize(
    "bad",
    [
        -1,
        -0.001,
        math.nan,
        math.inf,
        TEN_YEARS_S + 1,
        10**400,
        timedelta(seconds=-1),
        datetime(2030, 1, 1),  # naive
        datetime(1969, 12, 31, tzinfo=UTC),
        True,
        "60",
        None.__class__,
    ],
    ids=repr,
)
def test_a_bad_expiry_is_refused_naming_expires(bad: object) -> None:
    with pytest.raises(InvalidDelayError) as caught:
        validate_expires(bad)
    assert caught.value.parameter == "expires"
    with pytest.raises(InvalidArgumentError) as through:
        validate_item(ClientSettings(), EnqueueItem(payload=1, expires=bad), EncodeBatch(0))  # type: ignore[arg-type]
    assert through.value.parameter == "expires"
    with pytest.raises(InvalidArgumentError, match=r"items\[0\]"):
        validate_batch(ClientSettings(), [EnqueueItem(payload=1, expires=bad)], None, 0)  # type: ignore[arg-type]


def test_nan_says_so() -> None:
    with pytest.raises(InvalidDelayError, match="NaN"):
        validate_expires(math.nan)


def test_without_an_expiry_the_envelope_is_unchanged() -> None:
    plain = validate_item(ClientSettings(), EnqueueItem(payload=1), EncodeBatch(NOW_MS))
    assert Envelope.unpack(plain.envelope).expires == 0
    options = validate_options(ClientSettings(), EnqueueItem(payload=1), EncodeBatch(NOW_MS))
    assert options.get("expires") == 0
    assert absolute(options.stored, 4, NOW_MS) is options.stored


def test_the_envelope_entry_job_and_retry_carry_the_expiry() -> None:
    env = Envelope(b"\x01", expires=NOW_MS + 9)
    again = Envelope.unpack(env.pack())
    assert again == env
    fields = {
        b"id": b"j",
        b"topic": b"t",
        b"due": b"1",
        b"attempt": b"1",
        b"payload": b"\x01",
        b"expires": str(NOW_MS + 9).encode(),
    }
    job = Job.from_entry("1-0", fields)
    assert job.expires == NOW_MS + 9
    assert Envelope.unpack(retry_envelope(job, b"p", 1, "g")).expires == NOW_MS + 9
    del fields[b"expires"]
    assert Job.from_entry("1-0", fields).expires is None


@pytest.mark.parametrize(
    ("expires_ms", "now_ms", "gone"),
    [
        (None, NOW_MS, False),
        (0, NOW_MS, False),
        (NOW_MS, NOW_MS, False),
        (NOW_MS, NOW_MS + 1, True),
    ],
)
def test_a_job_expires_once_its_expiry_is_behind_now(
    expires_ms: int | None, now_ms: int, gone: bool
) -> None:
    assert expired(expires_ms, now_ms) is gone


def test_the_outbox_row_stores_an_absolute_expiry_the_relay_takes() -> None:
    from wheelq.outbox.enqueue import row
    from wheelq.outbox.rows import refusal
    from wheelq.producer.replay import HeldJob

    before = time.time_ns() // 1_000_000
    written = row("t", 1, None, {"expires": 60})
    after = time.time_ns() // 1_000_000
    expires = Envelope.unpack(written["envelope"]).expires
    assert before + 60_000 <= expires <= after + 60_000
    held = HeldJob(1, "t", written["job_id"], "d", 0, False, written["envelope"], 0, "", "")
    assert refusal(held, 1_000, 1_000) is None  # the relay takes it back as a datetime
