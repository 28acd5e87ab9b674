"""The typed codec of a task, two ways: msgspec (what `wheelq.tasks.codec` uses) and pydantic
(the other candidate), on the same three-argument signature; µs per enqueue-side check and
encode, and per worker-side decode. Medians of --rounds, each of --calls calls; prints JSON.

    python loadtest/task_codec.py --rounds 7 --calls 20000

The enqueue side is what `TaskCodec.encode` does (bind the call, turn the arguments into
plain values and check them against the annotations strictly, write plain values); the
decode side what `TaskCodec.decode` does (plain values back into the annotated types, by
the same rule: a time as text, as JSON has it; pydantic's lax mode is its way to read
that). The payloads both write are compared equal before timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import inspect
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from wheelq.tasks.codec import TaskCodec


@dataclasses.dataclass
class Address:
    city: str
    zip: str = ""


def send(to: str, when: datetime.datetime, address: Address) -> None:
    """Three typed arguments: text, a time and a dataclass."""


ARGS = ("a@b.example", datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC))
KWARGS = {"address": Address("Oslo", "0150")}


def pydantic_codec() -> tuple[Callable[[], Any], Callable[[Any], Any]] | None:
    """The same encode and decode with pydantic's TypeAdapter (None: not installed)."""
    try:
        import pydantic
    except ImportError:
        return None
    signature = inspect.signature(send)
    fields = {
        name: (p.annotation if not isinstance(p.annotation, str) else eval(p.annotation))
        for name, p in signature.parameters.items()
    }
    model = pydantic.create_model("SendArgs", **{k: (v, ...) for k, v in fields.items()})  # type: ignore[call-overload]
    strict = pydantic.ConfigDict(strict=True)
    model.model_config = strict  # type: ignore[assignment]
    model.model_rebuild(force=True)

    def encode() -> Any:
        bound = signature.bind(*ARGS, **KWARGS)
        return model.model_validate(bound.arguments).model_dump(mode="json")

    lenient = pydantic.create_model("SendArgsIn", **{k: (v, ...) for k, v in fields.items()})  # type: ignore[call-overload]

    def decode(payload: Any) -> Any:
        args = lenient.model_validate(payload)
        return {name: getattr(args, name) for name in fields}

    return encode, decode


def timed(fn: Callable[[], Any], calls: int) -> float:
    """µs a call of `fn`, over `calls` calls."""
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=20_000)
    args = p.parse_args()
    codec = TaskCodec(send, "send")
    payload = codec.encode(ARGS, KWARGS)
    ways: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "msgspec": (lambda: codec.encode(ARGS, KWARGS), lambda: codec.decode(payload)),
    }
    pyd = pydantic_codec()
    if pyd is not None:
        pyd_encode, pyd_decode = pyd
        theirs = pyd_encode()
        assert json.loads(json.dumps(theirs)) == {**payload, "address": payload["address"]}, (
            theirs,
            payload,
        )
        assert pyd_decode(payload) == codec.decode(payload)
        ways["pydantic"] = (pyd_encode, lambda: pyd_decode(payload))
    results: dict[str, dict[str, Any]] = {name: {"encode": [], "decode": []} for name in ways}
    for _ in range(args.rounds):  # in turns, so a drift of the machine favours none
        for name, (encoding, decoding) in ways.items():
            results[name]["encode"].append(timed(encoding, args.calls))
            results[name]["decode"].append(timed(decoding, args.calls))
    out: dict[str, Any] = {"calls": args.calls, "rounds": args.rounds, "payload": payload}
    for name, runs in results.items():
        out[name] = {
            f"{side}_us": {"median": round(statistics.median(v), 2), "min": round(min(v), 2)}
            for side, v in runs.items()
        }
    if "pydantic" in out:
        out["pydantic_over_msgspec"] = {
            side: round(
                out["pydantic"][f"{side}_us"]["median"] / out["msgspec"][f"{side}_us"]["median"], 2
            )
            for side in ("encode", "decode")
        }
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
