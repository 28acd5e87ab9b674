"""The worker role: runs a handler on every job of a topic for one consumer group.

```
StreamReader ──XREADGROUP──▶ InFlightSet ──slots──▶ HandlerRunner ──▶ Settler ──XACK / retry.lua /
ClaimKeeper ──XAUTOCLAIM──▶      ▲                                             dead_letter.lua
            ──touch.lua (keep-alive)┘
```
`worker.Worker` wires the parts: `stream_reader` (XREADGROUP), `in_flight` (the entries
held and their slots), `handler_runner` and `handler_threads` (running user code),
`settler` (acks, retries, dead letters), `claim_keeper` (keep-alive and take-over),
`membership` (joining and leaving the group) and `shutdown` (the stop sequence). The
reader, the settler and the claim keeper are supervised services
(`wheelq.runtime.service`): each shows in ``Worker.status()["parts"]``.

Delivery is at-least-once: an entry is acked only after its handler returned, so a worker
that dies mid-job leaves the entry pending, and a live worker takes it over after the
visibility timeout. Handlers should be idempotent (or use the job id to make them so);
`Job.deliveries` > 1 tells a re-run of a taken-over entry.
"""
