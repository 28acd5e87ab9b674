"""The wheelq app's migrations: the outbox's tables (docs/guides/outbox.md)."""
