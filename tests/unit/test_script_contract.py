"""The scripts' contract with Python, without a server: one status table, every wrapper's
parser through `check`, the Lua names of the table, the KEYS each script takes and the header
each script opens with."""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources
from typing import Any

import pytest

from wheelq.core.due import DueSpec
from wheelq.core.job import Envelope
from wheelq.core.keys import DATA_KEY_NAMES, PROCESS_RECORDS_KEY, PROCESSES_KEY, ShardKeys
from wheelq.errors import LateReplayError, LeaseLostError, MalformedJobError, ScriptError
from wheelq.store import (
    consume,
    dead_letters,
    enqueue,
    events,
    far_tier,
    fire,
    follow,
    groups,
    history,
    job_lists,
    leases,
    limits,
    observe,
    schedules,
    selections,
    settle,
    topics,
)
from wheelq.store.call import Call
from wheelq.store.scripts import (
    FLOW_SCRIPTS,
    NAMES,
    NOT_PENDING,
    PROCESS_SCRIPTS,
    SCRIPT_KEYS,
    GroupOutcome,
    Placed,
    Status,
    check,
    script,
    script_keys,
)

KEYS = ShardKeys("emails", 3)
LUA = resources.files("wheelq.store") / "lua"
KEY_TYPES = {
    "delayed": "ZSET",
    "jobs": "HASH",
    "ready": "STREAM",
    "callbacks": "STREAM",
    "retries": "ZSET",
    "stream": "STREAM",
    "dead": "STREAM",
    "lease": "STRING",
    "followed": "STRING",
    "horizon": "STRING",
    "inbox": "LIST",
    "spooled": "ZSET",
    "history": "HASH",
    "history_old": "HASH",
    "cancelled": "ZSET",
    "debounce": "HASH",
    "limits": "HASH",
    "schedules": "HASH",
    "sched_state": "HASH",
    "sched_epoch": "STRING",
    "sched_marks": "HASH",
    "waiters": "ZSET",
    "done": "STREAM",
    "events": "STREAM",
    "far": "HASH",
    "held": "HASH",
    "turns": "ZSET",
    "weights": "HASH",
    "keyed": "HASH",
    "followers": "HASH",
    "notices": "STREAM",
    "waiting": "HASH",
}

