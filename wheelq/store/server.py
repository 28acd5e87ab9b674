"""The server itself, for any role: PING, its clock (TIME), its version and its settings."""

from __future__ import annotations

from typing import Any

from wheelq.store.call import Call
from wheelq.store.scripts import text


def ping() -> Call[bool]:
    """PING: whether the server answers (raises what a failed call raises)."""
    return Call(command=("PING",), parse=bool, keyless=True)


def server_time() -> Call[float]:
    """Parses TIME to ms (float, µs precision)."""
    return Call(
        command=("TIME",), parse=lambda r: int(r[0]) * 1000 + int(r[1]) / 1000, keyless=True
    )


def server_version() -> Call[tuple[int, ...]]:
    """INFO server's ``redis_version`` as numbers (Valkey's is the Redis one it matches)."""

    def parse(reply: Any) -> tuple[int, ...]:
        text = str(reply.get("redis_version", "0"))
        return tuple(int(part) for part in text.split(".") if part.isdigit())

    return Call(command=("INFO", "server"), parse=parse, keyless=True)


def server_config(name: str) -> Call[dict[str, str]]:
    def parse(reply: Any) -> dict[str, str]:
        pairs = (
            reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=True)
        )
        return {text(k): text(v) for k, v in pairs}

    # One word "CONFIG GET": how redis-py names it, so its cluster client routes it.
    return Call(command=("CONFIG GET", name), parse=parse, keyless=True)
