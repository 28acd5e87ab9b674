"""The producer role: `Client` and `AsyncClient`, which enqueue, cancel, reschedule and
inspect jobs, driving the sans-I/O operations of `operations`; the local `spool` for
enqueues Redis cannot take."""
