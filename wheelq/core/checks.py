"""The one check of an int argument's range, for every caller-facing parameter that takes one."""

from __future__ import annotations

from wheelq.errors import InvalidArgumentError


def int_in(name: str, value: object, low: int, high: int) -> int:
    """Return `value` if it is an int (not a bool) in [low, high].

    Raises:
        InvalidArgumentError: Naming `name` and the range: "burst must be an int in [1, 10000],
            got 0".
    """
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgumentError(name, f"{name} must be an int in [{low}, {high}], got {value!r}")
    return value
