"""Callback signatures: ``Wheelq-Signature: t=<unix ms>,v1=<hex HMAC-SHA256>``.

The MAC is over ``"<t>.<body>"`` (the timestamp, a dot, the raw request body) with the
deliverer's ``signing_secret``. A receiver recomputes it over the bytes it received, compares
in constant time, and refuses a timestamp too far from its clock, so a captured request
cannot be replayed later. `verify` does all three; receivers in other languages do the same
in a few lines (README, "HTTP service").

It covers the body only. The body carries the job's ``id``, ``topic`` and ``attempt``; the
``Wheelq-Id``, ``Wheelq-Topic`` and ``Wheelq-Attempt`` headers repeat them unsigned, for
routing and logs, and a captured request can be sent again within the tolerance with other
values in them. So a receiver de-duplicates on the verified body's ``topic`` and ``id``,
as the README's receiver does.
"""

from __future__ import annotations

import hashlib
import hmac

HEADER = "Wheelq-Signature"
DEFAULT_TOLERANCE_MS = 300_000


def signature(secret: str | bytes, t_ms: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``"<t_ms>.<body>"`` under `secret`."""
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, b"%d." % t_ms + body, hashlib.sha256).hexdigest()


def sign(secret: str | bytes, t_ms: int, body: bytes) -> str:
    """The ``Wheelq-Signature`` header value for `body` sent at `t_ms`."""
    return f"t={t_ms},v1={signature(secret, t_ms, body)}"


def verify(
    secret: str | bytes,
    header: str,
    body: bytes,
    now_ms: int,
    tolerance_ms: int = DEFAULT_TOLERANCE_MS,
) -> bool:
    """Whether `header` signs `body` with `secret`, at a time within `tolerance_ms` of
    `now_ms` (unix ms). Any ``v1=`` in the header may match (one per secret while secrets
    are rotated)."""
    t_ms: int | None = None
    macs: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            t_ms = int(value)
        elif name == "v1":
            macs.append(value)
    if t_ms is None or not macs or abs(now_ms - t_ms) > tolerance_ms:
        return False
    expected = signature(secret, t_ms, body)
    return any(hmac.compare_digest(expected, mac) for mac in macs)
