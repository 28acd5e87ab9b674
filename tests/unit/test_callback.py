"""core.callback: what a callback may be (URL form, headers, time limit), its packed form,
and which hosts count as private for the SSRF check."""

from __future__ import annotations

import msgpack
import pytest

from wheelq.core.callback import (
    MAX_HEADERS,
    MAX_URL_CHARS,
    Callback,
    private_address,
    validate_callback,
)
from wheelq.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("https://example.com/h", Callback("https://example.com/h")),
        ({"url": "http://example.com:8080/h?a=b"}, Callback("http://example.com:8080/h?a=b")),
        (
            {"url": "https://[2001:db8::1]/h", "headers": {"X-Key": "v"}, "timeout_ms": 300_000},
            Callback("https://[2001:db8::1]/h", {"X-Key": "v"}, 300_000),
        ),
    ],
)
def test_a_good_callback_is_accepted_as_given(value: object, expected: Callback) -> None:
    assert validate_callback(value) == expected


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("", "callback.url"),
        ("example.com/h", "callback.url"),
        ("file:///etc/passwd", "callback.url"),
        ("https://", "callback.url"),
        ("https://example.com/a b", "callback.url"),
        ("https://example.com:99999/", "callback.url"),
        ("https://example.com/#frag", "callback.url"),
        ("https://u:p@example.com/", "callback.url"),
        ("https://example.com/" + "a" * MAX_URL_CHARS, "callback.url"),
        ({"headers": {}}, "callback.url"),
        ({"url": "https://e.com", "headers": {"bad name": "v"}}, "callback.headers"),
        ({"url": "https://e.com", "headers": {"Content-Type": "text/plain"}}, "callback.headers"),
        ({"url": "https://e.com", "headers": {"wheelq-signature": "x"}}, "callback.headers"),
        ({"url": "https://e.com", "headers": {"X": 1}}, "callback.headers"),
        (
            {"url": "https://e.com", "headers": {f"X-{i}": "v" for i in range(MAX_HEADERS + 1)}},
            "callback.headers",
        ),
        ({"url": "https://e.com", "timeout_ms": 300_001}, "callback.timeout_ms"),
        ({"url": "https://e.com", "timeout_ms": True}, "callback.timeout_ms"),
        ({"url": "https://e.com", "timeout_ms": 1.5}, "callback.timeout_ms"),
        ({"url": "https://e.com", "method": "PUT"}, "callback.method"),
        (["https://e.com"], "callback"),
    ],
)
def test_a_bad_callback_names_its_field(value: object, field: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        validate_callback(value)
    assert raised.value.parameter == field
    assert field.rsplit(".", maxsplit=1)[-1] in str(raised.value)


def test_a_callback_round_trips_packed() -> None:
    hook = Callback("https://example.com/h", {"X-A": "1"}, 1234)
    assert Callback.unpack(hook.pack()) == hook


@pytest.mark.parametrize(
    "data",
    [b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"url": "ftp://x"}), msgpack.packb({})],
)
def test_a_malformed_packed_callback_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError, match="callback"):
        Callback.unpack(data)


@pytest.mark.parametrize(
    ("host", "private"),
    [
        ("localhost", True),
        ("api.localhost", True),
        ("127.0.0.1", True),
        ("10.1.2.3", True),
        ("172.16.0.1", True),
        ("192.168.1.1", True),
        ("169.254.169.254", True),
        ("0.0.0.0", True),
        ("::1", True),
        ("[::1]", True),
        ("fd00::1", True),
        ("::ffff:127.0.0.1", True),
        ("224.0.0.1", True),
        ("8.8.8.8", False),
        ("2606:4700::1111", False),
        ("example.com", False),
    ],
)
def test_private_address(host: str, private: bool) -> None:
    assert private_address(host) is private