# One call of every script wrapper: what each script's reply goes through.
WRAPPERS: dict[str, Callable[[], Call[Any]]] = {
    "enqueue": lambda: enqueue.enqueue(
        KEYS, [enqueue.JobWrite("j", DueSpec("at", 1), False, Envelope(b"p").pack())]
    ),
    "reschedule": lambda: enqueue.reschedule(KEYS, "j", DueSpec("at", 1)),
    "cancel": lambda: enqueue.cancel(KEYS, "j"),
    "debounce": lambda: enqueue.debounce(KEYS, "j", 100, 0, Envelope(b"p").pack()),
    "emit_due": lambda: fire.emit_due(KEYS, "t", 1, ["j"]),
    "preload": lambda: fire.preload(KEYS, "t", 0, 1000, 10, 30_000),
    "lease_acquire": lambda: leases.lease_acquire(KEYS, "t", 30_000),
    "lease_renew": lambda: leases.lease_renew(KEYS, "t", 30_000),
    "lease_release": lambda: leases.lease_release(KEYS, "t"),
    "lease_followed": lambda: leases.lease_followed(KEYS, "t", True),
    "lease_watch": lambda: leases.lease_watch(KEYS, [KEYS.wake_channel]),
    "lease_reap": lambda: leases.lease_reap(KEYS, 100),
    "ack": lambda: settle.ack_done(KEYS, "g", [("1-0", "j", 5, 1, None, 1)]),
    "retry": lambda: settle.retry(KEYS, "g", "1-0", "j", 10, b"e"),
    "dead_letter": lambda: settle.dead_letter(KEYS, "g", [("1-0", "failed", "boom")]),
    "claim": lambda: consume.claim(KEYS, "g", "w", 1000, "0-0", 10, 5),
    "touch": lambda: consume.touch(KEYS, "g", "w", 0, ["1-0"]),
    "trim": lambda: history.trim(KEYS, 1000, 10, 1000),
    "replay": lambda: dead_letters.replay(KEYS, ["1-0"]),
    "purge_dead": lambda: dead_letters.purge_dead(KEYS, None),
    "drop_shard": lambda: topics.drop_shard(KEYS, "check"),
    "delete_group": lambda: groups.delete_group(KEYS, "g", "check"),
    "create_group": lambda: groups.create_group(KEYS, "g", "0", 64),
    "lookup": lambda: history.lookup(KEYS, "j"),
    "list_pending": lambda: job_lists.pending_page(
        KEYS, job_lists.DuePage(None, None, (1, b"j"), 10)
    ),
    "due_within": lambda: observe.due_within(KEYS, [5, 1]),
    "far_promote": lambda: far_tier.promote(KEYS, "token"),
    "list_held": lambda: job_lists.held_page(KEYS, 0, 10),
    "list_retrying": lambda: job_lists.retrying_page(KEYS, None, 10),
    "list_retrying_by_due": lambda: job_lists.retrying_by_due(
        KEYS, job_lists.DuePage(None, None, (1, b"j"), 10)
    ),
    "due_times": lambda: selections.due_times(KEYS, ["j"]),
    "key_jobs": lambda: job_lists.key_jobs(KEYS, "k", 0),
    "schedule_put": lambda: schedules.put(KEYS, "s", b"d", False),
    "schedule_state": lambda: schedules.change_state(KEYS, "pause", "s"),
    "schedule_read": lambda: schedules.read(KEYS),
    "schedule_claim": lambda: schedules.claim(KEYS, "t", 0),
    "schedule_advance": lambda: schedules.advance(KEYS, "t", 1, {"s": 5}),
    "schedule_fence": lambda: schedules.fence(KEYS, 1, False, ["s"]),
    "materialize": lambda: schedules.materialize(KEYS, 1, "s", [(5, b"e")]),
    "note_events": lambda: events.note(KEYS, "started", "g", [("j", 1)]),
    "weights_put": lambda: limits.write_weights(KEYS, {"tenant": 3}),
    "follow": lambda: follow.follow(KEYS, "j", "g", KEYS, "w", "t"),
    "resolve": lambda: follow.hear(KEYS, []),
}


def header(name: str) -> str:
    text = (LUA / f"{name}.lua").read_text("utf-8")
    assert text.startswith(f"--[[ {name}.lua — "), f"{name}.lua does not open with its header"
    return text[: text.index("\n]]\n")]


def body(name: str) -> str:
    text = (LUA / f"{name}.lua").read_text("utf-8")
    return text[text.index("\n]]\n") + 4 :]


# --- check ----------------------------------------------------------------------------------


def test_check_returns_an_ok_reply_whole() -> None:
    assert check("trim", [0, 5, 1, 0]) == [0, 5, 1, 0]


@pytest.mark.parametrize("reply", [[1], [2, b"x"], [-9], [-1], [-3, b"t", b"j"], [99, 1, 2]])
def test_check_of_a_status_not_in_the_table_is_a_script_error_naming_the_script(
    reply: list[Any],
) -> None:
    with pytest.raises(ScriptError, match=r"^emit_due\.lua returned unknown status"):
        check("emit_due", reply)


@pytest.mark.parametrize("reply", [None, [], b"OK", 3, [b"0", 1], ["0"]])
def test_check_of_a_reply_that_is_not_a_status_list_is_a_script_error(reply: Any) -> None:
    with pytest.raises(ScriptError, match=r"^preload\.lua returned .* expected a status list"):
        check("preload", reply)


def test_check_wrong_type_names_the_script_and_the_key() -> None:
    with pytest.raises(ScriptError, match=r"^cancel\.lua: key '\{emails:3\}:jobs' holds"):
        check("cancel", [Status.WRONG_TYPE, b"{emails:3}:jobs"])


def test_check_lease_lost_is_a_lease_lost_error() -> None:
    with pytest.raises(LeaseLostError, match=r"^emit_due\.lua"):
        check("emit_due", [Status.LEASE_LOST])


def test_check_malformed_is_a_malformed_job_error_naming_topic_and_job() -> None:
    with pytest.raises(MalformedJobError) as caught:
        check("reschedule", [Status.MALFORMED, b"emails", b"j7", b"not msgpack"])

    assert (caught.value.topic, caught.value.job_id) == ("emails", "j7")
    assert "not msgpack" in str(caught.value)


