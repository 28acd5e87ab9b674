"""The process list, the producer's read: every live scheduler node, worker, service and relay
process with what it is doing (docs/architecture.md, "Processes")."""

from __future__ import annotations

from wheelq.core.process import ProcessInfo, live_order
from wheelq.producer.operations import Op, Producer
from wheelq.store import processes as store


def processes(producer: Producer) -> Op[list[ProcessInfo]]:
    """The live processes (those whose last beat is younger than their ttl), by role, host
    and pid; a record that cannot be read is left out."""
    (found,) = yield [store.live()]
    return live_order(found.processes)
