"""The worker role (docs/architecture.md, invariant 1)."""
