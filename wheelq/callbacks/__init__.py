"""HTTP callbacks: POSTing due jobs to the URL they were enqueued with.

- `wheelq.callbacks.deliverer`: the `Deliverer`, a worker handler (imports aiohttp, the
  ``http`` extra);
- `wheelq.callbacks.delivery`: the worker of group ``callbacks`` that runs it;
- `wheelq.callbacks.hosts`: per-host concurrency caps and circuit breakers;
- `wheelq.callbacks.signing`: ``Wheelq-Signature``, for receivers to `verify` (no extra
  needed).
"""

from wheelq.callbacks.signing import sign, verify

__all__ = ["sign", "verify"]
