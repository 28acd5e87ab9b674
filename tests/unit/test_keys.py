"""core.keys: topic / job id / shard-count validation, shard placement, key names and
their hash tags. Tables for validation, Hypothesis for the hash-tag and round-trip laws."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wheelq.core.keys import (
    MAX_JOB_ID_BYTES,
    MAX_SHARDS,
    MAX_TOPIC_LENGTH,
    TOPICS_KEY,
    ShardKeys,
    all_shards,
    nodes_key,
    parse_registry,
    parse_shard_count,
    shard_of,
    topic_set,
    validate_job_id,
    validate_shards,
    validate_topic,
)
from wheelq.errors import (
    InvalidArgumentError,
    InvalidJobIdError,
    InvalidTopicError,
    TopicConfigError,
)

TOPIC_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
topics = st.text(alphabet=TOPIC_ALPHABET, min_size=1, max_size=MAX_TOPIC_LENGTH)
shard_numbers = st.integers(min_value=0, max_value=MAX_SHARDS - 1)


def redis_hash_tag(key: str) -> str | None:
    """The part of `key` Redis Cluster hashes, per the cluster spec: the text between the
    first '{' and the first '}' after it, when that text is non-empty; else None."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end < 0 or end == start + 1:
        return None
    return key[start + 1 : end]


def shard_key_names(keys: ShardKeys) -> dict[str, str]:
    return {
        "delayed": keys.delayed,
        "jobs": keys.jobs,
        "ready": keys.ready,
        "lease": keys.lease,
        "horizon": keys.horizon,
        "inbox": keys.inbox,
        "spooled": keys.spooled,
        "wake_channel": keys.wake_channel,
    }


# --- validate_topic ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "topic",
    ["a", "emails", "A-z_0.9", "x" * MAX_TOPIC_LENGTH, "...", "-", "_", "0"],
)
def test_validate_topic_accepts(topic: str) -> None:
    assert validate_topic(topic) == topic


@pytest.mark.parametrize(
    "topic",
    [
        "",
        "x" * (MAX_TOPIC_LENGTH + 1),
        "a b",
        "a:b",
        "{a}",
        "a}",
        "a*",
        "é",
        "a\n",
        "\n",
        "a/b",
        None,
        5,
        b"emails",
        ["emails"],
    ],
)
def test_validate_topic_rejects(topic: object) -> None:
    with pytest.raises(InvalidTopicError) as info:
        validate_topic(topic)
    assert info.value.parameter == "topic"
    assert isinstance(info.value, ValueError)
    assert str(info.value) == (
        f"topic must be 1-{MAX_TOPIC_LENGTH} characters from [A-Za-z0-9_.-], got {topic!r}"
    )


@settings(max_examples=200)
@given(topics)
def test_validate_topic_accepts_every_name_of_the_alphabet(topic: str) -> None:
    assert validate_topic(topic) == topic


# --- topic_set ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topics", "expected"),
    [
        ("emails", {"emails"}),  # one topic, not the letters e, m, a, i, l, s
        ("a", {"a"}),
        (["emails", "billing"], {"emails", "billing"}),
        (("emails", "emails"), {"emails"}),
        (frozenset({"x"}), {"x"}),
        ((t for t in ["g1", "g2"]), {"g1", "g2"}),
    ],
)
def test_topic_set_takes_one_name_or_an_iterable_of_names(
    topics: object, expected: set[str]
) -> None:
    assert topic_set(topics) == frozenset(expected)


@pytest.mark.parametrize("topics", [b"emails", bytearray(b"e"), 5, None, {"emails": 1}, []])
def test_topic_set_rejects_what_is_not_names(topics: object) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        topic_set(topics)
    assert info.value.parameter == "topics"
    assert "topics must" in str(info.value)


@pytest.mark.parametrize("topics", ["a:b", "", ["good", "a{b"], ["good", 5]])
def test_topic_set_rejects_bad_names_as_topic_errors(topics: object) -> None:
    with pytest.raises(InvalidTopicError) as info:
        topic_set(topics)
    assert info.value.parameter == "topic"


# --- validate_job_id --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "job_id",
    [
        "a",
        "job 1",  # the ASCII space is printable
        "report-2026-11-21",
        "{braces}:and:colons",
        "日本語",
        "x" * MAX_JOB_ID_BYTES,
        "é" * (MAX_JOB_ID_BYTES // 2),  # 2 UTF-8 bytes each: exactly 256 bytes
        "€" * 85 + "a",  # 3 * 85 + 1 = 256 bytes
    ],
)
def test_validate_job_id_accepts(job_id: str) -> None:
    assert validate_job_id(job_id) == job_id


