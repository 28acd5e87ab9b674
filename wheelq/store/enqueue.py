"""Enqueue: `JobWrite` and the `enqueue.lua` call that places a batch on one shard
(docs/architecture.md, "The life of a job"; the script's header lists the layouts), and the
producer's other writes of a pending job: debounce, reschedule, cancel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from wheelq.core.bulk_actions import Selected
from wheelq.core.due import DueSpec
from wheelq.core.keys import ShardKeys
from wheelq.errors import ScriptError
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import NOT_PENDING, Placed, check


class JobWrite(NamedTuple):
    """One job for `enqueue` (a named tuple: three times cheaper to make than a dataclass)."""

    id: str
    due: DueSpec
    replace: bool
    envelope: bytes
    token: str = ""  # a spool replay's token for this write
    order_key: str = ""  # the key whose order the job joins (its `due` is then absolute)
    new: bool = False  # the client made the id (80 random bits): none can be pending
    orders: bool = False  # a priority other than the default: its shard orders its due jobs
    key: str = ""  # the job's key (the key index notes it under it); "" for none


_PLACED = {int(p): p for p in Placed}  # a fifteenth of the cost of Placed(code)


def _placed(reply: Any) -> list[Placed]:
    try:
        return [_PLACED[code] for code in check("enqueue", reply)[1:]]
    except (KeyError, TypeError) as exc:
        raise ScriptError(f"enqueue.lua returned an unknown outcome ({reply!r:.200})") from exc


def enqueue(
    keys: ShardKeys,
    jobs: Sequence[JobWrite],
    record_ms: int = 0,
    call_token: str = "",
    deadline_ms: int = 0,
    *,
    orders: bool = False,
) -> Call[list[Placed]]:
    """Parses to each job's outcome; `MalformedJobError` when an envelope due now is undecodable.

    `record_ms` > 0 without `call_token`: a spool replay (a job whose token the shard's record
    holds is APPLIED, not written again), refused whole with `LateReplayError` once the Redis
    clock is past `deadline_ms` (0: never); with `call_token`: a spooling client's direct call.
    `orders`: a job of the call has a priority other than the default: the shard orders its
    due jobs from then on (docs/architecture.md, "The due line").
    """
    replay = record_ms > 0 and not call_token
    keyed = any(job.key for job in jobs)  # each job's arguments then end with its key
    args: list[str | bytes | int] = [keys.topic, keys.wake_channel, record_ms, call_token]
    shared = None if replay or not jobs else _shared_layout(jobs, keyed)
    if shared is not None:
        args += shared
        args[4] = f"{args[4]!s}{'o' if orders else ''}{'k' if keyed else ''}"
    else:  # each job carries its mode and replace; a replay's deadline takes the layout's place
        deadline = deadline_ms if replay and deadline_ms else ""
        args.append(f"{deadline}{'o' if orders else ''}{'k' if keyed else ''}")
        for job in jobs:
            mode, value = job.due.wire
            args += (job.id, mode, value, "1" if job.replace else "0", job.envelope)
            if replay:
                args.append(job.token)
            if keyed:
                args.append(job.key)
    return script_call("enqueue", keys, args, _placed)


def enqueue_columns(
    keys: ShardKeys,
    due: DueSpec,
    ids: list[str],
    envelopes: list[bytes],
    *,
    orders: bool = False,
) -> Call[list[Placed]]:
    """`enqueue` of new jobs (generated ids) that share `due` and replace nothing, from
    their ids and envelopes as two lists (the shared layout, built by slice assignment);
    `orders` as `enqueue`'s."""
    mode, value = due.wire
    n = len(ids)
    jobs: list[str | bytes | int] = [""] * (3 * n)
    jobs[0::3] = ids
    jobs[1::3] = [value] * n
    jobs[2::3] = envelopes
    layout = mode + ("0no" if orders else "0n")
    args: list[str | bytes | int] = [keys.topic, keys.wake_channel, 0, "", layout, *jobs]
    return script_call("enqueue", keys, args, _placed)


