"""The far tier's own calls: a leader's promotion of the next leaf (`far_promote.lua`);
docs/architecture.md, "The far tier". Putting, finding and dropping far jobs happen inside
the scripts that enqueue, cancel, reschedule and look jobs up (``wq_far_*`` of
``includes/far_tier.lua``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wheelq.core.keys import ShardKeys
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check

PROMOTE_BATCH = 500
"""Records one promotion call reads at most (a leaf holds up to 512)."""


@dataclass(frozen=True, slots=True)
class Promoted:
    """What one promotion call did."""

    moved: int
    """Jobs moved into the sorted set."""
    skipped: int
    """Dead records passed over (cancelled, rescheduled or replaced while far)."""
    more: bool
    """A leaf is due for promotion still: call again at once."""
    next_ms: int | None
    """Redis ms at which the next leaf comes within the horizon; None: no far job."""


def promote(keys: ShardKeys, token: str, limit: int = PROMOTE_BATCH) -> Call[Promoted]:
    """Promote up to `limit` records of the shard's next bucket due for it (fenced by the
    lease: LeaseLostError when `token` is not the leader's)."""

    def parse(reply: Any) -> Promoted:
        r = check("far_promote", reply)
        next_ms = int(r[4])
        return Promoted(int(r[1]), int(r[2]), r[3] == 1, None if next_ms < 0 else next_ms)

    return script_call("far_promote", keys, (token, keys.wake_channel, limit), parse)