def test_check_late_is_a_late_replay_error_that_is_not_a_script_error() -> None:
    with pytest.raises(LateReplayError) as caught:
        check("enqueue", [Status.LATE, b"emails", b"1700000015000", 1_700_000_015_250])

    assert (caught.value.topic, caught.value.deadline_ms) == ("emails", 1_700_000_015_000)
    assert "250 ms after its deadline" in str(caught.value)
    assert not isinstance(caught.value, ScriptError)  # a failure to retry, not a refusal


# --- every wrapper parses through check -----------------------------------------------------


def test_every_script_has_a_wrapper_here() -> None:
    assert set(WRAPPERS) == set(NAMES)


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_every_wrapper_sends_its_script_with_the_keys_of_the_table(name: str) -> None:
    call = WRAPPERS[name]()

    assert call.script == name
    assert tuple(call.keys) == tuple(getattr(KEYS, attr) for attr in SCRIPT_KEYS[name])


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_every_wrapper_raises_script_error_naming_its_script_on_an_unknown_status(
    name: str,
) -> None:
    with pytest.raises(ScriptError, match=rf"^{name}\.lua returned unknown status 7"):
        WRAPPERS[name]().parse([7, 1, 1, 1, 1])


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_every_wrapper_raises_script_error_naming_the_key_on_wrong_type(name: str) -> None:
    with pytest.raises(ScriptError, match=rf"^{name}\.lua: key 'k' holds"):
        WRAPPERS[name]().parse([Status.WRONG_TYPE, b"k"])


@pytest.mark.parametrize("name", ["emit_due", "preload"])
def test_fenced_wrappers_raise_lease_lost(name: str) -> None:
    with pytest.raises(LeaseLostError):
        WRAPPERS[name]().parse([Status.LEASE_LOST])


@pytest.mark.parametrize("name", ["lease_renew", "lease_release"])
def test_lease_renew_and_release_parse_lease_lost_to_false_and_ok_to_true(name: str) -> None:
    assert WRAPPERS[name]().parse([Status.LEASE_LOST]) is False
    assert WRAPPERS[name]().parse([Status.OK]) is True


def test_lease_acquire_parses_its_outcome_fields() -> None:
    parse = WRAPPERS["lease_acquire"]().parse

    assert parse([0, 1, 1, b"1700000000123", b"t"]) == leases.LeaseAttempt(
        True, True, 1_700_000_000_123, "t"
    )
    assert parse([0, 0, 0, b"1700000000123", b"other"]) == leases.LeaseAttempt(
        False, False, 1_700_000_000_123, "other"
    )


def test_delete_group_parses_its_outcomes_and_refuses_an_unknown_one() -> None:
    parse = WRAPPERS["delete_group"]().parse

    assert parse([0, GroupOutcome.GROUP_BUSY, 3]) == groups.GroupDrop(GroupOutcome.GROUP_BUSY, 3)
    assert parse([0, 0, 0]).outcome is GroupOutcome.NO_GROUP
    with pytest.raises(ScriptError, match=r"^delete_group\.lua returned an unknown outcome"):
        parse([0, 9, 0])


def test_reschedule_parses_the_placement_table() -> None:
    parse = WRAPPERS["reschedule"]().parse

    assert parse([0, Placed.SCHEDULED]) is Placed.SCHEDULED
    assert parse([0, Placed.FIRED]) is Placed.FIRED
    assert parse([0, NOT_PENDING]) is None


# --- the Lua side of the tables -------------------------------------------------------------


def lua_constants() -> dict[str, int]:
    text = (LUA / "includes" / "status.lua").read_text("utf-8")
    return {m[1]: int(m[2]) for m in re.finditer(r"^local WQ_(\w+) = (-?\d+)", text, re.M)}


def test_the_status_include_names_the_same_statuses_and_outcomes_as_python() -> None:
    expected = {s.name: s.value for s in Status}
    expected |= {p.name: p.value for p in Placed} | {"NOT_PENDING": NOT_PENDING}
    expected |= {o.name: o.value for o in GroupOutcome}

    assert lua_constants() == expected


@pytest.mark.parametrize("name", NAMES)
def test_scripts_return_statuses_by_name_only(name: str) -> None:
    literal = re.findall(r"return \{\s*-?\d", body(name))

    assert literal == [], f"{name}.lua returns a status by number, not by its WQ_ name"


