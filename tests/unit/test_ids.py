"""core.ids: ULID-layout job ids. Known vectors, Hypothesis for shape, time round-trip
and ordering; the random parts drawn many at once are ids' random parts, every character
of the alphabet at every place."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wheelq.core.ids import (
    ID_LENGTH,
    RANDOM_CHARS,
    job_id_time_ms,
    make_job_id,
    random_parts,
    time_part,
)

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
URL_SAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
MAX_MS = 2**48 - 1

times = st.integers(min_value=0, max_value=MAX_MS)
entropies = st.binary(min_size=10, max_size=10)


@pytest.mark.parametrize(
    ("now_ms", "entropy", "job_id"),
    [
        (0, bytes(10), "0" * 26),
        (MAX_MS, b"\xff" * 10, "7" + "Z" * 25),
        (0, bytes(9) + b"\x01", "0" * 25 + "1"),
        (0, bytes(9) + b"\x1f", "0" * 25 + "Z"),
        (1, bytes(10), "0000000001" + "0" * 16),
        # the ULID spec's example time encodes to the spec's time prefix "01ARYZ6S41"
        (1_469_918_176_385, bytes(10), "01ARYZ6S41" + "0" * 16),
    ],
)
def test_known_ids(now_ms: int, entropy: bytes, job_id: str) -> None:
    assert make_job_id(now_ms, entropy) == job_id


@pytest.mark.parametrize("size", [0, 9, 11, 16])
def test_entropy_must_be_ten_bytes(size: int) -> None:
    with pytest.raises(ValueError, match=rf"^entropy must be 10 bytes, got {size}$"):
        make_job_id(0, bytes(size))


@settings(max_examples=200)
@given(times, entropies)
def test_id_shape_and_time_round_trip(now_ms: int, entropy: bytes) -> None:
    job_id = make_job_id(now_ms, entropy)
    assert len(job_id) == ID_LENGTH == 26
    assert set(job_id) <= set(CROCKFORD)
    assert set(job_id) <= URL_SAFE
    assert job_id_time_ms(job_id) == now_ms


@settings(max_examples=200)
@given(times, entropies, times, entropies)
def test_ids_sort_by_time_then_entropy(t1: int, e1: bytes, t2: int, e2: bytes) -> None:
    a, b = make_job_id(t1, e1), make_job_id(t2, e2)
    assert (a < b) == ((t1, e1) < (t2, e2))
    assert (a == b) == ((t1, e1) == (t2, e2))


@settings(max_examples=200)
@given(st.integers(0, MAX_MS - 10_000), st.integers(1, 10_000), entropies, entropies)
def test_a_later_ms_sorts_after_whatever_the_entropy(
    t: int, step: int, e1: bytes, e2: bytes
) -> None:
    assert make_job_id(t, e1) < make_job_id(t + step, e2)


@pytest.mark.parametrize(
    "job_id",
    [
        "",
        "0" * 25,
        "0" * 27,
        "0" * 25 + "a",  # lower case is never generated
        "0" * 25 + "I",
        "0" * 25 + "L",
        "0" * 25 + "O",
        "0" * 25 + "U",
        "0" * 25 + "-",
        "report-2026-11-21-abcdefgh",  # 26 characters, not an id
    ],
)
def test_job_id_time_ms_is_none_for_other_strings(job_id: str) -> None:
    assert job_id_time_ms(job_id) is None


# BUG (reported): 26 Crockford characters hold 130 bits but an id holds 128, so a first
# character above "7" cannot come from make_job_id. job_id_time_ms decodes such strings
# anyway and returns a time past 2**48 - 1 ("Z" * 26 -> 2**50 - 1) instead of None.
@pytest.mark.parametrize("job_id", ["8" + "0" * 25, "Z" * 26])
def test_job_id_time_ms_is_none_past_128_bits(job_id: str) -> None:
    assert job_id_time_ms(job_id) is None


@settings(max_examples=50)
@given(times, entropies)
def test_the_time_part_is_the_ids_first_ten_characters(now_ms: int, entropy: bytes) -> None:
    assert time_part(now_ms) == make_job_id(now_ms, entropy)[:10]
    assert len(time_part(now_ms)) + RANDOM_CHARS == ID_LENGTH


def test_random_parts_make_ids_with_every_character_at_every_place() -> None:
    count = 4000  # a character missing at one place by chance: under 1e-50
    text = random_parts(count)
    parts = [text[i : i + RANDOM_CHARS] for i in range(0, len(text), RANDOM_CHARS)]
    assert len(parts) == count
    assert len(set(parts)) == count
    for place in range(RANDOM_CHARS):
        assert {part[place] for part in parts} == set(CROCKFORD)
    for part in parts[:50]:
        job_id = time_part(1_700_000_000_000) + part
        assert job_id_time_ms(job_id) == 1_700_000_000_000
        assert make_job_id(1_700_000_000_000, _entropy_of(part)) == job_id


def _entropy_of(part: str) -> bytes:
    """The 10 bytes `make_job_id` encodes as `part`."""
    value = 0
    for ch in part:
        value = value * 32 + CROCKFORD.index(ch)
    return value.to_bytes(10, "big")
