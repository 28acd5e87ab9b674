"""The enqueue's fast path (`wheelq.web.api_jobs.fast_enqueue`, taken by a JSON body with a
Content-Length) and the FastAPI route (taken by a chunked body) agree: the same request
bodies, valid or not, give the same status, the same answer and the same writes.

Each example sends its body both ways, to two fresh topics of a live `wheelq serve`;
answers are compared with the topic, generated ids and due times (a few ms apart) set
aside, a problem by its status, type and fields (the fast path validates the JSON text,
FastAPI the decoded value: pydantic words some messages apart), writes as each topic's
keys (their type and size) and each job's state.
"""

from __future__ import annotations

import copy
import http.client
import itertools
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.cli import start_wheelq, stop
from tests.support.http import get_status
from tests.support.servers import free_port
from tests.support.waiting import eventually_sync

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
VALID = {
    "delay_ms": st.integers(0, 10**9),
    "at": st.integers(978_307_200_000, 1_800_000_000_000)
    | st.sampled_from(["2030-01-01T00:00:00Z", "2020-01-01T01:00:00+01:00"]),
    "id": st.text("abc-", min_size=1, max_size=3),
    "max_attempts": st.integers(1, 100),
    "replace": st.booleans(),
    "key": st.text("kl", min_size=1, max_size=2),
    "ordered": st.booleans(),
    "callback": st.fixed_dictionaries(
        {"url": st.just("https://8.8.8.8/hook")}, optional={"timeout_ms": st.integers(1000, 9000)}
    ),
}
"""Fields as a client sends them: most jobs are valid, so their writes are compared."""
INVALID = {
    "payload": st.just(float("inf")) | st.just(2**70),
    "delay_ms": st.integers(-5, -1) | st.floats(0.1, 0.9) | st.text(max_size=2) | st.just(10**13),
    "at": st.integers(0, 10**9) | st.sampled_from(["2030-01-01", "x", "2999-01-01T00:00:00Z"]),
    "id": st.sampled_from(["", "a\x00b", "x" * 257]),
    "max_attempts": st.integers(-1, 0) | st.floats(0.5, 3.5) | st.just(10**6),
    "replace": st.integers(0, 1) | st.none(),
    "callback": st.fixed_dictionaries(
        {"url": st.sampled_from(["http://127.0.0.1/hook", "ftp://x", ""])},
        optional={"timeout_ms": st.integers(-1, 10**7)},
    ),
    "extra": st.integers(),
}
"""One value a field refuses (or an unknown field), put into an otherwise valid job."""
JOB = st.fixed_dictionaries({"payload": JSON}, optional=VALID) | st.tuples(
    st.fixed_dictionaries({"payload": JSON}, optional=VALID),
    st.sampled_from(sorted(INVALID)).flatmap(lambda k: st.tuples(st.just(k), INVALID[k])),
).map(lambda j: {**j[0], j[1][0]: j[1][1]})
BODY = st.one_of(
    JOB.map(lambda job: ("", json.dumps(job).encode())),
    st.lists(JOB, max_size=4).map(lambda jobs: ("/batch", json.dumps({"jobs": jobs}).encode())),
    st.tuples(st.sampled_from(["", "/batch"]), JSON.map(json.dumps).map(str.encode) | st.just(b"")),
)
"""JSON bodies only: a body that is not JSON meets each path's own decoder (FastAPI answers
400 where it cannot decode the bytes, the fast path 422, worded differently)."""
COUNT = itertools.count()
TIMES = ("due_ms", "enqueued_ms", "fired_ms", "entry_id")


@pytest.mark.timeout(300)
def test_the_fast_path_and_the_route_answer_and_write_alike(redis_url: str) -> None:
    port = free_port()
    proc = start_wheelq("serve", "--redis-url", redis_url, "--port", str(port), "--deliver", "none")
    store = redis.Redis.from_url(redis_url)
    try:
        eventually_sync(
            lambda: get_status(f"http://127.0.0.1:{port}/healthz") == 200,
            timeout_s=30,
            what="serve",
        )

        @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(BODY)
        def same(sent: tuple[str, bytes]) -> None:
            suffix, body = sent
            n = next(COUNT)
            fast, route = f"eqfast{n}z", f"eqslow{n}z"
            got_fast = _post(port, fast, suffix, body, chunked=False)
            got_route = _post(port, route, suffix, body, chunked=True)
            assert _seen(got_fast, fast, body) == _seen(got_route, route, body)
            assert _writes(store, port, fast, got_fast) == _writes(store, port, route, got_route)

        same()
    finally:
        store.close()
        stop(proc)


def _post(port: int, topic: str, suffix: str, body: bytes, *, chunked: bool) -> Any:
    """(status, answer, Location) of a POST of `body`, chunked (the route) or not."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        sent: bytes | Iterator[bytes] = iter([body]) if chunked else body
        conn.request(
            "POST",
            f"/v1/topics/{topic}/jobs{suffix}",
            sent,
            {"Content-Type": "application/json"},
            encode_chunked=chunked,
        )
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null"), r.getheader("Location")
    finally:
        conn.close()


def _seen(got: Any, topic: str, body: bytes) -> Any:
    """The answer with `topic`, generated ids and due times set aside."""
    status, answer, location = copy.deepcopy(got)
    if status >= 400:  # a problem: its kind and fields (pydantic words JSON and Python input apart)
        fields = [e.get("field") for e in answer.get("errors", [])]
        return status, answer.get("type"), answer.get("field"), fields
    sent = json.loads(body or b"null")
    jobs = sent.get("jobs") if isinstance(sent, dict) else None
    given_ids = [j.get("id") if isinstance(j, dict) else None for j in jobs or [sent]]
    results = answer.get("results", [answer]) if isinstance(answer, dict) else []
    for result, job_id in zip(results, given_ids, strict=False):
        if isinstance(result, dict) and "id" in result and job_id is None:
            if location is not None:
                location = location.replace(result["id"], "<id>")
            result["id"] = "<id>"
        if isinstance(result, dict) and "due_ms" in result:
            result["due_ms"] = "<due>"
    text = json.dumps(answer, sort_keys=True).replace(topic, "<topic>")
    return status, text, None if location is None else location.replace(topic, "<topic>")


def _writes(store: redis.Redis, port: int, topic: str, got: Any) -> Any:
    """`topic`'s keys as {(name, type): size}, and each enqueued job's state."""
    keys: dict[tuple[str, str], int] = {}
    size = {"zset": store.zcard, "hash": store.hlen, "stream": store.xlen, "set": store.scard}
    for key in store.scan_iter(match=f"*{topic}*", count=1000):
        kind = store.type(key).decode()
        # Summed over shards: a generated id's shard is random.
        name = re.sub(r"\{[^}]*\}", "{<topic>:shard}", key.decode())
        keys[name, kind] = keys.get((name, kind), 0) + size.get(kind, store.exists)(key)
    status, answer, _ = got
    results = answer.get("results", [answer]) if isinstance(answer, dict) else []
    jobs = []
    for result in results:
        if isinstance(result, dict) and result.get("status", status) == 201:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", f"/v1/topics/{topic}/jobs/{quote(result['id'], safe='')}")
            info = json.loads(conn.getresponse().read())
            conn.close()
            jobs.append({k: v for k, v in info.items() if k not in (*TIMES, "id", "topic")})
    return keys, jobs
