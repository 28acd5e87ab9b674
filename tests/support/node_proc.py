"""A scheduler node in a process of its own, for fault injection (kill -9, SIGSTOP).

Usage: python -m tests.support.node_proc URL TOPIC NODE_ID SETTINGS_JSON

Prints one JSON line per node event, with ``t`` the node's Redis-clock ms:
``{"t": 1795..., "kind": "emitted", "shard": 2, "count": 17}``. SIGTERM stops
it gracefully.
"""

from __future__ import annotations

import json
import sys

from wheelq import NodeEvent, Scheduler


def main() -> None:
    url, topic, node_id, settings = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    node: Scheduler

    def on_event(event: NodeEvent) -> None:
        line = {
            "t": node.clock.now_ms(),
            "kind": event.kind,
            "shard": event.shard,
            "count": event.count,
        }
        print(json.dumps(line), flush=True)

    node = Scheduler.from_url(url, [topic], node_id=node_id, on_event=on_event, **settings)
    node.run()


if __name__ == "__main__":
    main()