@pytest.mark.parametrize("name", NAMES)
def test_every_error_status_a_script_returns_is_in_its_header(name: str) -> None:
    returns = header(name)[header(name).index("Returns:") :]
    for status in (Status.WRONG_TYPE, Status.LEASE_LOST, Status.MALFORMED, Status.LATE):
        if re.search(rf"return \{{WQ_{status.name}\b", body(name)):
            assert f"{{{status.value}" in returns and status.name in returns, (
                f"{name}.lua returns {status.name} without documenting it"
            )


def test_the_lua_folder_holds_exactly_the_scripts_of_the_table() -> None:
    files = {p.name[:-4] for p in LUA.iterdir() if p.name.endswith(".lua")}

    assert files == {*NAMES, *FLOW_SCRIPTS, *PROCESS_SCRIPTS}


@pytest.mark.parametrize("name", FLOW_SCRIPTS)
def test_flow_scripts_take_keys_of_their_own_and_state_returns(name: str) -> None:
    text = header(name)
    pattern = r"^KEYS\[(\d+)\] +wheelq:(?:flow|order):\{topic:digest\}:\w+ +[A-Z]+\b"
    listed = re.findall(pattern, text, re.M)
    assert listed == [str(i) for i in range(1, len(listed) + 1)] and listed
    assert len(listed) == len(re.findall(r"^KEYS", text, re.M))
    assert re.search(r"^Returns: \{0\b", text, re.M)
    used = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", body(name))}
    assert used == set(range(1, len(listed) + 1))


@pytest.mark.parametrize("name", PROCESS_SCRIPTS)
def test_process_scripts_take_the_process_lists_keys_and_state_returns(name: str) -> None:
    text = header(name)
    listed = re.findall(r"^KEYS\[(\d+)\] +(wheelq:\{processes\}\S*) +([A-Z]+)\b", text, re.M)
    assert [(i, key, kind) for i, key, kind in listed] == [
        ("1", PROCESSES_KEY, "ZSET"),
        ("2", PROCESS_RECORDS_KEY, "HASH"),
    ]
    assert len(listed) == len(re.findall(r"^KEYS", text, re.M))
    numbers = [int(n) for n in re.findall(r"^ARGV\[(\d+)\] ", text, re.M)]
    assert numbers == list(range(1, len(numbers) + 1)) and numbers
    assert re.search(r"^Returns: \{0\b", text, re.M)
    assert {int(n) for n in re.findall(r"KEYS\[(\d+)\]", body(name))} == {1, 2}


# --- headers and keys -----------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_header_lists_the_keys_of_the_table_with_pattern_and_type(name: str) -> None:
    found = re.findall(r"^KEYS\[(\d+)\] +\{T:s\}:(\w+) +([A-Z]+)\b", header(name), re.M)
    key_lines = re.findall(r"^KEYS", header(name), re.M)

    assert len(found) == len(key_lines), f"{name}.lua: a KEYS line without pattern and type"
    assert [int(i) for i, _, _ in found] == list(range(1, len(found) + 1))
    assert tuple(attr for _, attr, _ in found) == SCRIPT_KEYS[name]
    assert [kind for _, _, kind in found] == [KEY_TYPES[attr] for _, attr, _ in found]


@pytest.mark.parametrize("name", NAMES)
def test_header_numbers_argv_from_one_and_states_returns(name: str) -> None:
    text = header(name)
    numbers = [int(n) for n in re.findall(r"^ARGV\[(\d+)(?:\.\.)?\] ", text, re.M)]

    assert numbers == list(range(1, len(numbers) + 1)), f"{name}.lua: ARGV lines {numbers}"
    assert numbers or re.search(r"^ARGV +none$", text, re.M), f"{name}.lua: no ARGV line"
    assert re.search(r"^Returns: \{0\b", text, re.M), f"{name}.lua: no Returns: {{0, ...}}"


@pytest.mark.parametrize("name", NAMES)
def test_scripts_use_no_key_beyond_their_header(name: str) -> None:
    used = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", body(name))}

    assert used <= set(range(1, len(SCRIPT_KEYS[name]) + 1))


