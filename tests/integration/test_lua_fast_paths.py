"""The Lua fast paths (docs/architecture.md, "Fast paths") against the plain code they stand
for: the script as it is and the script with the fast piece swapped for the plain one
(`plain`, as `loadtest/fast_paths.py` measures them) give the same answers and write the
same data, over a table of inputs."""

from __future__ import annotations

import os
import re
import time
from typing import Any

import msgpack
import pytest
import redis

from tests.support.scripts import Runner
from wheelq.core.far_tier import id_bytes
from wheelq.core.ids import make_job_id
from wheelq.core.job import Envelope
from wheelq.core.keys import ShardKeys
from wheelq.store import fire, leases
from wheelq.store.scripts import compose, script, script_keys

pytestmark = pytest.mark.both_servers  # the Lua scripts, called directly

TOKEN = "node-a:1"

UNROLLED = (
    "  local a, m, t = env[3], env[4], env[5]\n  if ",
    "  local a, m, t = nil\n  if false and ",
)
"""`wq_envelope`'s unrolled checks, skipped: every envelope judged by the loops."""
FMT = ("    return string.format('%d', n)\n", "    return string.format('%.0f', n)\n")
"""`wq_fmt` without its integer formatting."""
FIRED_INLINE = (
    "if (env[6] == nil or env[6] == '') and (env[7] == nil or env[7] == '') then\n"
    "            n_rec = n_rec + 2",
    "if false then\n            n_rec = n_rec + 2",
)
"""`emit_due`'s usual history record, written by `wq_fired` itself."""


def plain(source: str, piece: tuple[str, str]) -> str:
    """`source` with the fast `piece[0]` (at its last place) replaced by the plain
    `piece[1]`."""
    head, found, tail = source.rpartition(piece[0])
    assert found, f"the script no longer holds {piece[0]!r}"
    return head + piece[1] + tail


def helper(includes: str, body: str) -> str:
    """A script of `body` with what it calls of `includes` (as a script's "Includes:" line)."""
    return compose("helper.lua", f"--[[ helper.lua — a test's\nIncludes: {includes}\n]]\n{body}")


def both(r: redis.Redis, source: str, piece: tuple[str, str], key: str, *args: Any) -> list[Any]:
    """The replies of `source` as it is and made plain, called with `args`."""
    return [r.eval(s, 1, key, *args) for s in (source, plain(source, piece))]


# --- wq_envelope: the usual envelope accepted without a call per field ----------------------

JUDGE = helper(
    "envelope",
    """
local env, why = wq_envelope(ARGV[1])
if not env then
  return {0, why}
end
local out = {1}
for i = 1, 12 do
  out[i + 1] = type(env[i]) .. ' ' .. tostring(env[i])
end
return out
""",
)

MAX = 2147483647
OPTIONAL = ["", "g", 7, 1.5, None, True, [1], {"a": 1}]
ENVELOPES = [
    [1, "p", 1, 5, 1_700_000_000_000],
    [1, "p", 0, 0, 0],
    [1, "p", MAX, MAX, 2**53],
    [1, "p", MAX + 1, 5, 0],
    [1, "p", 1, MAX + 1, 0],
    [1, "p", -1, 5, 0],
    [1, "p", 1, -5, 0],
    [1, "p", 1, 5, -1],
    [1, "p", 1.5, 5, 0],
    [1, "p", 1.0, 5.0, 7.0],
    [1, "p", 1, 5, 0.5],
    [1, "p", "1", 5, 0],
    [1, "p", 1, None, 0],
    [1, "p", 1, 5],
    [1, "p", True, 5, 0],
    [1, "p", 1, 5, 0, "g", "id", "00-trace", b"cb", "key", "1"],
    [1, "p", 1, 5, 0, "", "", "", "", "", "", 99],
    *([1, "p", 1, 5, 0, *[""] * i, v] for i in range(6) for v in OPTIONAL),
    *([1, "p", 1, 5, 0, None, *[""] * i, v] for i in range(5) for v in OPTIONAL),
    [2, "p", 1, 5, 0],
    [1, 5, 1, 5, 0],
]


@pytest.mark.parametrize("fields", ENVELOPES, ids=lambda f: repr(f)[:60])
def test_the_unrolled_envelope_checks_judge_as_the_loops(
    redis_sync: redis.Redis, keys: ShardKeys, fields: list[Any]
) -> None:
    envelope = msgpack.packb(fields, use_bin_type=False)
    fast, slow = both(redis_sync, JUDGE, UNROLLED, keys.ready, envelope)
    assert fast == slow


# --- wq_fmt: a whole number through the C library's integer formatting ----------------------

FORMAT = helper("base", "return {wq_fmt(tonumber(ARGV[1]))}")
NUMBERS = [
    "0", "1", "-1", "7", "1700000000000", "-1700000000000", "9007199254740991",
    "-9007199254740991", "9007199254740992", "9007199254740993", "1e20", "-1e20", "0.5",
    "1.5", "2.5", "-2.5", "1700000000000.4", "1700000000000.6", "123456.5", "1e-9",
]  # fmt: skip


@pytest.mark.parametrize("number", NUMBERS)
def test_whole_numbers_are_formatted_as_the_float_format_writes_them(
    redis_sync: redis.Redis, keys: ShardKeys, number: str
) -> None:
    fast, slow = both(redis_sync, FORMAT, FMT, keys.ready, number)
    assert fast == slow


