"""schemathesis's command line, as tests/integration/test_openapi_conformance*.py run it:
``python -m tests.support.fuzz run URL ...`` takes schemathesis's own arguments.

One cost is cut, and nothing else changes. Hypothesis builds the strategy of a regex's
character class anew each time it is asked for a regex (``st.from_regex``), and schemathesis
asks for one per operation, phase, parameter and length bound. The service's printable-name
pattern (ids, groups: `wheelq.web.models.PRINTABLE`) is a class of some 700 ranges, which
hypothesis adds one code point at a time: about a million, 5-15 s a build on this machine,
built some 100 times a run, most of its time. Here each distinct class (its members, the
regex flags, the alphabet) is built once per run and its strategy reused: a strategy is an
immutable description, so the values drawn, and with a fixed seed the requests sent, are
the same as without it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def memoize_character_classes() -> bool:
    """Make hypothesis build the strategy of each distinct regex character class once; False
    if its internals moved (then nothing is patched: the run is as slow as before, not wrong)."""
    try:
        import re._constants as sre  # the regex parser's codes (Python 3.11+)

        from hypothesis.strategies._internal import regex
    except ImportError:
        return False
    build: Callable[..., Any] | None = getattr(regex, "_strategy", None)
    if build is None:
        return False
    built: dict[tuple[object, ...], Any] = {}

    def _strategy(codes: Any, context: Any, is_unicode: bool, *, alphabet: Any) -> Any:
        if not (isinstance(codes, tuple) and codes and codes[0] == sre.IN):
            return build(codes, context, is_unicode, alphabet=alphabet)
        key = (
            repr(codes),
            getattr(context, "flags", None),
            is_unicode,
            getattr(alphabet, "intervals", alphabet),
        )
        try:
            return built[key]
        except KeyError:
            strategy = built[key] = build(codes, context, is_unicode, alphabet=alphabet)
            return strategy
        except TypeError:  # an alphabet that cannot be a key: built each time, as before
            return build(codes, context, is_unicode, alphabet=alphabet)

    regex._strategy = _strategy
    return True


def main() -> int:
    memoize_character_classes()
    from schemathesis.cli import schemathesis

    sys.argv[0] = "schemathesis"
    return int(schemathesis() or 0)


if __name__ == "__main__":
    raise SystemExit(main())
