"""Callback signatures: what a receiver checks. A signature made by `sign` verifies; a changed
body, another secret, a stale or future timestamp, or a malformed header does not."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from wheelq.callbacks import sign, verify

NOW = 1_700_000_000_000
BODY = b'{"id":"j1","payload":{"a":1}}'


def test_the_header_is_t_and_the_hex_hmac_of_t_dot_body() -> None:
    expected = hmac.new(b"k", b"%d." % NOW + BODY, hashlib.sha256).hexdigest()
    assert sign("k", NOW, BODY) == f"t={NOW},v1={expected}"


def test_a_signature_verifies_within_the_tolerance() -> None:
    header = sign("k", NOW, BODY)
    assert verify("k", header, BODY, NOW)
    assert verify("k", header, BODY, NOW + 300_000)
    assert verify("k", f"v1=0000, {header}", BODY, NOW), "one of several v1 values may match"


@pytest.mark.parametrize(
    ("secret", "header", "body", "now"),
    [
        ("k", sign("k", NOW, BODY), BODY + b" ", NOW),
        ("other", sign("k", NOW, BODY), BODY, NOW),
        ("k", sign("k", NOW, BODY), BODY, NOW + 300_001),
        ("k", sign("k", NOW, BODY), BODY, NOW - 300_001),
        ("k", sign("k", NOW, BODY).replace(f"t={NOW}", f"t={NOW + 1}"), BODY, NOW),
        ("k", "", BODY, NOW),
        ("k", f"t={NOW}", BODY, NOW),
        ("k", "v1=abc", BODY, NOW),
        ("k", "t=x,v1=abc", BODY, NOW),
    ],
)
def test_anything_else_does_not(secret: str, header: str, body: bytes, now: int) -> None:
    assert not verify(secret, header, body, now)
