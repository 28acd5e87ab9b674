"""A job's options, defined once: `OPTIONS` (a row an option: its check, how it is stored, its
doc), the typed keywords the enqueue faces take (`ItemOptions` and its kin), `EnqueueItem`,
and `EnqueueOptions`, an item's options validated once, which every writer reads
(docs/architecture.md, "Options"). The envelope's option slots, the ready-stream entry's
optional fields, `get()`'s view, a schedule's runs' options, the HTTP models and the CLI
flags follow from the table; tests/unit/test_options.py holds the typed spellings to it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, Self, TypedDict, TypeVar, Unpack, cast

from wheelq.core.callback import Callback, CallbackArg, validate_callback
from wheelq.core.due import At, Delay, DueSpec
from wheelq.core.expiry import expires_datetime, validate_expires
from wheelq.core.follow import JobRef
from wheelq.core.trace import validate_traceparent
from wheelq.errors import InvalidArgumentError, int_in

MAX_ATTEMPTS_LIMIT = 1000
MAX_KEY_BYTES = 256
DEFAULT_PRIORITY = 5
"""A job's priority when none is given (stored as no byte: its slot is ``""``)."""
MAX_PRIORITY = 9
F = TypeVar("F", bound=Callable[..., Any])
Expires = float | int | timedelta | datetime
"""What ``expires=`` takes: seconds from now, a timedelta, or an aware datetime."""


def validate_max_attempts(max_attempts: object) -> int:
    """`max_attempts` if it is an int in [1, 1000], else InvalidArgumentError."""
    return int_in("max_attempts", max_attempts, 1, MAX_ATTEMPTS_LIMIT)


def validate_key(key: object) -> str:
    """`key` if it is a printable str of 1-256 UTF-8 bytes, else InvalidArgumentError."""
    if (
        not isinstance(key, str)
        or not key
        or not key.isprintable()
        or len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES
    ):
        raise InvalidArgumentError(
            "key", f"key must be a printable str of 1-{MAX_KEY_BYTES} UTF-8 bytes, got {key!r}"
        )
    return key


def validate_priority(priority: object) -> int:
    """`priority` if it is an int (not a bool) in [0, 9], else InvalidArgumentError."""
    return int_in("priority", priority, 0, MAX_PRIORITY)


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError
    return value


# --- the table


@dataclass(frozen=True, slots=True)
class Kind:
    """How a stored option is spelled: its `Envelope` value, the envelope slot and entry field
    that hold it (what ``store/lua/includes/envelope.lua`` copies from one to the other), its
    `Job` attribute and what `get()` shows."""

    unset: Any
    """The `Envelope` value of an option not given (its slot is ``""``)."""
    slot: Callable[[Any], str | bytes]
    """`Envelope` value -> slot (``""`` when unset); the entry field is the same bytes."""
    read: Callable[[bytes], Any]
    """Slot (or entry field) bytes -> `Envelope` value."""
    of_job: Callable[[Any], Any]
    """`Job` attribute -> `Envelope` value (a retry carries the job's options on)."""
    view: Callable[[Any], Any] = lambda v: v
    """`Envelope` value -> what `get()` shows (plain JSON values)."""
    shown: str = "str | None"
    """The JSON type of what `get()` shows (where an HTTP model spells it)."""
    to_job: Callable[[Any], Any] = lambda v: v
    """`Envelope` value (set) -> `Job` attribute, a value its row's check takes; ValueError
    when it is none."""


def same(value: Any) -> Any:
    """A `Kind` spelling that is the value itself (writers put it in line, without a call)."""
    return value


def _text_or_none(value: str) -> str | None:
    return value or None


def _int_or_none(value: int) -> int | None:
    return value or None


def _priority_slot(value: int) -> str:
    return "" if value == DEFAULT_PRIORITY else str(value)


def _priority_read(raw: bytes) -> int:
    return int(raw) if raw else DEFAULT_PRIORITY


