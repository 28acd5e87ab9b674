"""Fakes for unit tests of the services: a scripted executor.

`ScriptedExecutor` stands in for `wheelq.store.executor.AsyncExecutor`: it records every
call it is asked to send and answers from a script the test writes, so a service's
step can be driven without a server (with a `ManualClock` for the time):

    executor = ScriptedExecutor()
    executor.answer("trim", lambda call: TrimResult(3, False, 0))
    executor.fail_next(ConnectionError("reset"))      # the next run() raises this
    await trimmer.step()
    assert executor.sent("trim") == [...]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from wheelq.store.call import Call

Answer = Callable[[Call[Any]], Any]


def name_of(call: Call[Any]) -> str:
    """A call's script name, or its command's first word (``"XREADGROUP"``)."""
    if call.script is not None:
        return call.script
    return str(call.command[0]).upper() if call.command else ""


class ScriptedExecutor:
    """Answers calls by name from `answer()`; `fail_next()` makes whole rounds raise.

    An answer may return a value (the parsed reply) or an exception instance (the call's
    own error, raised or put in place as `AsyncExecutor` does with `return_exceptions`).
    A call with no answer fails the test with an AssertionError naming it.
    """

    def __init__(self) -> None:
        self.rounds: list[list[Call[Any]]] = []
        self._answers: dict[str, Answer] = {}
        self._failures: list[BaseException] = []

    def answer(self, name: str, answer: Answer) -> None:
        """Answer every later call named `name` with `answer(call)`."""
        self._answers[name] = answer

    def fail_next(self, *errors: BaseException) -> None:
        """The next ``len(errors)`` rounds raise these, one each, before anything is sent."""
        self._failures.extend(errors)

    def node_of(self, key: str) -> str:
        return ""  # one server

    def sent(self, name: str) -> list[Call[Any]]:
        """Every call named `name` sent so far (rounds that raised included), in order."""
        return [c for calls in self.rounds for c in calls if name_of(c) == name]

    async def run(
        self, calls: Sequence[Call[Any]], *, return_exceptions: bool = False
    ) -> list[Any]:
        self.rounds.append(list(calls))
        if self._failures:
            raise self._failures.pop(0)
        out: list[Any] = []
        for call in calls:
            name = name_of(call)
            if name not in self._answers:
                raise AssertionError(f"the test gave no answer for a {name!r} call")
            reply = self._answers[name](call)
            if isinstance(reply, BaseException) and not return_exceptions:
                raise reply
            out.append(reply)
        return out
