"""Registering ordered jobs in their key's order before they are written (`wheelq.core.flow`,
``enqueue(..., key=k, ordered=True)``): a worker then runs a key's jobs one at a time, in
due order, whatever shard each lives in.

Registration comes first, in a round trip of its own, so a job can never run before it is
known to its key; a producer that dies between the two leaves a registration with no job,
which workers pass over once it is `ORDER_GRACE_MS` past due and still unknown.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wheelq.core.flow import order_keys
from wheelq.store import flow
from wheelq.store.job_writes import JobWrite

if TYPE_CHECKING:
    from wheelq.producer.operations import Op


def register_order(topic: str, writes: Sequence[JobWrite]) -> Op[Any]:
    """One call per key, registering each of its ordered writes (id, absolute due)."""
    by_key: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for w in writes:
        if w.order_key:
            by_key[w.order_key].append((w.id, w.due.value_ms))
    yield [flow.order_register(order_keys(topic, key), jobs) for key, jobs in by_key.items()]
