"""core.job: `DeadLetter.from_entry` on dead letters as the scripts write them and on foreign
ones (undecodable payload, missing or malformed fields), and `parse_ref` (accepted forms,
round trip, rejected refs with ``parameter == "refs"``)."""

from __future__ import annotations

from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.entries import dead_fields
from wheelq.core.job import DeadLetter, parse_ref
from wheelq.core.payload import encode_payload
from wheelq.core.retry import Reason
from wheelq.errors import InvalidArgumentError
from wheelq.web.models import DeadReason

DEAD_ID = "1700000000123-0"
SOURCE_ID = "1699999999000-7"
MAX_STREAM_ID_PART = 2**64 - 1


def dead_letter(**overrides: bytes) -> dict[bytes, bytes]:
    """A dead letter as dead_letter.lua writes it: the ready entry's fields, then the four
    annotations (a retried entry's own ``group`` field collapses into the annotation)."""
    fields = dead_fields(
        "job-1",
        topic="emails",
        due_ms=1_700_000_000_000,
        attempt=3,
        max_attempts=3,
        payload=encode_payload({"to": "a@example.com", "n": [1, 2]}, 1 << 20),
        error="attempt 3 of 3: ValueError: boom\nTraceback ...",
        group="mailers",
        entry=SOURCE_ID,
    )
    fields.update({k.encode(): v for k, v in overrides.items()})
    return fields


# --- from_entry -----------------------------------------------------------------------------


def test_from_entry_reads_every_field_of_a_dead_letter() -> None:
    raw = dead_letter()

    dead = DeadLetter.from_entry("emails", 2, DEAD_ID, raw)

    assert dead == DeadLetter(
        ref=f"2/{DEAD_ID}",
        topic="emails",
        job_id="job-1",
        payload={"to": "a@example.com", "n": [1, 2]},
        attempt=3,
        max_attempts=3,
        reason="failed",
        error="attempt 3 of 3: ValueError: boom\nTraceback ...",
        group="mailers",
        source_entry=SOURCE_ID,
        dead_ms=1_700_000_000_123,
        fields={k.decode(): v for k, v in raw.items()},
    )
    assert (dead.shard, dead.entry_id) == (2, DEAD_ID)


@pytest.mark.parametrize(
    "payload",
    [b"\xc1", b"\x01\x02", b"\xa5abc", b"\xff\x00not msgpack"],
    ids=["never-used byte", "trailing data", "truncated str", "binary junk"],
)
def test_from_entry_keeps_an_undecodable_payload_as_raw_bytes(payload: bytes) -> None:
    dead = DeadLetter.from_entry("emails", 0, DEAD_ID, dead_letter(payload=payload))

    assert dead.payload == payload
    assert dead.job_id == "job-1"


def test_from_entry_of_a_foreign_entry_with_missing_fields_has_nones_and_blanks() -> None:
    raw = {b"\xffodd key": b"\x00value", b"attempt": b"many", b"max_attempts": b"\xff"}

    dead = DeadLetter.from_entry("emails", 1, DEAD_ID, raw)

    assert dead.job_id is None
    assert dead.payload is None
    assert (dead.attempt, dead.max_attempts) == (None, None)
    assert (dead.reason, dead.error, dead.group, dead.source_entry) == ("", "", "", "")
    assert dead.fields == {
        "\ufffdodd key": b"\x00value",
        "attempt": b"many",
        "max_attempts": b"\xff",
    }
    assert (dead.ref, dead.dead_ms) == (f"1/{DEAD_ID}", 1_700_000_000_123)


def test_from_entry_replaces_undecodable_text_instead_of_failing() -> None:
    dead = DeadLetter.from_entry(
        "emails", 0, DEAD_ID, dead_letter(id=b"job-\xff", error=b"bad \xfe byte")
    )

    assert dead.job_id == "job-\ufffd"
    assert dead.error == "bad \ufffd byte"


# --- parse_ref ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("2/1700000000123-0", (2, "1700000000123-0")),
        ("0/0-0", (0, "0-0")),
        ("1023/1-5", (1023, "1-5")),
        (f"7/{MAX_STREAM_ID_PART}-{MAX_STREAM_ID_PART}", (7, f"{2**64 - 1}-{2**64 - 1}")),
    ],
)
def test_parse_ref_accepts_shard_slash_stream_id(ref: str, expected: tuple[int, str]) -> None:
    assert parse_ref(ref) == expected


@given(
    shard=st.integers(min_value=0, max_value=1023),
    ms=st.integers(min_value=0, max_value=MAX_STREAM_ID_PART),
    seq=st.integers(min_value=0, max_value=MAX_STREAM_ID_PART),
)
def test_parse_ref_round_trips_a_dead_letters_ref(shard: int, ms: int, seq: int) -> None:
    dead = DeadLetter.from_entry("t", shard, f"{ms}-{seq}", {})
    assert parse_ref(dead.ref) == (shard, f"{ms}-{seq}")
    assert (dead.shard, dead.entry_id) == (shard, f"{ms}-{seq}")


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "2",
        "2/",
        "/1-0",
        "x/1-0",
        "-1/1-0",
        " 2/1-0",
        "+2/1-0",
        "2/1",
        "2/1-",
        "2/-1",
        "2/a-0",
        "2/1-b",
        "2/1-0-0",
        "2/1--1",
        "2/1-0/3",
        None,
        5,
        b"2/1-0",
        ["2/1-0"],
    ],
)
def test_parse_ref_rejects_malformed_refs_naming_refs(ref: object) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        parse_ref(ref)
    assert caught.value.parameter == "refs"


@pytest.mark.parametrize(
    "ref",
    [
        f"2/{MAX_STREAM_ID_PART + 1}-0",
        f"2/1-{MAX_STREAM_ID_PART + 1}",
        "2/ 1-0",
        "2/1-0 ",
        "2/+1-0",
        "2/1_000-0",
    ],
    ids=[
        "ms over 2**64-1",
        "seq over 2**64-1",
        "space in ms",
        "space after seq",
        "plus sign",
        "underscore",
    ],
)
def test_parse_ref_rejects_entry_ids_that_are_not_plain_digits_in_stream_id_range(
    ref: str,
) -> None:
    """The shard part must be plain digits; so must the entry id's parts, and each fits in 64
    bits: refs are validated "before anything is sent", so a server must never be the one to
    reject an id (replay.lua has already replayed the ids before it when it fails)."""
    with pytest.raises(InvalidArgumentError) as caught:
        parse_ref(ref)
    assert caught.value.parameter == "refs"


def test_the_http_models_reasons_are_the_dead_letter_reasons() -> None:
    assert set(get_args(DeadReason)) == {r.value for r in Reason}
