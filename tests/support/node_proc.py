"""A scheduler node in a process of its own, for fault injection (kill -9, SIGSTOP, SIGTERM).

Usage: python -m tests.support.node_proc URL TOPIC NODE_ID SETTINGS_JSON

Prints one JSON line per node event, with ``t`` the node's Redis-clock ms (for ``emitted``,
when the emit call was sent: a reply that arrives after a pause is not a late emit):
``{"t": 1795..., "kind": "emitted", "shard": 2, "count": 17}``, and logs to stderr (INFO).
SIGTERM stops it gracefully, as in `wheelq scheduler` (a second one exits at once).
`NodeProcess` starts one from a test and reads those lines back.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from tests.support.child import ChildProcess, arm_crash_points
from wheelq import NodeEvent, Scheduler
from wheelq.cli.signals import run_until_signal


def main() -> None:
    arm_crash_points()
    url, topic, node_id, settings = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    node: Scheduler

    def on_event(event: NodeEvent) -> None:
        line = {
            "t": node.clock.now_ms() if event.sent_ms is None else event.sent_ms,
            "kind": event.kind,
            "shard": event.shard,
            "count": event.count,
        }
        print(json.dumps(line), flush=True)

    node = Scheduler.from_url(url, [topic], node_id=node_id, on_event=on_event, **settings)
    run_until_signal(node, logging.getLogger("node_proc"))


class NodeProcess(ChildProcess):
    """One node process; its stdout goes to ``OUT_DIR/NODE_ID.jsonl``, its log (stderr) to
    ``OUT_DIR/NODE_ID.log``. Always call `finish()` (it kills the process if alive)."""

    def __init__(
        self,
        url: str,
        topic: str,
        node_id: str,
        out_dir: Path,
        settings: dict[str, Any],
        crash_at: str | None = None,
    ) -> None:
        args = [url, topic, node_id, json.dumps(settings)]
        super().__init__("tests.support.node_proc", args, node_id, out_dir, crash_at)

    def events(self, kind: str) -> list[dict[str, Any]]:
        """The event lines of `kind` printed so far."""
        return [e for e in self.lines() if e["kind"] == kind]


if __name__ == "__main__":
    main()