def _priority_of_job(value: int | None) -> int:
    return DEFAULT_PRIORITY if value is None else value


def _callback_url(packed: bytes) -> str | None:
    """A packed callback shown by its URL alone (its headers may hold credentials)."""
    try:
        return Callback.unpack(packed).url if packed else None
    except ValueError:
        return "(unreadable)"


KINDS = {
    "text": Kind("", same, bytes.decode, lambda v: v or "", _text_or_none),
    "trace": Kind("", same, bytes.decode, lambda v: v or "", _text_or_none),
    "callback": Kind(
        b"",
        same,
        same,
        lambda v: b"" if v is None else v.pack(),
        _callback_url,
        to_job=Callback.unpack,
    ),
    "flag": Kind(False, lambda v: "1" if v else "", lambda b: b == b"1", bool, shown="bool"),
    "int": Kind(
        0,
        lambda v: str(v) if v else "",
        lambda b: int(b) if b else 0,
        lambda v: v or 0,
        shown="int",
    ),
    # epoch ms (the expiry): a `Job` holds the ms, a check takes it back as a datetime
    "time": Kind(
        0,
        lambda v: str(v) if v else "",
        lambda b: int(b) if b else 0,
        lambda v: v or 0,
        _int_or_none,
        shown="int | None",
        to_job=expires_datetime,
    ),
    # 0-9, 5 unset (no byte): a `Job` and `get()` hold the int, 5 when absent
    "priority": Kind(
        DEFAULT_PRIORITY, _priority_slot, _priority_read, _priority_of_job, shown="int"
    ),
}
"""Each `Option.kind` of a stored option."""


@dataclass(frozen=True, slots=True)
class Option:
    """One option of a job: a row of `OPTIONS`."""

    name: str
    """The keyword of every face, `EnqueueItem`'s field, and (stored) the `Envelope` and
    `Job` attribute and the key of `JobInfo.options`."""
    doc: str
    """What it means (the docs of every face say it in these words)."""
    check: Callable[[Any], Any] | None = None
    """Stored: a caller's value (one that is not the default) -> its `Envelope` value; an
    InvalidArgumentError or TypeError/ValueError (then named with `hint`) when it is none.
    None: the writer places it itself (timing, id, replace, max_attempts)."""
    hint: str = ""
    """What a value must be, for the message of a check's TypeError or ValueError."""
    kind: str | None = None
    """Stored in the envelope's option slots and the ready entry: a key of `KINDS`;
    None: the writer places it itself."""
    entry: bytes | None = None
    """The ready-stream entry field it is fired into (stored options)."""
    requires: str | None = None
    """An option that must be set too for this one to be set (``ordered`` needs ``key``)."""
    shared: bool = False
    """`enqueue_bulk` takes it: one value for many jobs."""
    runs: bool = True
    """Stored: a schedule stores it and each of its runs carries it (`RUN`); False: an
    option of one call (a trace)."""
    http: type | None = None
    """The JSON type of its field in the HTTP job body; None: the body spells it itself."""
    cli: type | None = None
    """The type of its ``wheelq enqueue`` flag (bool: a switch); None: no flag of its own."""


