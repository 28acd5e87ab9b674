"""Managing wheelq: `Admin` and `AsyncAdmin`, and the sans-I/O operations only they drive
(topics' groups, pauses, events, dead letters, job lists, bulk actions, schedules, processes,
the forecast)."""
