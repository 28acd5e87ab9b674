"""The answers that are core records: `wire_model`, the pydantic model of a record as
`as_json` writes it, its fields described by their docstrings."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
from typing import Any, get_args, get_origin, get_type_hints

from pydantic import BaseModel, Field, create_model

from wheelq.web import ERRORS, wire_fields

ERROR_LINE = (
    "the error in one line: a handler's exception as its type and message, or the message "
    "of a Retry or Fail it raised, or why the job could not run"
)


ERROR_DETAIL = "the error whole: its line, then the traceback (null when the line is all)"


def _field_docs(cls: type[Any]) -> dict[str, str]:
    """`cls`'s attribute docstrings, by field."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body  # type: ignore[attr-defined]
    docs = {}
    for a, b in itertools.pairwise(body):
        match a, b:
            case (
                ast.AnnAssign(target=ast.Name(id=name)) | ast.Assign(targets=[ast.Name(id=name)]),
                ast.Expr(value=ast.Constant(value=str(doc))),
            ):
                docs[name] = inspect.cleandoc(doc)
    return docs


def wire_model(cls: type) -> type[BaseModel]:
    """The pydantic model of `cls` as `as_json` writes it (for the OpenAPI document), its
    fields described by their docstrings."""
    fields = wire_fields(cls)
    # Only the fields on the wire: a hidden one's type may be imported for type checking only.
    shown = {"__module__": cls.__module__, "__annotations__": {n: t for n, _, t in fields}}
    hints = get_type_hints(type(cls.__name__, (), shown))
    docs = _field_docs(cls)
    spec: dict[str, Any] = {}
    for name, wire, _ in fields:
        kind = hints[name]
        args: tuple[Any, ...] = get_args(kind)
        if get_origin(kind) in (tuple, list) and isinstance(args[0], type):
            if dataclasses.is_dataclass(args[0]):  # records: GroupInfo, ShardStats
                kind = list[wire_model(args[0])]  # type: ignore[misc]
            else:  # plain values (topic names): a JSON list
                kind = list.__class_getitem__(args[0])
        # Every field required: an answer always carries each one.
        spec[wire] = (kind, Field(description=ERROR_LINE if name in ERRORS else docs.get(name)))
        if name in ERRORS:
            spec[f"{wire}_detail"] = (str | None, Field(description=ERROR_DETAIL))
    model: type[BaseModel] = create_model(cls.__name__, __doc__=cls.__doc__, **spec)
    return model
