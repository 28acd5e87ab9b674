# ruff: noqa: RUF001 - the Unicode spellings are the point
"""SSRF: no spelling of a private address gets a callback request to it, with
``allow_private`` off (the default). A real receiver listens on 127.0.0.1; each URL below
is sent to `wheelq serve` (POST /v1/topics/{t}/jobs) and through the library, and a
deliverer runs on the topic. Every one must be refused up front (422 naming
``callback.url``; InvalidArgumentError in the library) or, past acceptance (a name that
resolves to loopback, a private literal the library cannot judge), dead-lettered by the
deliverer with the reason. The receiver must see no request at all.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
import redis.asyncio

from tests.integration.test_callbacks import RETRY_FAST, settled
from tests.support.callback_server import Reply, ScriptedServer
from tests.support.web import serving
from wheelq import AsyncAdmin, AsyncClient, InvalidArgumentError, JobState, Worker
from wheelq.callbacks.deliverer import Deliverer
from wheelq.callbacks.delivery import delivery_worker
from wheelq.callbacks.resolver import PrivateTargetError, PublicOnlyResolver
from wheelq.core.settings import CallbackSettings, WorkerSettings

REFUSED, DEAD = "refused", "dead"
"""A URL's fate over HTTP: 422 up front, or 201 and dead-lettered by the deliverer."""

SPELLINGS: list[tuple[str, str]] = [
    # ASCII loopback, private, shared and link-local ranges
    ("http://127.0.0.1:{port}/h", REFUSED),
    ("http://127.9.9.9:{port}/h", REFUSED),
    ("http://10.0.0.1:{port}/h", REFUSED),
    ("http://172.16.0.1:{port}/h", REFUSED),
    ("http://192.168.0.1:{port}/h", REFUSED),
    ("http://100.64.0.1:{port}/h", REFUSED),
    ("http://0.0.0.0:{port}/h", REFUSED),
    ("http://169.254.169.254:{port}/latest/meta-data/", REFUSED),
    ("http://169.254.169.254/latest/meta-data/", REFUSED),
    # decimal, octal, hex and short forms (never canonical: undeliverable)
    ("http://2130706433:{port}/h", REFUSED),
    ("http://017700000001:{port}/h", REFUSED),
    ("http://0177.0.0.1:{port}/h", REFUSED),
    ("http://0x7f.0.0.1:{port}/h", REFUSED),
    ("http://0x7f000001:{port}/h", REFUSED),
    ("http://0X7F.1:{port}/h", REFUSED),
    ("http://127.1:{port}/h", REFUSED),
    ("http://127.0.1:{port}/h", REFUSED),
    ("http://0:{port}/h", REFUSED),
    ("http://127.000.000.001:{port}/h", REFUSED),
    ("http://127.0.0.1.:{port}/h", REFUSED),
    ("http://2852039166/latest/meta-data/", REFUSED),
    ("http://0xa9fea9fe/latest/meta-data/", REFUSED),
    ("http://0251.0376.0251.0376/latest/meta-data/", REFUSED),
    # percent-encoding in the host
    ("http://%31%32%37.0.0.1:{port}/h", REFUSED),
    ("http://127.0.0.%31:{port}/h", REFUSED),
    ("http://%6c%6f%63%61%6c%68%6f%73%74:{port}/h", REFUSED),
    # IPv6: loopback, unspecified, IPv4-mapped, -compatible, NAT64, 6to4, link-local, ULA
    ("http://[::1]:{port}/h", REFUSED),
    ("http://[0:0:0:0:0:0:0:1]:{port}/h", REFUSED),
    ("http://[::]:{port}/h", REFUSED),
    ("http://[::ffff:127.0.0.1]:{port}/h", REFUSED),
    ("http://[::ffff:7f00:1]:{port}/h", REFUSED),
    ("http://[::127.0.0.1]:{port}/h", REFUSED),
    ("http://[64:ff9b::7f00:1]:{port}/h", REFUSED),
    ("http://[64:ff9b::a9fe:a9fe]/latest/meta-data/", REFUSED),
    ("http://[2002:7f00:1::]:{port}/h", REFUSED),
    ("http://[::ffff:a9fe:a9fe]/latest/meta-data/", REFUSED),
    ("http://[fe80::1]:{port}/h", REFUSED),
    ("http://[fe80::1%25lo]:{port}/h", REFUSED),
    ("http://[fd00::1]:{port}/h", REFUSED),
    ("http://[fec0::1]:{port}/h", REFUSED),
    # Unicode digits and dots (IDNA/UTS46 maps them to the ASCII address)
    ("http://１２７.０.０.１:{port}/h", REFUSED),
    ("http://127。0。0。1:{port}/h", REFUSED),
    ("http://127．0．0．1:{port}/h", REFUSED),
    ("http://127｡0｡0｡1:{port}/h", REFUSED),
    ("http://𝟏𝟐𝟕.𝟎.𝟎.𝟏:{port}/h", REFUSED),
    ("http://①②⑦.⓪.⓪.①:{port}/h", REFUSED),
    ("http://127.0.0.⒈:{port}/h", REFUSED),
    ("http://１６９.２５４.１６９.２５４/latest/meta-data/", REFUSED),
    ("http://０ｘ７ｆ.0.0.1:{port}/h", REFUSED),
    ("http://２１３０７０６４３３:{port}/h", REFUSED),
    # names
    ("http://localhost:{port}/h", REFUSED),
    ("http://LOCALHOST.:{port}/h", REFUSED),
    ("http://x.localhost:{port}/h", REFUSED),
    ("http://ｌｏｃａｌｈｏｓｔ:{port}/h", REFUSED),
    ("http://LocalHost。:{port}/h", REFUSED),
]


