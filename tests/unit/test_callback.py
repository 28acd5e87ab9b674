"""core.callback: what a callback may be (URL form, headers, time limit), its packed form,
the host as the HTTP client connects to it, which hosts no client can deliver to, and
which count as private for the SSRF check."""

# ruff: noqa: RUF001 - the Unicode spellings are the point

from __future__ import annotations

import msgpack
import pytest
from yarl import URL

from wheelq.callbacks.resolver import private_target
from wheelq.core.callback import (
    MAX_HEADERS,
    MAX_URL_CHARS,
    Callback,
    callback_host,
    private_address,
    undeliverable,
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
        # the forms an IPv6 address carries an IPv4 one in: judged by the IPv4 address
        ("::ffff:7f00:1", True),
        ("::127.0.0.1", True),
        ("64:ff9b::7f00:1", True),
        ("64:ff9b::a9fe:a9fe", True),
        ("64:ff9b:1::a00:1", True),
        ("2002:7f00:1::", True),
        ("2002:a9fe:a9fe::1", True),
        ("::ffff:808:808", False),
        ("64:ff9b::808:808", False),
        ("2002:808:808::1", False),
        ("::", True),
        ("fe80::1%lo", True),
        ("fec0::1", True),
        ("ff02::1", True),
        ("100.64.0.1", True),
        # Unicode digits and dots, case, a final dot: read as connected to
        ("１２７.０.０.１", True),
        ("127。0。0。1", True),
        ("169．254．169．254", True),
        ("10｡0｡0｡1", True),
        ("ＬＯＣＡＬＨＯＳＴ", True),
        ("LOCALHOST.", True),
        ("x.LocalHost", True),
        ("８.８.８.８", False),
        # never canonical, so never delivered: counted private (fails closed)
        ("127.1", True),
        ("2130706433", True),
        ("0x7f.0.0.1", True),
        ("0", True),
        ("%31%32%37.0.0.1", True),
    ],
)
def test_private_address(host: str, private: bool) -> None:
    assert private_address(host) is private


UNDELIVERABLE = [
    # IPv4 in any spelling but the canonical dotted quad
    "127.1",
    "127.0.1",
    "0",
    "1",
    "2130706433",
    "017700000001",
    "0177.0.0.1",
    "0x7f.0.0.1",
    "0x7f000001",
    "0X7F.1",
    "127.000.000.001",
    "127.0.0.01",
    "127.0.0.1.",
    "256.0.0.1",
    "1.2.3.4.5",
    "example.0x",
    "a.b.123",
    "0251.0376.0251.0376",
    # the same in Unicode digits and dots
    "２１３０７０６４３３",
    "０ｘ７ｆ.0.0.1",
    "127.0.0.⒈",
    "１２７。１",
    # percent-encoding, zones, what is no name
    "%31%32%37.0.0.1",
    "127.0.0.%31",
    "%6c%6f%63%61%6c%68%6f%73%74",
    "[fe80::1%25lo]",
    "ex*ample.com",
    "-bad.example.com",
    "⑴27.0.0.1",
]


@pytest.mark.parametrize("host", UNDELIVERABLE)
def test_a_host_no_client_can_deliver_to_is_refused_naming_callback_url(host: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        validate_callback(f"http://{host}:8080/h")
    assert raised.value.parameter == "callback.url"
    assert "callback.url must be an http(s) URL with a host an HTTP client can reach" in str(
        raised.value
    )


@pytest.mark.parametrize(
    "host",
    [
        "example.com",
        "EXAMPLE.com.",
        "hooks-1.example.co.uk",
        "_acme.example.com",
        "xn--bcher-kva.example",
        "bücher.example",
        "ＥＸＡＭＰＬＥ.com",
        "8.8.8.8",
        "127.0.0.1",
        "0.0.0.0",
        "[::1]",
        "[2001:db8::1]",
        "[::ffff:127.0.0.1]",
        "cafe.be",
        "1.2.3.example",
        "0x.example",
        "localhost",
    ],
)
def test_a_deliverable_host_passes_the_form_check(host: str) -> None:
    """Private or not (that is the service's and deliverer's to judge), these are hosts."""
    assert validate_callback(f"https://{host}/h").url == f"https://{host}/h"
    assert undeliverable(callback_host(f"https://{host}/h"), bracketed="[" in host) == ""


SPELLINGS = [
    "127.0.0.1",
    "１２７.０.０.１",
    "127。0。0。1",
    "127．0．0．1",
    "127｡0｡0｡1",
    "𝟏𝟐𝟕.𝟎.𝟎.𝟏",
    "①②⑦.⓪.⓪.①",
    "127.0.0.⒈",
    "１６９.２５４.１６９.２５４",
    "０ｘ７ｆ.0.0.1",
    "２１３０７０６４３３",
    "ｌｏｃａｌｈｏｓｔ",
    "LocalHost。",
    "ＥＸＡＭＰＬＥ.com",
    "bücher.example",
    "Ｂücher。example",
    "[::FFFF:127.0.0.1]",
    "[0:0:0:0:0:0:0:1]",
    "[64:FF9B::7F00:1]",
    "127.1",
    "%31%32%37.0.0.1",
]


@pytest.mark.parametrize("host", SPELLINGS)
def test_the_host_checked_is_the_host_the_http_client_connects_to(host: str) -> None:
    """`callback_host` (pure, for the library's check) agrees with yarl, aiohttp's own
    parser, on every spelling: the two checks can never see different hosts."""
    url = f"http://{host}:8080/h"
    assert callback_host(url) == URL(url).raw_host
    assert Callback(url).host == URL(url).raw_host


@pytest.mark.parametrize(
    "host",
    [
        "１２７.０.０.１",
        "127。0。0。1",
        "127．0．0．1",
        "127｡0｡0｡1",
        "１６９.２５４.１６９.２５４",
        "ｌｏｃａｌｈｏｓｔ",
        "[::ffff:7f00:1]",
        "[64:ff9b::7f00:1]",
        "[::127.0.0.1]",
        "[2002:7f00:1::]",
        "[fec0::1]",
    ],
)
def test_the_service_and_deliverer_see_a_private_target_in_any_spelling(host: str) -> None:
    why = private_target(f"http://{host}:8080/h")
    assert "targets a private address" in why


@pytest.mark.parametrize("host", ["example.com", "８.８.８.８", "[2606:4700::1111]", "bücher.de"])
def test_a_public_target_or_a_name_is_no_private_target(host: str) -> None:
    assert private_target(f"https://{host}/h") == ""
