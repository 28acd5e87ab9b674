"""producer.items: `validate_batch` takes a plain item (no field set after ``at``) by a short
path; its write must be the one `validate_item` makes, and an item that only looks plain (a
replace or ordered of 0, which equals False) must still be refused."""

from __future__ import annotations

from typing import Any

import pytest

from wheelq.core.settings import ClientSettings
from wheelq.errors import InvalidArgumentError
from wheelq.producer.items import EncodeBatch, EnqueueItem, validate_batch, validate_item

NOW_MS = 1_700_000_000_000
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize("traceparent", [None, TRACE], ids=["untraced", "traced"])
@pytest.mark.parametrize(
    "item",
    [
        EnqueueItem(payload={"to": "ada"}, delay=30),
        EnqueueItem(payload=b"raw", at=1_800_000_000),
        EnqueueItem(payload=[1], delay=0.5),
    ],
)
def test_a_plain_item_is_written_as_validate_item_writes_it(
    item: EnqueueItem, traceparent: str | None
) -> None:
    settings = ClientSettings(default_max_attempts=7)
    (short,) = validate_batch(settings, [item], traceparent, NOW_MS)
    full = validate_item(settings, item, EncodeBatch(NOW_MS, traceparent))
    assert short._replace(id="") == full._replace(id="")
    assert short.id[:10] == full.id[:10]  # both made at the call's time


@pytest.mark.parametrize(
    ("fields", "parameter"), [({"replace": 0}, "replace"), ({"ordered": 0}, "ordered")]
)
def test_an_item_that_only_equals_a_plain_one_is_still_refused(
    fields: dict[str, Any], parameter: str
) -> None:
    item = EnqueueItem(payload=1, delay=1, **fields)
    assert item[3:] == (None, None, False, None, None, None, False)  # 0 == False
    with pytest.raises(InvalidArgumentError) as info:
        validate_batch(ClientSettings(), [EnqueueItem(payload=1, delay=1), item], None, NOW_MS)
    assert info.value.parameter == parameter
    assert str(info.value).startswith("items[1]: ")
