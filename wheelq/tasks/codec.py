"""A task's typed codec: its arguments checked against the function's annotations and
written as a map of plain values (the job's payload), and read back into the annotated types
in the worker; its return value the same way (docs/architecture.md, "Tasks").

msgspec does the checking and the converting: builtins, ``datetime``, ``date``, ``time``,
``timedelta``, ``UUID``, ``Decimal``, enums, dataclasses, ``TypedDict``, ``NamedTuple`` and
``msgspec.Struct`` models, nested in lists, dicts and unions as the annotations say.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from wheelq.errors import InvalidArgumentError, PayloadTypeError, ResultTypeError

_PATH = re.compile(r" - at `\$\.([A-Za-z_][A-Za-z0-9_]*)(.*)`$")
_FIELD = re.compile(r"field `([A-Za-z_][A-Za-z0-9_]*)`")

_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)

_NATIVE = (bytes, bytearray)
"""Kept as they are in a payload: msgpack carries bytes (a JSON view shows them as
``{"$bytes": ...}``), where msgspec's plain form would spell them as base64 text."""


class TaskCodec:
    """The arguments and the result of one task function.

    One rule on both sides, strict (``"2"`` is not an ``int``, ``"true"`` not a ``bool``),
    and deep (each field of a dataclass, model or named tuple, each item of a list):
    `encode` binds a call's arguments as the function would, turns each into plain values
    and checks them against its annotation, and returns the payload: a map from parameter
    name to a plain value (``datetime`` as RFC 3339 text, ``UUID`` and ``Decimal`` as text,
    an enum as its value, a dataclass or model as a map, bytes as bytes); a parameter left
    to its default is left out, so the worker's default applies. `decode` checks such a map
    by the same rule, as a payload enqueued over HTTP by another language is, and turns it
    into keyword arguments of the annotated types. The forms JSON has for what it lacks
    are part of the rule on both sides: text for a ``datetime``, ``UUID``, ``Decimal``, a
    number for a ``Decimal``, text keys for ``int`` keys. A result is checked against the
    return annotation by the same rule where the function ran (`encode_result`).

    Raises:
        InvalidArgumentError: ``fn`` takes ``*args``, ``**kwargs`` or positional-only
            parameters (a payload names every argument), or its annotations cannot be
            resolved.
    """

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        self.name = name
        self.signature = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as exc:  # a NameError of a forward reference, mostly
            raise InvalidArgumentError(
                "fn", f"task {name}: its annotations cannot be resolved: {exc}"
            ) from exc
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        for p in self.signature.parameters.values():
            if p.kind not in _KINDS:
                raise InvalidArgumentError(
                    "fn",
                    f"task {name}: parameter {p.name!r} is {p.kind.description}; a task takes "
                    "named parameters only (its payload is a map of them)",
                )
            hint = hints.get(p.name, Any)
            if p.default is inspect.Parameter.empty:
                fields.append((p.name, hint))
            else:
                fields.append((p.name, hint, p.default))
        self.parameters = tuple(p.name for p in self.signature.parameters.values())
        self._args = msgspec.defstruct(
            f"{name}.args",
            fields,
            kw_only=True,
            omit_defaults=True,
            forbid_unknown_fields=True,
        )
        self.returns: Any = hints.get("return", Any)
        self._plain_result = self.returns is Any  # `-> None`: the result must be None

    def encode(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The payload of a call with `args` and `kwargs`; nothing is enqueued when it
        raises.

        Raises:
            InvalidArgumentError: An argument (or a field of one) does not fit its
                annotation, or the call does not bind; `parameter` names it.
            PayloadTypeError: An argument holds a value a payload cannot carry (an object
                of no supported type), naming the task and the parameter.
        """
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArgumentError(_parameter_of(str(exc)), f"{self.name}: {exc}") from None
        # Plain values first, then the check: a dataclass or model instance is checked field
        # by field this way (converting the instance itself would take it as it is).
        try:
            plain = msgspec.to_builtins(bound.arguments, builtin_types=_NATIVE)
        except (TypeError, ValueError):
            plain = {name: self._plain(name, value) for name, value in bound.arguments.items()}
        payload: dict[str, Any] = msgspec.to_builtins(self._check(plain), builtin_types=_NATIVE)
        return payload

    def decode(self, payload: Any) -> dict[str, Any]:
        """Keyword arguments from a payload `encode` (or anyone) wrote, by `encode`'s rule;
        InvalidArgumentError naming the parameter when it does not fit the annotations."""
        if not isinstance(payload, Mapping):
            raise InvalidArgumentError(
                "payload",
                f"{self.name}: a task's payload is a map of its arguments, "
                f"got {type(payload).__name__}",
            )
        args = self._check(payload)
        return {name: getattr(args, name) for name in self.parameters}

    def _check(self, plain: Any) -> Any:
        """`plain` as the arguments' struct, by the one rule of both sides."""
        try:
            return msgspec.convert(plain, self._args, strict=True, str_keys=True)
        except msgspec.ValidationError as exc:
            raise _invalid(self.name, exc) from None

    def _plain(self, parameter: str, value: Any) -> Any:
        try:
            return msgspec.to_builtins(value, builtin_types=_NATIVE)
        except (TypeError, ValueError) as exc:
            raise PayloadTypeError(
                f"{self.name}: argument {parameter!r} cannot be carried in a payload: {exc} "
                "(a payload holds what msgpack carries, and the types the tasks guide lists)"
            ) from None

    def encode_result(self, value: Any) -> Any:
        """The function's return value as plain values, to be kept as the job's result.

        Raises:
            ResultTypeError: It holds a value a result cannot carry, or does not fit the
                return annotation (`result()` could not read it back): the run fails, and
                is not run again (`wheelq.core.retry.after_failure`).
        """
        try:
            plain = None if value is None else msgspec.to_builtins(value, builtin_types=_NATIVE)
        except (TypeError, ValueError) as exc:
            raise ResultTypeError(
                f"{self.name}: its return value cannot be kept as a result: {exc}"
            ) from None
        if not self._plain_result:
            try:
                msgspec.convert(plain, self.returns, strict=True, str_keys=True)
            except msgspec.ValidationError as exc:
                raise ResultTypeError(
                    f"{self.name}: its return value does not fit its return annotation "
                    f"{spelled(self.returns)}: {exc}"
                ) from None
        return plain

    def decode_result(self, value: Any) -> Any:
        """A kept result as the return annotation's type (as it was, without one).

        Raises:
            msgspec.ValidationError: It does not fit the annotation (`TaskHandle` names the
                task and the job).
        """
        if self._plain_result or value is None:
            return value
        return msgspec.convert(value, self.returns, strict=True, str_keys=True)


def spelled(annotation: Any) -> str:
    """An annotation as code spells it (``Receipt``, ``list[int]``)."""
    if isinstance(annotation, type):
        return annotation.__name__
    return repr(annotation).replace("typing.", "")


def _invalid(name: str, exc: msgspec.ValidationError) -> InvalidArgumentError:
    """msgspec's "Expected `int`, got `str` - at `$.n`" as an error naming ``n``."""
    text = str(exc)
    found = _PATH.search(text)
    if found is None:  # about the map itself: "Object missing required field `n`"
        field = _FIELD.search(text)
        parameter = field[1] if field else "args"
        return InvalidArgumentError(parameter, f"{name}: argument {parameter!r}: {text}")
    parameter, inner = found[1], found[2]
    what = text[: found.start()]
    where = f" (at {parameter}{inner})" if inner else ""
    return InvalidArgumentError(parameter, f"{name}: argument {parameter!r}: {what}{where}")


def _parameter_of(message: str) -> str:
    """The parameter a binding error names ("missing a required argument: 'n'")."""
    found = re.search(r"'([A-Za-z_][A-Za-z0-9_]*)'", message)
    return found[1] if found else "args"