def test_negative_zero_is_the_one_number_the_fast_format_spells_otherwise(
    redis_sync: redis.Redis, keys: ShardKeys
) -> None:
    # '%d' writes 0 where '%.0f' writes -0: both read back as 0 (a due or enqueued time
    # of -0 only comes from a hand-written float)
    assert both(redis_sync, FORMAT, FMT, keys.ready, "-0") == [[b"0"], [b"-0"]]


# --- emit_due: the usual history record written inline --------------------------------------

EMITTED = {
    "plain": Envelope(b"p", 1, 5, 1),
    "traced": Envelope(b"p", 1, 5, 1, traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01"),
    "retry-of-g": Envelope(b"p", 2, 5, 1, group="g"),
    "alias\x1f2": Envelope(b"p", 2, 5, 1, job_id="real"),
    "alias-of-g\x1f2": Envelope(b"p", 3, 5, 1, group="g", job_id="real-g"),
    "keyed": Envelope(b"p", 1, 5, 1, key="k"),
}


def emitted(r: redis.Redis, run: Runner, keys: ShardKeys, source: str, now: int) -> dict[str, Any]:
    """`EMITTED` seeded on `keys`'s shard, due a second before `now`, and emitted by
    `source`: the history and the stream, each entry id written as its place in the stream."""
    assert run(leases.lease_acquire(keys, TOKEN, 30_000)).held
    for member, envelope in EMITTED.items():
        r.hset(keys.jobs, member, envelope.pack())
        r.zadd(keys.delayed, {member: now - 1000})
    call = fire.emit_due(keys, TOKEN, now, list(EMITTED))
    names = script_keys("emit_due", keys)
    reply = r.eval(source, len(names), *names, *call.args)
    entries = r.xrange(keys.ready)
    place = {entry_id: b"E%d" % n for n, (entry_id, _) in enumerate(entries)}
    pattern = re.compile(b"|".join(re.escape(e) for e in place))

    def placed(value: bytes) -> bytes:
        return pattern.sub(lambda m: place[m.group(0)], value)

    return {
        "reply": call.parse(reply),
        "history": {k: placed(v) for k, v in r.hgetall(keys.history).items()},
        "stream": [fields for _, fields in entries],
    }


def test_the_inline_history_record_is_the_one_wq_fired_writes(
    redis_sync: redis.Redis, run: Runner, topic: str
) -> None:
    source = script("emit_due").source
    sec, usec = redis_sync.time()
    now = int(sec) * 1000 + int(usec) // 1000
    fast = emitted(redis_sync, run, ShardKeys(topic, 1), source, now)
    slow = emitted(redis_sync, run, ShardKeys(topic, 2), plain(source, FIRED_INLINE), now)
    assert fast["reply"].emitted == len(EMITTED)
    assert fast == slow


# --- wq_id_codec's bytes: a generated id read 8 characters at a time by tonumber(s, 32) ------

ID_BYTES = helper(
    "ids",
    """local bytes, text = wq_id_codec()
local out = {}
for i, id in ipairs(ARGV) do
  local raw = bytes(id)
  out[2 * i - 1], out[2 * i] = raw or false, raw and text(raw) or false
end
return out""",
)

IDS = [
    "00000000000000000000000000",
    "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
    "0123456789ABCDEFGHJKMNPQRS",
    "3TVWXYZ0123456789ABCDEFGHJ",
    "01M8KN0KHCZJMS2RTGG6JPFKC6",
    "70000000000000000000000001",
    "7ZZZZZZZZZZZZZZZZZZZZZZZZY",
    # not generated: kept as their bytes by the far tier and the key index
    "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",  # past 128 bits
    "01M8KN0KHCZJMS2RTGG6JPFKCI",  # I, L, O, U are no Crockford digits
    "01M8KN0KHCZJMS2RTGG6JPFKCL",
    "01M8KN0KHCZJMS2RTGG6JPFKCO",
    "01M8KN0KHCZJMS2RTGG6JPFKCU",
    "01m8kn0khczjms2rtgg6jpfkc6",  # lower case
    "01M8KN0KHCZJMS2RTGG6JPFKC",  # 25 characters
    "01M8KN0KHCZJMS2RTGG6JPFKC66",  # 27
    "01M8KN0KHCZJMS2RTGG6JPFK-6",
    "01M8KN0KHCZJMS2RTGG6JPF KC",
    "",
    "order-1",
]


def test_the_id_codec_reads_what_the_python_arithmetic_reads(redis_sync: redis.Redis) -> None:
    """`bytes` gives a generated id's 128 bits as `wheelq.core.far_tier.id_bytes` counts them
    a character at a time, and `text` the id back; any other id is no generated one."""
    now = int(time.time() * 1000)
    ids = IDS + [make_job_id(now + i, os.urandom(10)) for i in range(500)]
    got = redis_sync.eval(ID_BYTES, 0, *ids)
    for i, job_id in enumerate(ids):
        want = id_bytes(job_id)
        raw, back = got[2 * i], got[2 * i + 1]
        if want[0] == 0 and len(want) == 17:
            assert (raw, back) == (want[1:], job_id.encode()), job_id
        else:
            assert (raw, back) == (None, None), job_id
