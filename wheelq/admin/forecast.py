"""The forecast, the producer's read: a topic's jobs coming due in the next windows, on the
Redis clock, and its ready work (docs/architecture.md, "The forecast")."""

from __future__ import annotations

from wheelq.core import keys as k
from wheelq.core.forecast import Forecast, forecast_of, within_seconds
from wheelq.errors import UnknownTopicError
from wheelq.producer.operations import Op, Producer
from wheelq.store import server
from wheelq.store.observe import observe_shards


def forecast(producer: Producer, topic: str, within: object) -> Op[Forecast]:
    """Read `topic`'s forecast: the server's TIME, then what `stats` reads of each shard and
    a ZCOUNT per window (no lateness sample), all shards in one round trip.

    Raises:
        InvalidArgumentError: `within` is not 1-10 windows of [1, 86,400] whole seconds.
        UnknownTopicError: No such topic.
    """
    windows = within_seconds(within)  # bad arguments first: nothing is read
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    (now,) = yield [server.server_time()]
    now_ms = int(now)
    found = yield from observe_shards(
        k.all_shards(topic, shards), now_ms, 0, probe=True, within_ms=[w * 1000 for w in windows]
    )
    return forecast_of(topic, now_ms, found)
