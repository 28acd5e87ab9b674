"""core.payload.stored_too_deep counts a stored payload's list and map headers before decoding it
(docs/architecture.md, "Fast paths"): it must judge every payload as decoding it and walking
its lists and maps judges it."""

from __future__ import annotations

from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from wheelq.core.payload import MAX_PAYLOAD_DEPTH, _deeper_than, decode_payload, stored_too_deep


def decoded_too_deep(data: bytes) -> bool:
    """The plain judgement: decode, then walk."""
    try:
        return _deeper_than(decode_payload(data), MAX_PAYLOAD_DEPTH)
    except msgpack.StackError:
        return True
    except Exception:  # not msgpack at all: malformed, not too deep
        return False


def nested(levels: int, leaf: Any) -> Any:
    value = leaf
    for i in range(levels):
        value = {"k": value} if i % 2 else [value, "x"]
    return value


# header-like bytes inside strings and bins (0x91: fixarray 1, 0xdc: array 16, 0x81: fixmap 1)
LOOKALIKES = st.sampled_from([b"\x91" * 150, "\x91" * 150, b"\xdc\x00\x01" * 60, "\x81" * 120])
leaves = (
    st.none()
    | st.integers(-(2**63), 2**64 - 1)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | LOOKALIKES
)
payloads = st.builds(nested, st.integers(0, 140), leaves) | st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=30,
)


@settings(max_examples=300)
@given(payloads)
def test_a_stored_payload_is_too_deep_exactly_when_decoding_it_says_so(payload: Any) -> None:
    data = msgpack.packb(payload, use_bin_type=True)
    assert stored_too_deep(data) == decoded_too_deep(data)


@given(st.binary(max_size=400) | st.builds(lambda n: b"\x91" * n, st.integers(90, 2500)))
def test_bytes_that_are_no_payload_are_judged_alike(data: bytes) -> None:
    assert stored_too_deep(data) == decoded_too_deep(data)


def test_past_msgpacks_own_limit_both_say_too_deep() -> None:
    data = b"\x91" * 2000 + b"\xc0"  # 2,000 nested lists: msgpack refuses to decode it
    assert stored_too_deep(data) is decoded_too_deep(data) is True
