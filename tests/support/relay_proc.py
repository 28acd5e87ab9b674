"""An outbox relay in a process of its own, for fault injection (kill -9, SIGSTOP, SIGTERM).

Usage: python -m tests.support.relay_proc REDIS_URL DSN SETTINGS_JSON

Runs `wheelq.outbox.Relay` as ``wheelq relay`` does, until SIGTERM (or a crash point armed
through ``WHEELQ_CRASH_AT``, e.g. ``relay.after_place:1``: killed after Redis took a batch
and before its rows' delete was committed). Prints ``{"event": "started"}`` once it has
connected, ``{"event": "stepped"}`` once its first step ended well, ``{"event": "failed",
"error": "..."}`` for each step that failed, and ``{"event": "stopped", "relayed": N}`` at
the end; logs to stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from tests.support.child import ChildProcess, arm_crash_points
from wheelq.core.settings import RelaySettings
from wheelq.outbox import Relay
from wheelq.producer.async_client import AsyncClient


class _Relay(Relay):
    stepped = False

    async def step(self) -> float | None:
        wait_s = await super().step()
        if not self.stepped:
            self.stepped = True
            print(json.dumps({"event": "stepped"}), flush=True)
        return wait_s

    def failed(self, exc: BaseException) -> float:
        print(json.dumps({"event": "failed", "error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return super().failed(exc)


async def _run(url: str, dsn: str, settings: dict[str, Any]) -> None:
    client = AsyncClient.from_url(url)
    relay = _Relay(client, dsn, RelaySettings(**settings))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await relay.check()
    await relay.start()
    print(json.dumps({"event": "started"}), flush=True)
    await stop.wait()
    await relay.stop()
    await client.aclose()
    print(json.dumps({"event": "stopped", "relayed": relay.relayed}), flush=True)


def main() -> None:
    arm_crash_points()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    asyncio.run(_run(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))


class RelayProcess(ChildProcess):
    """One relay process (``OUT_DIR/NAME.jsonl``, ``OUT_DIR/NAME.log``); `finish()` it."""

    def __init__(
        self,
        url: str,
        dsn: str,
        name: str,
        out_dir: Path,
        settings: dict[str, Any] | None = None,
        crash_at: str | None = None,
    ) -> None:
        args = [url, dsn, json.dumps(settings or {})]
        super().__init__("tests.support.relay_proc", args, name, out_dir, crash_at)

    def started(self) -> bool:
        return any(line["event"] == "started" for line in self.lines())

    def stepped(self) -> bool:
        return any(line["event"] == "stepped" for line in self.lines())

    def failures(self) -> list[str]:
        """The error of each step that failed so far, in order."""
        return [line["error"] for line in self.lines() if line["event"] == "failed"]


if __name__ == "__main__":
    main()
