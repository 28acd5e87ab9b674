"""Faults a test or the chaos soak injects into a Redis server, each one command of the
server's own, on a plain connection to ONE server (loop over a cluster's primaries).

- `flush_scripts`: ``SCRIPT FLUSH``; every client's next script call gets NOSCRIPT and
  must load its script again.
- `pause_writes`: ``CLIENT PAUSE ms WRITE``: reads are served, write commands (and
  scripts that may write) wait until the pause ends.
- `kill_clients`: ``CLIENT KILL`` of every other client: every connection wheelq holds
  is closed mid-whatever it was doing.
- `squeeze_memory` / `restore_memory`: ``maxmemory`` below what the server uses, with
  ``noeviction``, so every write fails with OOM; then both settings as they were.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis


def flush_scripts(conn: redis.Redis) -> None:
    conn.script_flush()


def pause_writes(conn: redis.Redis, ms: int) -> None:
    conn.client_pause(ms, all=False)  # all=False: CLIENT PAUSE ms WRITE


def kill_clients(conn: redis.Redis) -> int:
    """Close every normal and pub/sub client connection but this one; returns how many."""
    killed = 0
    for kind in ("normal", "pubsub"):
        killed += int(conn.client_kill_filter(_type=kind, skipme=True))
    return killed


@dataclass(frozen=True, slots=True)
class MemoryState:
    """What `squeeze_memory` changed, for `restore_memory`."""

    maxmemory: str
    policy: str


def squeeze_memory(conn: redis.Redis) -> MemoryState:
    """Set ``maxmemory`` to half of ``used_memory`` with ``noeviction``: writes get OOM."""
    config = conn.config_get("maxmemory*")
    state = MemoryState(str(config["maxmemory"]), str(config["maxmemory-policy"]))
    used = int(conn.info("memory")["used_memory"])
    conn.config_set("maxmemory-policy", "noeviction")
    conn.config_set("maxmemory", max(1, used // 2))
    return state


def restore_memory(conn: redis.Redis, state: MemoryState) -> None:
    conn.config_set("maxmemory", state.maxmemory)
    conn.config_set("maxmemory-policy", state.policy)
