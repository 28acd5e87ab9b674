"""Slow clients against `wheelq serve` (a subprocess, real sockets): a request's headers and
body have deadlines (``header_timeout_ms``, ``body_timeout_ms``), past which its connection
is closed; probes answer while many slow sockets are held; a connection past
``max_connections`` is answered 503 with Retry-After and closed; a request the parser
refuses is answered 400 with a problem document."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.cli import start_wheelq, stop
from tests.support.http import get_status
from tests.support.servers import free_port
from tests.support.waiting import eventually_sync

HALF_HEADER = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
CLOSED_WITHIN_S = 20
"""How long a test waits for the service to close a slow socket: far past every deadline
set here, so only a deadline never applied fails it."""


@contextlib.contextmanager
def serving(redis_url: str, **settings: int) -> Iterator[int]:
    """`wheelq serve` with `settings` ([serve], as environment variables); its port."""
    port = free_port()
    env = {f"WHEELQ_SERVE_{k.upper()}": str(v) for k, v in settings.items()}
    proc = start_wheelq(
        "serve", "--redis-url", redis_url, "--port", str(port), "--deliver", "none", env=env
    )
    try:
        eventually_sync(lambda: _up(proc, port), timeout_s=30, what="serve answering /healthz")
        yield port
    finally:
        _, err = stop(proc)
        assert "Traceback" not in err, err[-3000:]


def _up(proc: subprocess.Popen[str], port: int) -> bool:
    assert proc.poll() is None, proc.communicate()
    try:
        return get_status(f"http://127.0.0.1:{port}/healthz") == 200
    except OSError:
        return False


def connect(port: int, sent: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    if sent:
        sock.sendall(sent)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the service sends until it closes the connection.

    Raises:
        TimeoutError: Still open after `CLOSED_WITHIN_S`.
    """
    sock.settimeout(CLOSED_WITHIN_S)
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def still_open(sock: socket.socket) -> bool:
    """Nothing to read and no close seen (a closed socket reads as readable)."""
    readable, _, _ = select.select([sock], [], [], 0)
    return not readable


@pytest.mark.parametrize(
    ("sent", "answered"),
    [
        (b"", 0),  # connects, sends nothing
        (HALF_HEADER, 0),  # slowloris: half a header, never the rest
        # headers complete, half the body declared
        (
            b"POST /v1/topics/t/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"payload": ',
            0,
        ),
        # keep-alive: one request answered, then half of the next one's header
        (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + HALF_HEADER, 1),
    ],
    ids=["nothing", "half-a-header", "half-a-body", "half-the-next-header"],
)
def test_a_slow_request_has_its_connection_closed_past_its_deadline(
    redis_url: str, sent: bytes, answered: int
) -> None:
    settings = {"header_timeout_ms": 300, "body_timeout_ms": 300, "keep_alive_timeout_ms": 60_000}
    with serving(redis_url, **settings) as port, connect(port, sent) as sock:
        got = read_until_closed(sock)  # raises TimeoutError if the deadline never applies
        assert got.count(b"HTTP/1.1 200 ") == answered, got


def test_probes_answer_while_many_slow_sockets_are_held(redis_url: str) -> None:
    with serving(redis_url, header_timeout_ms=120_000) as port:
        slow = [connect(port, HALF_HEADER) for _ in range(200)]
        try:
            for _ in range(5):
                for probe in ("/healthz", "/readyz"):
                    assert get_status(f"http://127.0.0.1:{port}{probe}") == 200
            assert all(still_open(s) for s in slow)  # held all along, not shed
        finally:
            for s in slow:
                s.close()


def test_connections_past_max_connections_are_answered_503_and_closed(redis_url: str) -> None:
    with serving(redis_url, max_connections=20, header_timeout_ms=120_000) as port:
        held = [connect(port, HALF_HEADER) for _ in range(25)]
        try:
            # The last five are past the cap whatever else is still open (the probe's).
            for extra in held[20:]:
                head, _, body = read_until_closed(extra).partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 503 "), head
                assert b"retry-after: 1" in head.lower()
                assert b"application/problem+json" in head
                assert json.loads(body)["status"] == 503
            assert sum(still_open(s) for s in held[:20]) >= 19
            assert get_status(f"http://127.0.0.1:{port}/healthz") == 503
        finally:
            for s in held:
                s.close()
        eventually_sync(
            lambda: get_status(f"http://127.0.0.1:{port}/healthz") == 200,
            timeout_s=10,
            what="an answer once the held connections closed",
        )


@pytest.mark.parametrize(
    "sent",
    [
        b"GET /v1/topics/t/events?since=\x01 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",  # a control byte
        b"GET /healthz HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n",  # no such version
        b"GET /healthz HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n",  # a header without its colon
        b"POST /v1/topics/t/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # TLS spoken to a plain socket
    ],
    ids=["control-byte-in-url", "http-9.9", "header-without-colon", "bad-length", "tls-hello"],
)
def test_a_request_the_parser_refuses_is_answered_400_with_a_problem_document(
    redis_url: str, sent: bytes
) -> None:
    """Bug: uvicorn answered what its parser refused with text/plain, a content type no
    operation documents (schemathesis's ST105 on a long, odd query string)."""
    with serving(redis_url) as port, connect(port, sent) as sock:
        head, _, body = read_until_closed(sock).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), head
        assert b"content-type: application/problem+json" in head.lower(), head
        problem = json.loads(body)
        assert (problem["status"], problem["type"]) == (400, "urn:wheelq:problem:malformed-request")
        assert get_status(f"http://127.0.0.1:{port}/healthz") == 200  # and the service goes on
