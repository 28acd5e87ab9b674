"""The worker role: runs a handler on every job of a topic for one consumer group.

`worker.Worker` wires the parts: `stream_reader` (membership, XREADGROUP, keep-alive and
take-over), `in_flight` (held entries and their slots, sized by `read_ahead`),
`handler_runner` (user code), `settler` (acks, retries, dead letters); `pull` serves pull
consumers. Delivery is at-least-once (docs/architecture.md, invariant 1).
"""
