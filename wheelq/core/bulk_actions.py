"""Actions on many jobs at once (docs/architecture.md, "Bulk actions"): the actions and the
states each takes, the selection token, and what an action answers (`BulkOutcome`).

A bulk action runs in two steps, whether the caller sees them or not. *Select*: the jobs
matching a filter (or named by id) are read a page at a time and copied, each with its due
time and its stamp (which write put it there), into a selection of their own per shard (a
sorted set and a hash that expire), and counted: that count is a dry run's answer. *Act*:
the selection is taken a batch at a time; each job is acted on only if it is still as it
was selected (`Selected`: in its state, due at that time, with that stamp), in the one
script that acts, and counted as *changed* (left as it is) if not; then it leaves the
selection. So an action acts on exactly the jobs its dry run counted, less those that moved
on, were moved or were written again meanwhile, and says how many those were. An act that
stops early (its `max_jobs` reached) answers the count still `remaining` and its selection,
which a later call goes on with.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import msgpack

from wheelq.core.job_list import ListState
from wheelq.errors import InvalidArgumentError

SELECTION_TTL_MS = 15 * 60 * 1000
"""How long a selection is kept after its last use: the time a dry run's answer may be
confirmed in."""
BATCH = 500
"""Jobs one round of an act checks and acts on (each act one short script call)."""


class BulkAction(StrEnum):
    """What a bulk action does to each job it selects."""

    CANCEL = "cancel"
    """pending, awaiting, retrying: cancel the job (every pending attempt of its id)."""
    RUN_NOW = "run_now"
    """pending, retrying: make it due now."""
    RESCHEDULE = "reschedule"
    """pending, retrying: move it to `at`, or by `shift_ms` from its due time."""
    REPLAY = "replay"
    """dead: run the dead letter again."""
    PURGE = "purge"
    """dead: delete the dead letter for good."""


BULK_ACTIONS = tuple(a.value for a in BulkAction)
_STATES = {
    BulkAction.CANCEL: (ListState.PENDING, ListState.AWAITING, ListState.RETRYING),
    BulkAction.RUN_NOW: (ListState.PENDING, ListState.RETRYING),
    BulkAction.RESCHEDULE: (ListState.PENDING, ListState.RETRYING),
    BulkAction.REPLAY: (ListState.DEAD,),
    BulkAction.PURGE: (ListState.DEAD,),
}


def _words(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def actions_of(state: ListState) -> tuple[BulkAction, ...]:
    """The actions that apply to jobs in `state` (none: an empty tuple)."""
    return tuple(a for a, takes in _STATES.items() if state in takes)


def bulk_action(action: object, state: ListState) -> BulkAction:
    """`action` as a `BulkAction` that applies to `state`, else InvalidArgumentError naming
    ``action``."""
    if not isinstance(action, str) or action not in BULK_ACTIONS:
        raise InvalidArgumentError(
            "action", f"action must be one of {', '.join(BULK_ACTIONS)}, got {action!r:.60}"
        )
    found = BulkAction(action)
    takes = _STATES[found]
    if state not in takes:
        raise InvalidArgumentError(
            "action",
            f"{found.value} acts on {_words([s.value for s in takes])} jobs, "
            f"not {state.value} ones",
        )
    return found


@dataclass(frozen=True, slots=True)
class Selection:
    """A selection's identity: where its members are kept, for which topic and state."""

    topic: str
    state: ListState
    name: str
    """The selection keys' suffix (random)."""
    matched: int
    """How many jobs it held when made."""

    @classmethod
    def new(cls, topic: str, state: ListState) -> Selection:
        return cls(topic, state, secrets.token_hex(8), 0)

    def token(self) -> str:
        """What a caller gives back to act on the selection."""
        packed = msgpack.packb([1, self.topic, self.state.value, self.name, self.matched])
        return base64.urlsafe_b64encode(packed).decode("ascii").rstrip("=")

    @classmethod
    def of(cls, token: object, topic: str) -> Selection:
        """The selection a token names, else InvalidArgumentError naming ``selection``."""
        bad = InvalidArgumentError(
            "selection", f"selection must be a dry run's `selection`, got {token!r:.60}"
        )
        if not isinstance(token, str) or not 0 < len(token) <= 200:
            raise bad
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            version, of_topic, state, name, matched = msgpack.unpackb(raw, raw=False)
        except (ValueError, TypeError, binascii.Error, msgpack.UnpackException):
            raise bad from None
        if (
            version != 1
            or not isinstance(name, str)
            or not (len(name) == 16 and all(c in "0123456789abcdef" for c in name))
            or not isinstance(matched, int)
            or state not in {s.value for s in ListState}
        ):
            raise bad
        if of_topic != topic:
            raise InvalidArgumentError(
                "selection", f"selection is of topic {of_topic!r:.60}, not {topic!r:.60}"
            )
        return cls(topic, ListState(state), name, matched)


class Selected(NamedTuple):
    """A pending or retrying job as its selection recorded it: the act goes on only while
    the job is still so (`cancel.lua` and `reschedule.lua` check it as they act)."""

    retry: bool
    """Selected as a pending retry (under its id or an alias member); else pending under
    its id."""
    due_ms: int
    """Its due time when selected."""
    stamp: str
    """Its envelope's stamp when selected (``wq_stamp``: which write put it there; "": none
    recorded, so it is never as selected)."""

    def args(self) -> list[str | int]:
        """The scripts' guard arguments: state, due ms, stamp."""
        return ["r" if self.retry else "p", self.due_ms, self.stamp]


@dataclass(frozen=True, slots=True)
class BulkOutcome:
    """What a bulk action did (a dry run: what it would act on)."""

    action: BulkAction
    state: ListState
    dry_run: bool
    matched: int
    """Jobs the selection held when it was made (a dry run's count)."""
    acted: int = 0
    """Jobs acted on."""
    changed: int = 0
    """Selected jobs no longer as selected when reached: out of their state (fired,
    settled, cancelled, replayed meanwhile), due at another time (rescheduled), or written
    again (enqueued again under the id, with another payload or options): left as they
    are."""
    skipped: int = 0
    """replay: dead letters that cannot run again (malformed, nested too deep, or held back
    by the topic's ``max_ready``): they stay dead letters."""
    remaining: int = 0
    """Selected jobs not reached yet: the act stopped at its `max_jobs`; act on `selection`
    again to go on."""
    selection: str | None = None
    """A dry run's selection (act on it to act on exactly these jobs), or the rest of one
    an act left; None once every selected job was reached."""
