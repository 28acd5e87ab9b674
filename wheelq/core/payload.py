"""The payload and result codec: msgpack, encoded once by the producer and carried as opaque
bytes; its nesting bound, its shallow reader and its JSON spelling (`jsonable`)
(docs/architecture.md, "Payloads")."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import msgpack

from wheelq.errors import (
    PayloadTooDeepError,
    PayloadTooLargeError,
    PayloadTypeError,
    ResultError,
    ResultTooLargeError,
    ResultTypeError,
)

# --- payload: msgpack, encoded once by the producer and carried as opaque bytes


class _NotPlain(Exception):
    """The value needs the careful path."""


def _not_plain(value: Any) -> Any:
    raise _NotPlain


def payload_packer() -> msgpack.Packer:
    """A packer for `encode_payload`'s fast path: exact plain types only (not tuples)."""
    return msgpack.Packer(use_bin_type=True, strict_types=True, default=_not_plain)


def encode_payload(payload: Any, max_bytes: int, packer: msgpack.Packer | None = None) -> bytes:
    """Encode `payload` (PayloadTypeError, PayloadTooLargeError); plain types in one pass."""
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
        raise _type_error(exc, payload) from exc
    if len(data) > max_bytes:
        raise PayloadTooLargeError(
            "payload",
            f"payload must encode to at most {max_bytes} bytes of msgpack, got {len(data)}",
        )
    if len(data) > MAX_PAYLOAD_DEPTH and isinstance(payload, _NESTED):  # else: no need
        check_depth(payload, data)
    return data


MAX_PAYLOAD_DEPTH = 100
"""Most levels of lists and maps a payload may nest (``1`` has none, ``[[1]]`` two): deep
enough for any document, shallow enough that every reader renders it without recursion
limits, and with room for the answer around it under the 128 levels JSON parsers such as
serde_json accept. A stored payload nested deeper (written by an older version, or straight
into Redis) is rendered with its remainder as ``{"$truncated": ...}`` (`jsonable`)."""

# A list or map starts with one of these bytes in msgpack (fixmap, fixarray, array 16/32,
# map 16/32): a stored payload with fewer of them than the limit cannot nest deeper than it,
# and need not be decoded to tell. Counted in one C pass: marked and counted (faster for
# short payloads), or the others deleted.
_CONTAINER_BYTES = frozenset([*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF])
_MARKED = bytes(b in _CONTAINER_BYTES for b in range(256))
_NOT_CONTAINER_BYTES = bytes(b for b in range(256) if b not in _CONTAINER_BYTES)
_SHORT = 2048


def check_depth(payload: Any, data: bytes) -> None:
    """`PayloadTooDeepError` if `payload` (encoded as `data`) nests deeper than
    `MAX_PAYLOAD_DEPTH`: free for a short one (each level takes a byte), else a walk of its
    lists and maps (not of its bytes: a large string costs nothing)."""
    if len(data) > MAX_PAYLOAD_DEPTH and _deeper_than(payload, MAX_PAYLOAD_DEPTH):
        raise _too_deep()


def stored_too_deep(data: bytes) -> bool:
    """Whether a stored payload nests deeper than `MAX_PAYLOAD_DEPTH` (one that does not
    decode at all is not: it is malformed, which its readers handle)."""
    if not _may_be_deep(data):
        return False
    try:
        return _deeper_than(decode_payload(data), MAX_PAYLOAD_DEPTH)
    except msgpack.StackError:  # past msgpack's own 1,024 levels
        return True
    except Exception:  # msgpack raises several unrelated types
        return False


def _may_be_deep(data: bytes) -> bool:
    """False when `data` has too few list and map headers to nest past the limit."""
    if len(data) <= MAX_PAYLOAD_DEPTH:
        return False
    if len(data) < _SHORT:
        return data.translate(_MARKED).count(1) > MAX_PAYLOAD_DEPTH
    return len(data.translate(None, _NOT_CONTAINER_BYTES)) > MAX_PAYLOAD_DEPTH


