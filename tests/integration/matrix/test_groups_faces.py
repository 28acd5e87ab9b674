"""Consumer groups, every face: a group created through each face that creates one (library
sync and async, CLI, HTTP) is listed through it and served to an HTTP pull consumer; one
deleted through each face that deletes (those and the console's confirmed form) is gone.
"""

from __future__ import annotations

import pytest

from tests.support.faces import Face, having
from tests.support.waiting import eventually
from tests.support.web import Served
from wheelq import AsyncAdmin, AsyncClient

pytestmark = pytest.mark.cluster_too

SHARDS = 2


@pytest.mark.parametrize("face", having("group_names"), indirect=True)
async def test_a_group_is_created_listed_pulled_from_and_deleted_through_every_face(
    face: Face, client: AsyncClient, admin: AsyncAdmin, served: Served, topic: str
) -> None:
    creates = face if face.name in having("create_group") else None
    deletes = face if face.name in having("delete_group") else None
    await (creates.create_group(topic, "g") if creates else admin.create_group(topic, "g"))
    assert await face.group_names(topic) == {"g"}
    job_id = await client.enqueue(topic, 1)
    group = f"/v1/topics/{topic}/groups/g"
    pulled: list[dict[str, str]] = []

    async def pulled_it() -> bool:
        _, body, _ = await served.call("POST", f"{group}/pull", {"max": 10, "wait_ms": 100})
        pulled.extend(body["jobs"])
        return [j["id"] for j in pulled] == [job_id]

    await eventually(pulled_it, timeout_s=10, what="the job pulled from the new group")
    _, acked, _ = await served.call("POST", f"{group}/ack", {"receipts": [pulled[0]["receipt"]]})
    assert acked["acked"] == 1
    await (deletes.delete_group(topic, "g") if deletes else admin.delete_group(topic, "g"))
    assert await face.group_names(topic) == set()