OPTIONS: tuple[Option, ...] = (
    Option("delay", "Seconds from now (int, float or timedelta), 0 to ten years."),
    Option("at", "Absolute due time: epoch seconds or an aware datetime (past = now)."),
    Option(
        "job_id",
        "Your own id, which makes the call idempotent while the job is pending; default a "
        "generated, time-sortable, URL-safe id.",
    ),
    Option(
        "max_attempts",
        "Runs allowed before the job is dead-lettered (1-1000); default the client's "
        "`default_max_attempts`.",
        shared=True,
    ),
    Option("replace", "With `job_id`, replace a pending job of that id instead of failing."),
    Option(
        "traceparent",
        "The W3C traceparent of the job's trace; default this call's ``send`` span with the "
        "``otel`` extra, else none (docs/guides/tracing.md).",
        check=validate_traceparent,  # given (not None): the traceparent itself
        kind="trace",
        entry=b"trace",
        runs=False,
        cli=str,
    ),
    Option(
        "callback",
        "Where `wheelq deliver` POSTs the job when it is due: a URL, a `Callback` or a "
        "mapping with ``url``, ``headers`` and ``timeout_ms``.",
        check=lambda v: validate_callback(v).pack(),
        kind="callback",
        entry=b"callback",
    ),
    Option(
        "key",
        "The job's key (a tenant, a customer id; 1-256 bytes): `Job.key`, and what a "
        "worker's `Flow` limits per key unless its ``key=`` says otherwise.",
        check=validate_key,
        kind="text",
        entry=b"key",
        http=str,
        cli=str,
    ),
    Option(
        "ordered",
        "With `key`: the key's jobs run one at a time, in due order, in every consumer group "
        "(a failing job holds the ones after it until it succeeds or is dead-lettered).",
        check=_flag,
        hint="a bool",
        kind="flag",
        entry=b"ordered",
        requires="key",
        http=bool,
        cli=bool,
    ),
    Option(
        "expires",
        "Until when the job may start: seconds from now (int, float or timedelta, as "
        "Celery's ``expires``) or an aware datetime; a job not started by then is dropped as "
        "``expired``, counted, never run (`get()` says so, `result()` raises). Stored as "
        "epoch ms: `Job.expires`, `get()`'s ``options``.",
        check=validate_expires,
        kind="time",
        entry=b"expires",
        shared=True,
        runs=False,  # a schedule's runs are each due at their own time: no one expiry
        cli=float,
    ),
    Option(
        "priority",
        "0-9, higher first, default 5: among due jobs, a job of priority p goes as if due "
        "p x the topic's priority_credit_ms earlier (docs/guides/priority.md).",
        check=validate_priority,
        kind="priority",
        entry=b"priority",
        shared=True,
        http=int,
        cli=int,
    ),
)
"""Every option of a job, in `EnqueueItem`'s order; the stored ones (`STORED`) in the order
of the envelope's option slots. A new option is a row here, its line in the typed keywords
below (`RunOptions` for one a schedule's runs carry too) and in `EnqueueItem`, its `Envelope`
and `Job` attribute (core/job.py) and, stored, its row in
``store/lua/includes/envelope.lua``'s ``WQ_ENTRY_OPTIONAL`` (docs/architecture.md,
"Options")."""

BY_NAME = {o.name: o for o in OPTIONS}
STORED = tuple(o for o in OPTIONS if o.kind is not None)
"""The options stored with a job, in the order of the envelope's option slots (8 on)."""
RUN = tuple(o for o in STORED if o.runs)
"""The stored options a schedule's runs carry (`RunOptions`, with `max_attempts`)."""


def orders(stored: tuple[Any, ...]) -> bool:
    """Whether a job of these stored options (`Envelope` values, `STORED` order) makes its
    shard order its due jobs: a priority other than the default (docs/architecture.md, "The
    due line"); ``()``, no options, does not."""
    return len(stored) > _PRIORITY_AT and stored[_PRIORITY_AT] != DEFAULT_PRIORITY


def stored_unset() -> tuple[Any, ...]:
    """Every stored option's `Envelope` value when none is given."""
    return tuple(KINDS[o.kind].unset for o in STORED if o.kind is not None)


def stored_attributes() -> Callable[[Any], tuple[Any, ...]]:
    """What reads the attributes named after the stored options of an object (an `Envelope`,
    a `Job`), as a tuple in `STORED` order, in one C call."""
    get = attrgetter(*(o.name for o in STORED))
    if len(STORED) > 1:
        return cast(Callable[[Any], tuple[Any, ...]], get)
    return lambda obj: (get(obj),)  # attrgetter of one name gives the value itself


