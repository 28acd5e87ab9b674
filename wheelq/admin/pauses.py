"""Pause and resume a topic or one of its consumer groups (sans-I/O operations;
docs/architecture.md, "Pause and resume")."""

from __future__ import annotations

from wheelq.admin.groups import groups
from wheelq.core.keys import ShardKeys, validate_group, validate_topic
from wheelq.core.pause import PauseState, parse_pauses, pause_field
from wheelq.errors import InvalidArgumentError, UnknownGroupError, UnknownTopicError
from wheelq.producer.operations import Op, Producer
from wheelq.store import events, pauses, server


def paused(producer: Producer, topic: str) -> Op[PauseState]:
    """What is paused of `topic` (nothing, for a topic that does not exist)."""
    validate_topic(topic)
    return parse_pauses(topic, (yield from pauses.topic_pauses(topic)))


def pause(producer: Producer, topic: str, group: str | None) -> Op[PauseState]:
    """Pause `group` of `topic` (None: the whole topic, every group); returns what is paused.

    Pausing what is paused already keeps its start time.
    """
    yield from _check_exists(producer, topic, group)
    (now_ms,) = yield [server.server_time()]
    yield from pauses.write_then_announce(
        topic,
        [
            pauses.write_pause(pause_field(topic, group), int(now_ms)),
            events.note(ShardKeys(topic, 0), "paused", group or ""),
        ],
    )
    return (yield from paused(producer, topic))


def resume(producer: Producer, topic: str, group: str | None) -> Op[PauseState]:
    """Resume `group` of `topic` (None: the topic and every group paused on its own).

    Raises:
        UnknownTopicError: No such topic (as `pause`).
        InvalidArgumentError: `group` named while the topic is paused as a whole (on
            ``group``: resuming it alone cannot take effect).
    """
    validate_topic(topic)
    if group is not None:
        validate_group(group)
    raw = yield from pauses.topic_pauses(topic)
    state = parse_pauses(topic, raw)
    if group is None:
        names = list(raw)
        if not names:  # nothing to do, but an unknown topic is still an error
            yield from _check_exists(producer, topic, None)
    elif state.paused:
        raise InvalidArgumentError(
            "group",
            f"topic {topic!r} is paused as a whole, so every group is: resume the topic "
            "(no group), then pause the groups that should stay paused",
        )
    elif group in state.groups:
        names = [pause_field(topic, group)]
    else:  # not paused: nothing to do, but an unknown group is still an error
        yield from _check_exists(producer, topic, group)
        return state
    if names:
        yield from pauses.write_then_announce(
            topic,
            [
                pauses.clear_pauses(names),
                events.note(ShardKeys(topic, 0), "resumed", group or ""),
            ],
        )
    return (yield from paused(producer, topic))


def _check_exists(producer: Producer, topic: str, group: str | None) -> Op[None]:
    """Raise `UnknownTopicError` or `UnknownGroupError` (any stream's group counts)."""
    validate_topic(topic)
    if group is not None:
        validate_group(group)
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    if group is not None:
        listed = (yield from groups(producer, topic)) or []
        if group not in {g.name for g in listed}:
            raise UnknownGroupError(topic, group)
