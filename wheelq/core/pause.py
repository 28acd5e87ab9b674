"""Paused topics and consumer groups: the stored form and what it means
(docs/architecture.md, "Pause and resume").

A topic paused as a whole pauses every consumer group on it, those created later too; a
group can also be paused on its own. Firing goes on either way: a paused group's jobs wait
in its stream until it is resumed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

SEP = "\x1f"
"""Between topic and group in a field of `wheelq.core.keys.PAUSED_KEY` (no topic or group
name can hold it)."""


def pause_field(topic: str, group: str | None) -> str:
    """The field of `PAUSED_KEY` that pauses `group` of `topic` (None: the whole topic)."""
    return topic if group is None else f"{topic}{SEP}{group}"


def pause_fields(topic: str, group: str) -> tuple[str, str]:
    """The two fields either of which pauses `group`: the topic's, then the group's own."""
    return topic, f"{topic}{SEP}{group}"


@dataclass(frozen=True, slots=True)
class PauseState:
    """What is paused of one topic: what `Admin.paused()`, `pause()` and `resume()` return."""

    topic: str
    since_ms: int | None = None
    """When the topic was paused as a whole (Redis clock ms); None: it is not."""
    groups: dict[str, int] = field(default_factory=dict)
    """Groups paused on their own -> when (Redis clock ms)."""

    @property
    def paused(self) -> bool:
        """Whether the topic is paused as a whole (every group, those created later too)."""
        return self.since_ms is not None

    def group_paused(self, group: str) -> bool:
        """Whether `group` takes no new jobs: the topic or the group itself is paused."""
        return self.since_ms is not None or group in self.groups

    def group_since_ms(self, group: str) -> int | None:
        """Since when `group` has been paused (the earlier pause of the two); None: it is not."""
        found = [ms for ms in (self.since_ms, self.groups.get(group)) if ms is not None]
        return min(found, default=None)


def parse_pauses(topic: str, raw: Mapping[str, int]) -> PauseState:
    """The `PauseState` of `topic` from the fields of `PAUSED_KEY` (other topics' ignored)."""
    prefix = topic + SEP
    return PauseState(
        topic,
        raw.get(topic),
        {name[len(prefix) :]: ms for name, ms in sorted(raw.items()) if name.startswith(prefix)},
    )


def fields_of(names: Iterable[str], topic: str, group: str | None = None) -> list[str]:
    """Of these fields of `PAUSED_KEY`, the ones of `topic` (with `group`: that group's own)."""
    if group is not None:
        mine = pause_field(topic, group)
        return [name for name in names if name == mine]
    return [name for name in names if name.partition(SEP)[0] == topic]