def _shared_layout(jobs: Sequence[JobWrite], keyed: bool) -> list[str | bytes | int] | None:
    """The layout argument ('n': all new ids, 'u': no repeats) when every job has the first's
    mode and replace, then each job's id, value and envelope (and its key, `keyed`); else
    None.
    """
    mode, _ = jobs[0].due.wire
    replace = jobs[0].replace
    args: list[str | bytes | int] = [""]
    new = True
    for job in jobs:
        job_mode, value = job.due.wire
        if job_mode != mode or job.replace is not replace:
            return None
        new = new and job.new
        args += (job.id, value, job.envelope, job.key) if keyed else (job.id, value, job.envelope)
    unique = new or len(set(args[1 :: 4 if keyed else 3])) == len(jobs)
    args[0] = mode + ("1" if replace else "0") + ("n" if new else "u" if unique else "")
    return args


def settle_replayed(keys: ShardKeys, tokens: Sequence[str], expires_ms: int) -> Call[int]:
    """Make the record keep `tokens` (rows gone from their source) only until `expires_ms`
    (Redis ms): an earlier expiry each, never a later one, and no token added; parses to how
    many it shortened."""
    command: list[str | int] = ["ZADD", keys.spooled, "XX", "LT", "CH"]
    for token in tokens:
        command += (expires_ms, token)
    return Call(command=tuple(command), parse=int)


def job_ids(call: Call[Any]) -> list[str]:
    """The ids an `enqueue`, `reschedule` or `cancel` call writes, read from its arguments."""
    if call.script == "enqueue":  # topic, channel, record_ms, call token, layout; then per job
        replay = int(call.args[2]) and not call.args[3]
        layout = str(call.args[4])
        per_job = 6 if replay else 3 if layout.rstrip("ok") else 5  # 3: a shared layout
        per_job += layout.endswith("k")  # each job's key
        return [str(a) for a in call.args[5::per_job]]
    if call.script == "reschedule":
        return [str(call.args[2])]
    if call.script == "cancel":
        return [str(call.args[0])]
    return []


def _rescheduled(reply: Any) -> Placed | None:
    outcome = check("reschedule", reply)[1]
    return None if outcome == NOT_PENDING else Placed(outcome)


def reschedule(
    keys: ShardKeys, job_id: str, due: DueSpec, selected: Selected | None = None
) -> Call[Placed | None]:
    """The outcome, None when not pending (or not as `selected`, a bulk action's record of
    it); `MalformedJobError` if due now and undecodable."""
    mode, value = due.wire
    args: list[str | int] = [keys.topic, keys.wake_channel, job_id, mode, value]
    if selected is not None:
        args += selected.args()
    return script_call("reschedule", keys, args, _rescheduled)


def debounce(
    keys: ShardKeys, job_id: str, debounce_ms: int, max_wait_ms: int, envelope: bytes
) -> Call[tuple[Placed, int]]:
    """Due `debounce_ms` from now, at most `max_wait_ms` (0: no cap) after the first call."""

    def parse(reply: Any) -> tuple[Placed, int]:
        r = check("debounce", reply)
        return Placed(r[1]), int(r[2])

    args: list[str | bytes | int] = [keys.topic, keys.wake_channel, job_id, debounce_ms]
    args += [max_wait_ms, envelope]
    return script_call("debounce", keys, args, parse)


def cancel(keys: ShardKeys, job_id: str, selected: Selected | None = None) -> Call[bool]:
    """Whether anything was removed (False: not pending, or not as `selected`, a bulk
    action's record of it)."""
    args: list[str | int] = [job_id] if selected is None else [job_id, *selected.args()]
    return script_call("cancel", keys, args, lambda r: bool(check("cancel", r)[1]))


def cancel_key_entries(keys: ShardKeys, key: str, count: int) -> Call[tuple[int, bool]]:
    """Take up to `count` entries from the head of `key`'s list in the shard's key index and
    cancel each id's attempts that carry the key, in one step (`cancel.lua`): how many jobs
    were cancelled, and whether the list holds more."""

    def parse(reply: Any) -> tuple[int, bool]:
        r = check("cancel", reply)
        return int(r[1]), bool(int(r[2]))

    return script_call("cancel", keys, ["", key, count], parse)