def view(values: tuple[Any, ...], options: tuple[Option, ...] = STORED) -> dict[str, Any]:
    """`JobInfo.options`: each stored option (of `options`) by name, as `get()` shows it
    (`values`: the `Envelope` values, `STORED` order)."""
    at = _STORED_INDEX
    return {o.name: KINDS[o.kind].view(values[at[o.name]]) for o in options if o.kind}


# --- the typed keywords (what mypy checks calls against); test_options.py holds them to OPTIONS


class SharedOptions(TypedDict, total=False):
    """Options many jobs may share: what `enqueue_bulk` takes besides its timing (each as
    `OPTIONS` documents it)."""

    max_attempts: int | None
    expires: Expires | None
    priority: int | None


class RunOptions(TypedDict, total=False):
    """What a schedule's runs carry besides their payload: `max_attempts` and the stored
    options of `RUN` (`Admin.schedule`'s keywords)."""

    max_attempts: int | None
    callback: CallbackArg
    key: str | None
    ordered: bool
    priority: int | None


class JobOptions(RunOptions, total=False):
    """A job's options stored with it (`STORED`) and its `max_attempts`: a run's, and the
    ones of one call."""

    traceparent: str | None
    expires: Expires | None


class Timing(TypedDict, total=False):
    """When a job is due: `delay` from now or at `at` (neither: now)."""

    delay: Delay | None
    at: At | None


class Placement(TypedDict, total=False):
    """Which job: your own `job_id`, and whether to `replace` a pending one of that id."""

    job_id: str | None
    replace: bool


class ItemOptions(Timing, Placement, JobOptions, total=False):
    """Every option of one job: `EnqueueItem`'s fields but its payload (`OPTIONS`), what
    `wheelq.outbox.enqueue` takes."""


class Acked(TypedDict, total=False):
    """The ack level of a write (`Client.enqueue`)."""

    ack: str | None


class Debounce(TypedDict, total=False):
    """A debounce (`Client.enqueue`): `debounce` and `max_wait` in seconds or a timedelta,
    or their ms aliases."""

    debounce: Delay | None
    max_wait: Delay | None
    debounce_ms: int | None
    max_wait_ms: int | None


class Follows(TypedDict, total=False):
    """A job that follows another (`Client.enqueue`; `wheelq.core.follow`): ``after`` names
    the job (an id on the same topic, a `JobRef`, or ``(topic, job_id[, group])``), the job
    is due its ``delay`` after that one succeeds in the group; ``on_parent_failure``
    (``"cancel"``, default, or ``"run"``) says what it does if that job ends otherwise."""

    after: str | JobRef | tuple[str, str] | tuple[str, str, str] | None
    on_parent_failure: str | None


class EnqueueKwargs(ItemOptions, Acked, Debounce, Follows, total=False):
    """`Client.enqueue`'s keywords: a job's options, its write's `ack`, a debounce, and the
    job it follows."""


class BulkOptions(Timing, SharedOptions, Acked, total=False):
    """`Client.enqueue_bulk`'s keywords: one timing and the shared options of all its jobs."""


class TaskCallOptions(Placement, JobOptions, Acked, total=False):
    """`Task.options`' keywords but ``outbox``."""


class _Fields(NamedTuple):
    payload: Any
    delay: Delay | None = None
    at: At | None = None
    job_id: str | None = None
    max_attempts: int | None = None
    replace: bool = False
    traceparent: str | None = None
    callback: Callback | str | Mapping[str, Any] | None = None
    key: str | None = None
    ordered: bool = False
    expires: Expires | None = None
    priority: int | None = None


