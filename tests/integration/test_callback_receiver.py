"""The callback receiver of docs/guides/callbacks.md ("Verify a callback": the
``# receiver.py`` block) against a request the deliverer really sent. The signature covers
the body only, so a captured request sent again with another ``Wheelq-Id`` still verifies:
the receiver the guide shows keys on the signed body's ``topic`` and ``id`` and takes it
for a repeat, while a body with another ``id`` fails verification."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from multidict import CIMultiDict

from tests.support.callback_server import Hit, Reply, ScriptedServer
from tests.support.docs import snippets
from wheelq.callbacks import verify
from wheelq.callbacks.deliverer import Deliverer
from wheelq.core.callback import Callback
from wheelq.core.job import Job
from wheelq.runtime.clock import wall_ms

SECRET = "receiver-test-secret"
KEY = ("invoices", "invoice-42")


def load_receiver(tmp_path: Path, page: str, section: str) -> ModuleType:
    """The ``receiver.py`` of `page`'s `section`, imported with the test's secret."""
    found = snippets(page, section)
    assert list(found.files) == ["receiver.py"] and not found.code and not found.commands
    path = tmp_path / "receiver.py"
    path.write_text(found.files["receiver.py"])
    spec = importlib.util.spec_from_file_location("guide_receiver", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.SECRET = SECRET
    return module


async def captured(receiver: ScriptedServer) -> Hit:
    """One signed request the deliverer sent, as the receiver got it."""
    receiver.scripts["/hook"] = lambda n: Reply(204)
    job = Job(
        id=KEY[1],
        topic=KEY[0],
        payload={"invoice": 42},
        due_ms=wall_ms(),
        attempt=1,
        max_attempts=5,
        callback=Callback(receiver.url("/hook")),
    )
    async with Deliverer(signing_secret=SECRET, allow_private=True) as deliverer:
        await deliverer(job)
    (hit,) = receiver.hits
    return hit


async def test_a_replay_with_another_wheelq_id_is_a_repeat_for_the_receiver(
    receiver: ScriptedServer, tmp_path: Path
) -> None:
    guide_receiver = load_receiver(tmp_path, "docs/guides/callbacks.md", "Verify a callback")
    hit = await captured(receiver)
    body = json.loads(hit.body)
    assert (body["topic"], body["id"], body["attempt"]) == (*KEY, 1)
    assert (hit.headers["Wheelq-Topic"], hit.headers["Wheelq-Id"]) == KEY
    headers = CIMultiDict(hit.headers)
    assert guide_receiver.receive(headers, hit.body) == 200
    assert guide_receiver.done == {KEY}

    replay = CIMultiDict(hit.headers)
    replay["Wheelq-Id"], replay["Wheelq-Attempt"] = "invoice-43", "2"
    assert verify(SECRET, replay["Wheelq-Signature"], hit.body, wall_ms()), (
        "the headers are not signed: only the body's key can be trusted"
    )
    assert guide_receiver.receive(replay, hit.body) == 200
    assert guide_receiver.done == {KEY}, "the replay was taken for a new job"


async def test_a_replay_with_another_id_in_the_body_fails_verification(
    receiver: ScriptedServer, tmp_path: Path
) -> None:
    guide_receiver = load_receiver(tmp_path, "docs/guides/callbacks.md", "Verify a callback")
    hit = await captured(receiver)
    forged = hit.body.replace(b'"invoice-42"', b'"invoice-43"')
    assert forged != hit.body
    assert guide_receiver.receive(CIMultiDict(hit.headers), forged) == 401
    assert guide_receiver.done == set()
    assert guide_receiver.receive(CIMultiDict(hit.headers), hit.body) == 200
    assert guide_receiver.done == {KEY}
