"""An exact account of a run (the chaos soak's check): every acknowledged job set against
what Redis and the handlers show. Counts that must be 0 name a broken invariant: ``lost``
(1), ``fired_twice`` (2), ``early`` (3), ``handled_never``, ``handled_too_often`` (beyond
`max_runs`); ``handled_again`` counts at-least-once duplicates within the bound.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wheelq.testing.fired import Fired

MUST_BE_ZERO = ("lost", "fired_twice", "early", "handled_never", "handled_too_often")


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """The counts of `reconcile`, and up to 20 example ids of each that is not 0."""

    acknowledged: int
    fired: int
    pending: int
    cancelled: int
    dead: int
    lost: int
    fired_twice: int
    early: int
    handled_never: int
    handled_again: int
    handled_too_often: int
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether every count that must be 0 is."""
        return all(getattr(self, name) == 0 for name in MUST_BE_ZERO)

    def as_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["ok"] = self.ok
        return out


def reconcile(
    acknowledged: Iterable[str],
    fired: Iterable[Fired],
    *,
    pending: Iterable[str] = (),
    cancelled: Iterable[str] = (),
    dead: Iterable[str] = (),
    handled: Mapping[str, int] | None = None,
    max_runs: int = 1,
) -> Reconciliation:
    """Set the `acknowledged` ids against what is there: fired, pending, cancelled, dead, handled.

    `handled` (None: not checked) may count up to `max_runs` runs per id.
    """
    acked = set(acknowledged)
    records = list(fired)
    by_attempt = Counter((r.job_id, r.attempt) for r in records)
    fired_ids = {r.job_id for r in records}
    pending_ids, cancelled_ids, dead_ids = set(pending), set(cancelled), set(dead)
    examples: dict[str, list[str]] = {}

    def count(name: str, ids: Iterable[str]) -> int:
        found = sorted(set(ids))
        if found:
            examples[name] = found[:20]
        return len(found)

    lost = count("lost", acked - fired_ids - pending_ids - cancelled_ids - dead_ids)
    twice = count("fired_twice", [i for (i, _), n in by_attempt.items() if n > 1])
    early = count("early", [r.job_id for r in records if r.lateness_ms < 0])
    never = again = too_often = 0
    if handled is not None:
        never = count("handled_never", (fired_ids & acked) - dead_ids - handled.keys())
        again = count("handled_again", [i for i, n in handled.items() if 1 < n <= max_runs])
        too_often = count("handled_too_often", [i for i, n in handled.items() if n > max_runs])
    return Reconciliation(
        acknowledged=len(acked),
        fired=len(fired_ids & acked),
        pending=len(pending_ids & acked),
        cancelled=len(cancelled_ids & acked),
        dead=len(dead_ids & acked),
        lost=lost,
        fired_twice=twice,
        early=early,
        handled_never=never,
        handled_again=again,
        handled_too_often=too_often,
        examples=examples,
    )