def keyword_new_source() -> str:
    """The source of `EnqueueItem.__new__`, written from its fields: each a keyword with its
    default, the tuple made at once (a ``**options`` collected and passed on costs a fifth of
    building an item)."""
    defaults = _Fields._field_defaults
    keywords = [f if f not in defaults else f"{f}={defaults[f]!r}" for f in _Fields._fields]
    return "\n".join(
        [
            f"def __new__(cls, *, {', '.join(keywords)}):",
            f"    return tuple_new(cls, ({''.join(f'{f}, ' for f in _Fields._fields)}))",
        ]
    )


def _keyword_new() -> Callable[..., Any]:
    """`keyword_new_source` compiled once, at import."""
    scope: dict[str, Any] = {"tuple_new": tuple.__new__}
    exec(keyword_new_source(), scope)  # noqa: S102 (our own fields' text, at import)
    new = scope["__new__"]
    new.__qualname__ = "EnqueueItem.__new__"
    new.__code__ = new.__code__.replace(co_qualname=new.__qualname__)  # what errors name
    return cast(Callable[..., Any], new)


class EnqueueItem(_Fields):
    """One job for `enqueue_many`, built with keywords; the fields mean what `enqueue`'s
    arguments mean (`OPTIONS`). A named tuple: a third of the cost of a frozen dataclass per
    job."""

    __slots__ = ()

    if TYPE_CHECKING:

        def __new__(cls, *, payload: Any, **options: Unpack[ItemOptions]) -> Self: ...

    else:
        __new__ = _keyword_new()

    def __getnewargs_ex__(self) -> tuple[tuple[()], dict[str, Any]]:
        return (), self._asdict()


ITEM_FIELDS = _Fields._fields


class EnqueueOptions(NamedTuple):
    """An item's options validated once: what every writer reads (the envelope, the sorted
    set, the outbox row, the spool)."""

    due: DueSpec
    job_id: str | None
    """The caller's id; None: the writer generates one."""
    replace: bool
    max_attempts: int
    stored: tuple[Any, ...]
    """The `Envelope` value of each stored option (`STORED` order)."""

    def get(self, name: str) -> Any:
        """A stored option's `Envelope` value."""
        return self.stored[_STORED_INDEX[name]]


_STORED_INDEX = {o.name: i for i, o in enumerate(STORED)}
_PRIORITY_AT = _STORED_INDEX["priority"]
_ROWS = tuple(
    (
        ITEM_FIELDS.index(o.name),
        _Fields._field_defaults[o.name],
        KINDS[o.kind].unset,
        o,
        o.name == "traceparent",
        None if o.requires is None else ITEM_FIELDS.index(o.requires),
    )
    for o in STORED
    if o.kind is not None
)
"""Each stored option as `stored_values` reads it: its place in an item, its default, its
`Envelope` value when unset, its row, whether it is the traceparent, the place of the
option it requires."""


def stored_values_source() -> str:
    """The source of `stored_values`, written from `STORED` (as `Job.from_entry`'s decoder
    is from `READY_ENTRY`): one check a stored option, in line, with no loop a job."""
    lines = ["def stored_values(item, traceparent):"]
    for i, (at, default, unset, _, trace, required) in enumerate(_ROWS):
        v = f"v{i}"
        lines.append(f"    {v} = item[{at}]")
        absent = f"{v} is None"
        if default is not None:  # `is` for a flag's (0 == False); an int's: its type and value
            same = f"{v} is {default!r}" if isinstance(default, bool) else _same_as(v, default)
            absent += f" or {same}"
        lines.append(f"    if {absent}:")
        lines.append(
            f"        {v} = traceparent or {unset!r}" if trace else f"        {v} = {unset!r}"
        )
        lines.append("    else:")
        lines.append("        try:")
        lines.append(f"            {v} = check_{i}({v})")
        lines.append("        except InvalidArgumentError:")
        lines.append("            raise")
        lines.append("        except (TypeError, ValueError) as exc:")
        lines.append(f"            refused(ROWS[{i}][3], {v}, exc)")
        if required is not None:
            lines.append(f"        if {v} and item[{required}] is None:")
            lines.append(f"            unrequired(ROWS[{i}][3], item[{at}])")
    lines.append(f"    return ({''.join(f'v{i}, ' for i in range(len(_ROWS)))})")
    return "\n".join(lines)