def test_drop_shard_takes_every_key_of_the_shard() -> None:
    assert SCRIPT_KEYS["drop_shard"] == DATA_KEY_NAMES
    assert script_keys("drop_shard", KEYS) == KEYS.data_keys


# --- one slot per call (Redis Cluster) ------------------------------------------------------


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_every_key_and_channel_a_script_is_given_carry_the_shards_hash_tag(name: str) -> None:
    call = WRAPPERS[name]()
    named = [a for a in call.args if isinstance(a, str) and "{" in a]  # the wake channel

    assert call.keys, "a script without KEYS cannot be routed to its shard's node"
    assert all(key.startswith(KEYS.tag + ":") for key in call.keys)
    assert all(arg.startswith(KEYS.tag + ":") for arg in named)


@pytest.mark.parametrize("name", NAMES)
def test_scripts_make_no_key_name_of_their_own(name: str) -> None:
    # A name built inside a script could hash to another slot: every key comes through KEYS.
    code = re.sub(r"--[^\n]*", "", script(name).source)
    literals = re.findall(r"'[^'\n]*'" + r'|"[^"\n]*"', code)
    assert literals, "the pattern finds the script's string literals"
    assert not [text for text in literals if "{" in text or "}" in text]


def test_enqueue_parses_each_outcome_and_refuses_an_unknown_one() -> None:
    call = enqueue.enqueue(KEYS, [])
    assert call.parse([Status.OK, 0, 1, 2, 4, 5]) == list(Placed)
    with pytest.raises(ScriptError, match=r"^enqueue\.lua returned an unknown outcome"):
        call.parse([Status.OK, 0, NOT_PENDING])


def _write(
    job_id: str, kind: str = "delay", replace: bool = False, new: bool = False
) -> enqueue.JobWrite:
    due = DueSpec(kind, 1000)  # type: ignore[arg-type]
    return enqueue.JobWrite(job_id, due, replace, b"e-" + job_id.encode(), new=new)


@pytest.mark.parametrize(
    ("writes", "layout"),
    [
        ([_write("a"), _write("b")], "d0u"),
        ([_write("a", "at", True), _write("b", "at", True)], "a1u"),
        ([_write("a", new=True), _write("b", new=True)], "d0n"),
        ([_write("a", new=True), _write("b")], "d0u"),
    ],
)
def test_enqueue_of_jobs_sharing_mode_and_replace_sends_them_once(
    writes: list[enqueue.JobWrite], layout: str
) -> None:
    """The layout: their mode and replace, then 'n' (every id made by the client: none is
    read first), 'u' (no id repeats: each job's writes are gathered as it is met)."""
    call = enqueue.enqueue(KEYS, writes)
    assert list(call.args[4:]) == [layout, "a", 1000, b"e-a", "b", 1000, b"e-b"]
    assert enqueue.job_ids(call) == ["a", "b"]


def test_enqueue_of_a_repeated_id_vouches_for_nothing() -> None:
    call = enqueue.enqueue(KEYS, [_write("a"), _write("b"), _write("a")])
    assert call.args[4] == "d0"


A_FULL = ["a", "d", 1000, "0", b"e-a"]  # a job's arguments when each carries mode and replace


@pytest.mark.parametrize(
    ("second", "b_full"),
    [
        (_write("b", "at"), ["b", "a", 1000, "0", b"e-b"]),
        (_write("b", replace=True), ["b", "d", 1000, "1", b"e-b"]),
    ],
    ids=["mode", "replace"],
)
def test_enqueue_of_jobs_differing_in_mode_or_replace_sends_them_per_job(
    second: enqueue.JobWrite, b_full: list[Any]
) -> None:
    call = enqueue.enqueue(KEYS, [_write("a"), second])
    assert list(call.args[4:]) == ["", *A_FULL, *b_full]
    assert enqueue.job_ids(call) == ["a", "b"]


def test_a_replay_sends_each_job_its_mode_replace_and_token() -> None:
    writes = [_write("a")._replace(token="t:0"), _write("b")._replace(token="t:1")]
    call = enqueue.enqueue(KEYS, writes, record_ms=1000)
    b_full = ["b", "d", 1000, "0", b"e-b"]
    assert list(call.args[4:]) == ["", *A_FULL, "t:0", *b_full, "t:1"]
    assert enqueue.job_ids(call) == ["a", "b"]
