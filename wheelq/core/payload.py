"""A job's payload: any msgpack-serialisable value, encoded once by the producer and carried
as opaque msgpack bytes from then on (in the envelope, `wheelq.core.job`, and the stream
entry). `encode_payload` refuses what would not decode back; `decode_payload` reads it;
`jsonable` spells a decoded one as JSON.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import msgpack

from wheelq.errors import PayloadTooLargeError, PayloadTypeError


class _NotPlain(Exception):
    """Raised inside a strict packer: the value needs the careful path."""


def _not_plain(value: Any) -> Any:
    raise _NotPlain


def payload_packer() -> msgpack.Packer:
    """A packer for `encode_payload`'s fast path: exact types only (dict, list, str, bytes,
    int, float, bool, None). Anything else, tuples included, aborts it."""
    return msgpack.Packer(use_bin_type=True, strict_types=True, default=_not_plain)


def encode_payload(payload: Any, max_bytes: int, packer: msgpack.Packer | None = None) -> bytes:
    """Encode `payload` with msgpack, check its size, and that `decode_payload` reads it back.

    A payload of exact plain types (dict, list, str, bytes, int, float, bool, None) is
    always readable and is packed in one pass. Anything else (a tuple, a subclass, an
    unsupported type) is packed leniently and decoded once to prove it reads back: a dict
    key that is a tuple packs as an array, which no reader can use as a key.

    Args:
        payload: The value.
        max_bytes: The largest encoding accepted.
        packer: A `payload_packer()` to reuse across a batch (several times faster than a
            new one per value); not thread-safe.

    Raises:
        PayloadTypeError: The value (or something inside it) cannot be serialised, or
            would not decode back (a tuple as a dict key).
        PayloadTooLargeError: The encoding is longer than `max_bytes`.
    """
    try:
        if packer is None:
            data: bytes = msgpack.packb(
                payload, use_bin_type=True, strict_types=True, default=_not_plain
            )
        else:
            data = packer.pack(payload)
    except _NotPlain:
        data = _encode_careful(payload)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _type_error(exc) from exc
    if len(data) > max_bytes:
        raise PayloadTooLargeError(
            "payload",
            f"payload must encode to at most {max_bytes} bytes of msgpack, got {len(data)}",
        )
    return data


def _encode_careful(payload: Any) -> bytes:
    """Lenient packing plus a decode of the result (the rare path)."""
    try:
        data: bytes = msgpack.packb(payload, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _type_error(exc) from exc
    try:
        decode_payload(data)
    except Exception as exc:  # msgpack raises several unrelated types
        raise PayloadTypeError(
            "payload must decode back from msgpack: dict keys must be None, bool, int, "
            f"float, str or bytes, not a tuple (it decodes as an unhashable list); {exc}"
        ) from exc
    return data


def _type_error(exc: Exception) -> PayloadTypeError:
    return PayloadTypeError(
        f"payload must be msgpack-serialisable (None, bool, int, float, str, bytes, "
        f"list, tuple, dict); {exc}"
    )


def decode_payload(data: bytes) -> Any:
    """Decode payload bytes written by `encode_payload` (or any msgpack writer)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def jsonable(value: Any) -> Any:
    """A decoded payload as plain JSON types, one spelling for the CLI, the HTTP service and
    callback bodies: bytes (anywhere inside) become ``{"$bytes": "<base64>"}``, a non-finite
    float ``{"$float": "nan"}``, a map key that is not a string its JSON text, anything else
    ``{"$repr": "..."}``; a payload enqueued as JSON comes back as it went in."""
    if isinstance(value, str | int | bool) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {
            k if isinstance(k, str) else json.dumps(jsonable(k)): jsonable(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return {"$repr": repr(value)}