def _same_as(name: str, default: object) -> str:
    """An expression: `name` is a value of `default`'s type equal to it (``is`` with a
    literal other than a bool or None warns, and 0 == False)."""
    return f"(type({name}) is {type(default).__name__} and {name} == {default!r})"


def _unrequired(o: Option, value: object) -> None:
    raise InvalidArgumentError(
        o.name, f"{o.name} is for a job with a {o.requires} only, got {value!r}"
    )


def _refused(o: Option, value: object, exc: Exception) -> NoReturn:
    """A check's TypeError or ValueError as the InvalidArgumentError that names its option."""
    raise InvalidArgumentError(o.name, f"{o.name} must be {o.hint}, got {value!r}") from exc


def checked(o: Option, value: Any) -> Any:
    """`value` through `o.check`; its TypeError or ValueError as InvalidArgumentError (what
    the outbox relay checks a row's slot with; `stored_values` does the same in line)."""
    assert o.check is not None
    try:
        return o.check(value)
    except InvalidArgumentError:
        raise
    except (TypeError, ValueError) as exc:
        _refused(o, value, exc)


KEYWORD_DOCS: dict[str, str] = {
    **{o.name: o.doc for o in OPTIONS},
    "ack": '``"primary"``, ``"replicated"`` (WAIT for ``ack_replicas``) or ``"persisted"`` '
    "(WAITAOF); default the client's (docs/guides/durability.md).",
    "debounce": "With `job_id`, instead of `delay`/`at`: the job is due this long (seconds or "
    "a timedelta) after the latest call, so calls in a burst fire it once, after the last (its "
    "payload and options are the latest call's); 1 ms to ten years.",
    "max_wait": "With `debounce`: fire no later than this long (seconds or a timedelta) after "
    "the first call of the burst, however the calls go on (>= debounce).",
    "debounce_ms": "`debounce` in whole ms (an alias; give one of the two).",
    "max_wait_ms": "`max_wait` in whole ms (an alias; give one of the two).",
}
"""What each keyword of the typed keywords below means: an option's row, and the keywords of
a write that are not options (`Acked`, `Debounce`). `takes` writes them into ``help()``, and
the Python reference's griffe extension (docs/scripts/option_docs.py) into the docs."""


def docs(names: tuple[str, ...] | list[str], indent: str = "    ") -> str:
    """The Google-style ``Args:`` lines of these keywords (`KEYWORD_DOCS`' words)."""
    return "\n".join(f"{indent}{name}: {KEYWORD_DOCS[name]}" for name in names)


def takes(kwargs: type, *, payload: bool = True) -> Callable[[F], F]:
    """Give a face whose options come as ``**options: Unpack[kwargs]`` the signature and docs
    of its keywords spelled out (`inspect.signature`, `help()`): each option as `OPTIONS`
    says it, added to the end of its docstring's ``Args:``."""

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        hints = kwargs.__annotations__
        defaults = EnqueueItem._field_defaults
        params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        params += [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=defaults.get(name)
            ).replace(annotation=hints[name])
            for name in hints
        ]
        fn.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        doc = fn.__doc__ or ""
        names = [n for n in hints if n in KEYWORD_DOCS]
        if "Args:" in doc and names:
            head, _, rest = doc.partition("Args:")
            indent = head[head.rindex("\n") + 1 :] + "    "
            args, gap, tail = rest.partition("\n\n")
            fn.__doc__ = head + "Args:" + args + "\n" + docs(names, indent) + gap + tail
        return fn

    return decorate