def _too_deep() -> PayloadTooDeepError:
    return PayloadTooDeepError(
        "payload",
        f"payload must nest lists and maps at most {MAX_PAYLOAD_DEPTH} levels deep, "
        f"got {MAX_PAYLOAD_DEPTH + 1} or more",
    )


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests lists, tuples and dicts deeper than `limit` (no recursion)."""
    if not isinstance(value, _NESTED):
        return False
    todo = [(value, 1)]
    pop, push = todo.pop, todo.append
    while todo:
        item, depth = pop()
        if depth > limit:
            return True
        # dict keys that decode back are never lists or maps
        for v in item.values() if isinstance(item, dict) else item:
            if isinstance(v, _NESTED):
                push((v, depth + 1))
    return False


_NESTED = (dict, list, tuple)


def _encode_careful(payload: Any) -> bytes:
    try:
        data: bytes = msgpack.packb(payload, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _type_error(exc, payload) from exc
    try:
        decode_payload(data)
    except Exception as exc:  # msgpack raises several unrelated types
        raise PayloadTypeError(
            "payload must decode back from msgpack: dict keys must be None, bool, int, "
            f"float, str or bytes, not a tuple (it decodes as an unhashable list); {exc}"
        ) from exc
    return data


def _type_error(exc: Exception, payload: Any) -> PayloadTypeError | PayloadTooDeepError:
    if _deeper_than(payload, MAX_PAYLOAD_DEPTH):  # msgpack's own limit is 511 levels
        return _too_deep()
    return PayloadTypeError(
        f"payload must be msgpack-serialisable (None, bool, int, float, str, bytes, "
        f"list, tuple, dict); {exc}"
    )


def encode_result(result: Any, max_bytes: int) -> bytes:
    """A handler's return value as its job keeps it: msgpack, as a payload is encoded.

    Raises:
        ResultTooLargeError: It encodes to more than `max_bytes` (``result_max_bytes``).
        ResultTypeError: msgpack cannot serialise it, or it would not decode back.
    """
    try:
        return encode_payload(result, max_bytes)
    except PayloadTooLargeError:
        size = len(msgpack.packb(result, use_bin_type=True))
        raise ResultTooLargeError(
            f"the handler's result must encode to at most result_max_bytes={max_bytes} bytes "
            f"of msgpack (a worker setting, 0-{MAX_RESULT_BYTES}; 0 keeps no result), got {size}"
        ) from None
    except PayloadTypeError as exc:
        raise ResultTypeError(f"the handler's result (its return value): {exc}") from None
    except PayloadTooDeepError as exc:
        raise ResultError(f"the handler's result (its return value): {exc}") from None


MAX_RESULT_BYTES = 16 * 1024 * 1024
"""The largest `result_max_bytes` a worker accepts."""


def decode_payload(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def read_payload(data: bytes) -> Any:
    """A stored payload as its readers show it (a job's state, a dead letter, a schedule):
    `decode_payload`, but one nested past msgpack's own 1,024 levels (by an older version, or
    straight into Redis) is read one level past `MAX_PAYLOAD_DEPTH`, the lists and maps
    there empty, so `jsonable` renders it as it renders any payload that deep. Raises as
    `decode_payload` for anything else that does not decode."""
    try:
        return decode_payload(data)
    except msgpack.StackError:
        return _read_shallow(data, MAX_PAYLOAD_DEPTH)


_ARRAYS = frozenset([*range(0x90, 0xA0), 0xDC, 0xDD])
_MAPS = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])


def _read_shallow(data: bytes, levels: int) -> Any:
    """`data` decoded without recursion: its lists and maps to `levels` levels, those one
    level deeper empty (their items skipped)."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=len(data))
    unpacker.feed(data)
    top: list[Any] = []
    # each open list or map: [it, items left to read (a map's keys and values), key read]
    todo: list[list[Any]] = [[top, 1, None]]
    while todo:
        frame = todo[-1]
        if not frame[1]:
            todo.pop()
            continue
        frame[1] -= 1
        first = data[unpacker.tell()]
        value: Any
        if first in _ARRAYS or first in _MAPS:
            value, n = (
                ([], unpacker.read_array_header())
                if first in _ARRAYS
                else ({}, 2 * unpacker.read_map_header())
            )
            if len(todo) <= levels:
                todo.append([value, n, None])
            else:
                _skip(unpacker, data, n)
        else:
            value = unpacker.unpack()
        into = frame[0]
        if isinstance(into, list):
            into.append(value)
        elif frame[1] % 2:  # a key: its value follows
            frame[2] = value
        else:
            into[frame[2]] = value
    if unpacker.tell() != len(data):
        raise ValueError(f"{len(data) - unpacker.tell()} bytes past the payload")
    return top[0]


def _skip(unpacker: msgpack.Unpacker, data: bytes, items: int) -> None:
    """Skip `items` msgpack objects, however deep, without recursion."""
    while items:
        items -= 1
        first = data[unpacker.tell()]
        if first in _ARRAYS:
            items += unpacker.read_array_header()
        elif first in _MAPS:
            items += 2 * unpacker.read_map_header()
        else:
            unpacker.skip()


def jsonable(value: Any, *, exact: bool = False) -> Any:
    """A decoded payload as plain JSON types, one spelling for the CLI, the HTTP service and
    callback bodies: bytes (anywhere inside) become ``{"$bytes": "<base64>"}``, a non-finite
    float ``{"$float": "nan"}``, a map key that is not a string its JSON text, anything else
    ``{"$repr": "..."}``; a payload enqueued as JSON comes back as it went in.

    A list or map nested past `MAX_PAYLOAD_DEPTH` levels (only a payload stored by an older
    version or written straight into Redis has one) becomes ``{"$truncated": "<what>"}``,
    or, with `exact` (a pull, whose consumer must get the payload as it is), a ValueError;
    so no payload renders more than one level past the limit, and none recurses past it.
    """
    return _jsonable(value, MAX_PAYLOAD_DEPTH, exact)


def _jsonable(value: Any, left: int, exact: bool) -> Any:
    if isinstance(value, str | int | bool) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict | list | tuple):
        if left == 0:
            what = "a map" if isinstance(value, dict) else "a list"
            if exact:
                raise ValueError(
                    f"payload nests deeper than {MAX_PAYLOAD_DEPTH} levels: {what} at that depth"
                )
            return {"$truncated": f"{what} nested deeper than {MAX_PAYLOAD_DEPTH} levels"}
        left -= 1
        if isinstance(value, dict):
            return {
                k if isinstance(k, str) else json.dumps(_jsonable(k, left, exact)): _jsonable(
                    v, left, exact
                )
                for k, v in value.items()
            }
        return [_jsonable(v, left, exact) for v in value]
    return {"$repr": repr(value)}


def payload_text(payload: Any, limit: int, *, indent: bool = False) -> str:
    """A decoded payload as JSON text (`jsonable`), cut to `limit` characters: the one
    excerpt of a payload (the console, the job lists)."""
    text = json.dumps(jsonable(payload), ensure_ascii=False, indent=2 if indent else None)
    return text if len(text) <= limit else text[: limit - 1] + "…"
