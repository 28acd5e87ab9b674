"""The worker role: runs a handler on every job of a topic for one consumer group
(docs/architecture.md, invariant 1)."""