def _stored_values() -> Callable[[tuple[Any, ...], str | None], tuple[Any, ...]]:
    """`stored_values_source` compiled once, at import."""
    scope: dict[str, Any] = {"ROWS": _ROWS, "refused": _refused, "unrequired": _unrequired}
    scope["InvalidArgumentError"] = InvalidArgumentError
    scope.update({f"check_{i}": row[3].check for i, row in enumerate(_ROWS)})
    exec(stored_values_source(), scope)  # noqa: S102 (our own table's text, at import)
    return cast(Callable[[tuple[Any, ...], str | None], tuple[Any, ...]], scope["stored_values"])


stored_values = _stored_values()
"""The `Envelope` values of an item's stored options (an `EnqueueItem`), each checked by its
row (errors name it); an item without its own traceparent takes the call's (the second
argument)."""


# --- a schedule's runs: their options checked once, stored by name

RUN_NAMES = ("max_attempts", *(o.name for o in RUN))
"""`RunOptions`' keywords."""


def run_values(options: Mapping[str, Any]) -> tuple[Any, ...]:
    """The `Envelope` values (`STORED` order) of a schedule's run options (`RunOptions`), each
    checked by its row (errors name it); a keyword that is not one is a TypeError."""
    for name in options:
        if name not in RUN_NAMES:
            raise TypeError(
                f"a schedule's runs take no option {name!r}; they take {', '.join(RUN_NAMES)}"
            )
    return stored_values(EnqueueItem(payload=None, **cast(ItemOptions, options)), None)


def named_slots(values: tuple[Any, ...]) -> dict[str, str | bytes]:
    """The options of `RUN` set in `values` (`STORED` order), by name, each as its slot: how
    a schedule's record keeps them, readable by a version with more options or fewer."""
    return {
        o.name: KINDS[o.kind].slot(value)
        for o in RUN
        if o.kind is not None and (value := values[_STORED_INDEX[o.name]]) != KINDS[o.kind].unset
    }


def from_named_slots(slots: Mapping[str, Any]) -> tuple[Any, ...]:
    """`named_slots`' inverse: each stored option's `Envelope` value (`STORED` order; absent:
    unset, a name this version does not know: left out); ValueError or TypeError for a slot
    that is not one."""
    values = list(stored_unset())
    for o in RUN:
        slot = slots.get(o.name)
        if o.kind is None or slot is None:
            continue
        if not isinstance(slot, str | bytes):
            raise TypeError(f"option {o.name} is a {type(slot).__name__}, not a slot")
        raw = slot.encode() if isinstance(slot, str) else slot
        values[_STORED_INDEX[o.name]] = KINDS[o.kind].read(raw) if raw else KINDS[o.kind].unset
    return tuple(values)


class JobSpec:
    """One job of `Client.enqueue_flow`: its topic, payload and options, as `enqueue` takes
    them, and the consumer `group` whose outcome of it counts (a child's; ``default``)."""

    __slots__ = ("group", "item", "topic")

    def __init__(
        self, topic: str, payload: Any, *, group: str = "default", **options: Unpack[ItemOptions]
    ) -> None:
        self.topic = topic
        self.group = group
        self.item = EnqueueItem(payload=payload, **options)

    def __repr__(self) -> str:
        return f"JobSpec({self.topic!r}, {self.item!r:.120}, group={self.group!r})"


class FlowSpec:
    """A flow as one child of another (`Client.enqueue_flow`'s `children`): its `parent`
    awaits its own `children` (JobSpecs or FlowSpecs) and counts, for the flow above, as
    the child: it succeeds when it ran and succeeded, and fails when it was dead-lettered
    (a child of its own failed, under ``on_child_failure="fail"``) or cancelled."""

    __slots__ = ("children", "on_child_failure", "parent")

    def __init__(
        self, parent: JobSpec, children: Sequence[Any], *, on_child_failure: str = "fail"
    ) -> None:
        self.parent = parent
        self.children = children
        self.on_child_failure = on_child_failure

    def __repr__(self) -> str:
        return f"FlowSpec({self.parent!r}, <{len(self.children)} children>)"
