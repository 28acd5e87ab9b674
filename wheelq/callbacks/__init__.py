"""HTTP callbacks: POSTing due jobs to the URL they were enqueued with, signed with
``Wheelq-Signature: t=<unix ms>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` (`sign`, `verify`;
the body only: de-duplicate on its ``topic`` and ``id``; docs/guides/callbacks.md).
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["sign", "verify"]

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
    """Whether `header` signs `body` with `secret` within `tolerance_ms` of `now_ms` (any
    ``v1=`` may match, one per secret while secrets are rotated)."""
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