@pytest.mark.parametrize(
    "job_id",
    [
        "",
        "x" * (MAX_JOB_ID_BYTES + 1),
        "é" * (MAX_JOB_ID_BYTES // 2) + "a",  # 257 bytes, 129 characters
        "€" * 86,  # 258 bytes, only 86 characters
        "a\n",
        "a\tb",
        "\x00",
        "a\x7f",
        "a\u00a0b",  # no-break space is not printable
        "\ud800",  # lone surrogate
        None,
        1,
        b"abc",
    ],
)
def test_validate_job_id_rejects(job_id: object) -> None:
    with pytest.raises(InvalidJobIdError) as info:
        validate_job_id(job_id)
    assert info.value.parameter == "job_id"
    assert isinstance(info.value, ValueError)
    assert "job_id must be a non-empty printable str of at most 256 UTF-8 bytes" in str(info.value)


# --- validate_shards --------------------------------------------------------------------------


@pytest.mark.parametrize("shards", [1, 2, 4, MAX_SHARDS])
def test_validate_shards_accepts(shards: int) -> None:
    assert validate_shards(shards) == shards


@pytest.mark.parametrize("shards", [0, -1, MAX_SHARDS + 1, True, False, 4.0, "4", None])
def test_validate_shards_rejects(shards: object) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        validate_shards(shards)
    assert info.value.parameter == "shards"
    assert str(info.value) == f"shards must be an int in [1, {MAX_SHARDS}], got {shards!r}"


# --- registry values ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(b"1", 1), (b"4", 4), (b"1024", MAX_SHARDS), ("16", 16)],
)
def test_parse_shard_count_accepts_counts_in_range(value: object, expected: int) -> None:
    assert parse_shard_count("emails", value) == expected


@pytest.mark.parametrize(
    "value",
    [
        b"0",
        b"-3",
        b"abc",
        b"",
        b"1025",
        b"99999999999999999999999999",
        b"4.0",
        b" 4",
        b"04",
        b"+4",
        "\u0664",  # ARABIC-INDIC DIGIT FOUR: int() would take it
        b"\xff",
        None,
        4,
    ],
)
def test_parse_shard_count_rejects_anything_else_naming_topic_value_and_range(
    value: object,
) -> None:
    with pytest.raises(TopicConfigError) as info:
        parse_shard_count("emails", value)
    message = str(info.value)
    assert "'emails'" in message
    assert repr(value)[:40] in message
    assert f"[1, {MAX_SHARDS}]" in message
    assert TOPICS_KEY in message


def test_parse_registry_keeps_valid_entries_and_the_errors_of_the_others() -> None:
    registry = parse_registry(
        {b"a": b"4", b"b": b"0", b"c": b"abc", b"d": b"1024", b"e{x}": b"2", b"f": b"-3"}
    )
    assert registry.shards == {"a": 4, "d": 1024}
    assert set(registry.invalid) == {"b", "c", "e{x}", "f"}
    assert all(isinstance(e, TopicConfigError) for e in registry.invalid.values())
    assert "not a topic name" in str(registry.invalid["e{x}"])
    with pytest.raises(TopicConfigError) as info:
        registry.check()
    assert info.value is registry.invalid["b"]  # the first by name
    assert parse_registry({b"a": b"4"}).check() == {"a": 4}


# --- shard_of ---------------------------------------------------------------------------------


# crc32(b"123456789") is the CRC-32 check value 0xCBF43926 = 3421780262.
@pytest.mark.parametrize(
    ("job_id", "shards", "expected"),
    [
        ("123456789", 1, 0),
        ("123456789", 7, 3421780262 % 7),
        ("123456789", 1000, 262),
        ("123456789", 1024, 0x126),  # the low 10 bits of 0xCBF43926
        ("", 16, 0),  # crc32 of no bytes is 0
    ],
)
def test_shard_of_is_crc32_mod_shards(job_id: str, shards: int, expected: int) -> None:
    assert shard_of(job_id, shards) == expected


@settings(max_examples=200)
@given(st.text(min_size=1, max_size=64), st.integers(1, 32), st.integers(1, 32))
def test_shard_of_is_in_range_and_consistent_across_multiples(
    job_id: str, shards: int, factor: int
) -> None:
    shard = shard_of(job_id, shards)
    assert 0 <= shard < shards
    # (c mod n*k) mod n == c mod n: holds only for "hash mod n" placement.
    assert shard_of(job_id, shards * factor) % shards == shard
    assert shard_of(job_id, shards) == shard


# --- ShardKeys --------------------------------------------------------------------------------


def test_shard_key_names() -> None:
    keys = ShardKeys("emails", 3)
    assert keys.tag == "{emails:3}"
    assert shard_key_names(keys) == {
        "delayed": "{emails:3}:delayed",
        "jobs": "{emails:3}:jobs",
        "ready": "{emails:3}:ready",
        "lease": "{emails:3}:lease",
        "horizon": "{emails:3}:horizon",
        "inbox": "{emails:3}:inbox",
        "spooled": "{emails:3}:spooled",
        "wake_channel": "{emails:3}:wake",
    }


def test_global_key_names() -> None:
    assert TOPICS_KEY == "wheelq:topics"
    assert nodes_key("emails") == "wheelq:nodes:emails"


def test_all_shards_lists_every_shard_in_order() -> None:
    assert all_shards("t", 3) == [ShardKeys("t", 0), ShardKeys("t", 1), ShardKeys("t", 2)]
    assert all_shards("t", 0) == []


@settings(max_examples=200)
@given(topics, shard_numbers)
def test_every_key_of_a_shard_has_the_shard_tag_first(topic: str, shard: int) -> None:
    names = shard_key_names(ShardKeys(topic, shard))
    assert {name: redis_hash_tag(key) for name, key in names.items()} == dict.fromkeys(
        names, f"{topic}:{shard}"
    )
    assert len(set(names.values())) == len(names)


@settings(max_examples=200)
@given(topics, shard_numbers, shard_numbers)
def test_different_shards_have_different_tags(topic: str, a: int, b: int) -> None:
    assert (ShardKeys(topic, a).tag == ShardKeys(topic, b).tag) == (a == b)