def loopback_names() -> list[str]:
    """This machine's names (not ``localhost``, refused by name) that /etc/hosts, through
    the real resolver, maps to loopback only."""
    names = []
    for name in {socket.gethostname(), socket.getfqdn()} - {"localhost"}:
        try:
            found = {a[4][0] for a in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
        except OSError:
            continue
        if found and all(a.startswith("127.") or a == "::1" for a in found):
            names.append(name)
    return sorted(names)


@pytest.fixture
async def deliverer(
    redis_async: redis.asyncio.Redis, topic: str, client: AsyncClient
) -> AsyncIterator[Deliverer]:
    """The topic's deliverer, `allow_private` off, with one attempt a job."""
    deliverer = Deliverer(CallbackSettings())
    worker: Worker = delivery_worker(redis_async, topic, deliverer, WorkerSettings(**RETRY_FAST))
    await worker.start()
    try:
        yield deliverer
    finally:
        await worker.stop()
        await deliverer.aclose()


async def test_no_spelling_of_a_private_address_reaches_a_loopback_receiver(
    redis_url: str,
    client: AsyncClient,
    admin: AsyncAdmin,
    deliverer: Deliverer,
    receiver: ScriptedServer,
    topic: str,
) -> None:
    receiver.scripts["/h"] = lambda n: Reply(200)
    receiver.scripts["/latest/meta-data/"] = lambda n: Reply(200)
    table = [(url.format(port=receiver.port), fate) for url, fate in SPELLINGS]
    names = loopback_names()
    table += [(f"http://{name}:{receiver.port}/h", DEAD) for name in names]
    assert len(table) >= 40 + len(names)

    wrong: list[str] = []
    accepted: dict[str, str] = {}  # job id -> URL, to be dead-lettered
    async with serving(redis_url) as api:  # allow_private off
        for i, (url, fate) in enumerate(table):
            body = {"id": f"http-{i}", "payload": i, "callback": {"url": url}, "max_attempts": 1}
            status, answer, _ = await api.call("POST", f"/v1/topics/{topic}/jobs", body)
            if fate == REFUSED:
                if status != 422 or answer.get("field") != "callback.url":
                    wrong.append(f"{url}: HTTP {status} {answer}, want 422 naming callback.url")
            elif status != 201:
                wrong.append(f"{url}: HTTP {status} {answer}, want 201")
            else:
                accepted[answer["id"]] = url
    # Through the library, which cannot know allow_private: an undeliverable spelling is
    # refused there, any other reaches the deliverer, which must refuse it itself.
    for i, (url, _) in enumerate(table):
        try:
            job_id = await client.enqueue(topic, i, job_id=f"lib-{i}", callback=url, max_attempts=1)
        except InvalidArgumentError as exc:
            if exc.parameter != "callback.url":
                wrong.append(f"{url}: the library's error names {exc.parameter}")
        else:
            accepted[job_id] = url

    infos = await settled(client, topic, list(accepted))
    letters = {d.job_id: d.error for d in await admin.dead_letters(topic, limit=1000)}
    for job_id, url in accepted.items():
        state = infos[job_id].groups[0].state
        if state is not JobState.DEAD:
            wrong.append(f"{url} ({job_id}): {state.value}, want dead")
        elif "private address" not in letters.get(job_id, ""):
            wrong.append(f"{url} ({job_id}): dead letter says {letters.get(job_id)!r}")
    reached = sorted({f"{h.path} from {h.headers.get('Host')}" for h in receiver.hits})
    assert not reached, f"requests reached the loopback receiver: {reached}"
    assert not wrong, "\n".join(wrong)
    assert deliverer.counts.delivered == 0


async def test_a_redirect_to_loopback_is_not_followed(
    redis_async: redis.asyncio.Redis,
    client: AsyncClient,
    admin: AsyncAdmin,
    receiver: ScriptedServer,
    topic: str,
) -> None:
    """The redirecting endpoint stands for an allowed (public) one: the deliverer here
    allows private targets so it can reach it, and the target it redirects to (the
    loopback receiver) must still see nothing."""
    redirector = ScriptedServer()
    await redirector.start()
    receiver.scripts["/h"] = lambda n: Reply(200)
    targets = [receiver.url("/h"), receiver.url("/h", host="localhost")]
    for i, target in enumerate(targets):
        redirector.scripts[f"/r{i}"] = lambda n, t=target: Reply(307, headers={"Location": t})
    deliverer = Deliverer(CallbackSettings(), allow_private=True)
    worker = delivery_worker(redis_async, topic, deliverer, WorkerSettings(**RETRY_FAST))
    await worker.start()
    try:
        ids = [
            await client.enqueue(topic, i, callback=redirector.url(f"/r{i}"), max_attempts=3)
            for i in range(len(targets))
        ]
        infos = await settled(client, topic, ids)
    finally:
        await worker.stop()
        await deliverer.aclose()
        await redirector.stop()
    assert receiver.hits == [], "a redirect was followed"
    assert sorted(h.path for h in redirector.hits) == ["/r0", "/r1"]
    letters = {d.job_id: d.error for d in await admin.dead_letters(topic)}
    for job_id in ids:
        assert infos[job_id].groups[0].state is JobState.DEAD
        assert "HTTP 307" in letters[job_id] and "not retried" in letters[job_id]


async def test_the_deliverers_connections_refuse_every_private_address_themselves(
    receiver: ScriptedServer,
) -> None:
    """Beneath the check before the request: the deliverer's connector refuses a private
    address as the socket connects, IP literals included (aiohttp never resolves those,
    so the resolver alone does not see them)."""
    receiver.scripts["/h"] = lambda n: Reply(200)
    port = receiver.port
    urls = [
        receiver.url("/h"),
        f"http://[::ffff:127.0.0.1]:{port}/h",
        f"http://0.0.0.0:{port}/h",
        receiver.url("/h", host="localhost"),
        *(receiver.url("/h", host=name) for name in loopback_names()),
    ]
    async with Deliverer(CallbackSettings()) as deliverer:
        for url in urls:
            with pytest.raises(aiohttp.ClientConnectorError) as raised:
                await deliverer._client().post(url, data=b"{}")
            assert isinstance(raised.value.os_error, PrivateTargetError), url
            assert "private address" in str(raised.value.os_error)
    assert receiver.hits == []


@pytest.mark.parametrize("name", ["localhost", "LOCALHOST", *loopback_names()])
async def test_the_resolver_refuses_a_name_that_resolves_to_loopback(name: str) -> None:
    """Through the real resolver (/etc/hosts), not the name check before it."""
    resolver = PublicOnlyResolver()
    try:
        with pytest.raises(PrivateTargetError, match="private"):
            await resolver.resolve(name, 80, socket.AF_UNSPEC)
    finally:
        await resolver.close()
