"""The HTTP API reference page (docs/reference/http-api.md) and openapi.json, from the
OpenAPI document of `wheelq serve`."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from docs.scripts.markdown_text import code, header, plain, prose, slug, table
from wheelq import __version__


def openapi_document() -> dict[str, Any]:
    """The document `wheelq serve` serves at ``/openapi.json`` (its version: the code's)."""
    from wheelq import AsyncClient  # noqa: PLC0415 (only this page needs the web stack)
    from wheelq.web.app import create_app  # noqa: PLC0415
    from wheelq.web.service import WebService  # noqa: PLC0415

    client = AsyncClient.from_url("redis://localhost:6379/0")  # never connected
    document: dict[str, Any] = create_app(WebService(client)).openapi()
    document["info"]["version"] = __version__
    served: dict[str, Any] = json.loads(json.dumps(document))  # plain JSON types, as served
    return served


def openapi_json(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def schema_anchor(name: str) -> str:
    return "schema-" + slug(name)


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


_LIMITS = (
    ("minimum", "≥"),
    ("exclusiveMinimum", ">"),
    ("maximum", "≤"),
    ("exclusiveMaximum", "<"),
)


def constraints(schema: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for key, sign in _LIMITS:
        if key in schema:
            value = schema[key]
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            out.append(f"{sign} {value}")
    for key, label in (
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
    ):
        if key in schema:
            out.append(f"{label} {schema[key]}")
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and len(pattern) <= 60:
        out.append(f"pattern {code(pattern)}")
    return out


def type_of(schema: Mapping[str, Any]) -> str:
    """A schema as a short Markdown type: links to named schemas, unions with "or"."""
    if "$ref" in schema:
        name = ref_name(schema["$ref"])
        return f"[{name}](#{schema_anchor(name)})"
    for union in ("anyOf", "oneOf"):
        if union in schema:
            kinds = [type_of(s) for s in schema[union]]
            text = " or ".join(dict.fromkeys(kinds))
            extra = constraints(schema)
            return text + (f" ({', '.join(extra)})" if extra else "")
    if "const" in schema:
        return code(json.dumps(schema["const"]))
    if "enum" in schema:
        return "one of " + ", ".join(code(json.dumps(v)) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        text = f"array of {type_of(items)}" if items else "array"
    elif kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        text = f"object of {type_of(schema['additionalProperties'])}"
    elif isinstance(kind, str):
        text = kind + (f" ({schema['format']})" if "format" in schema else "")
    elif isinstance(kind, list):
        text = " or ".join(kind)
    else:
        text = "any JSON value"
    extra = constraints(schema)
    return text + (f" ({', '.join(extra)})" if extra else "")


def schema_note(schema: Mapping[str, Any]) -> str:
    parts = [prose(schema["description"])] if schema.get("description") else []
    if "default" in schema:
        parts.append(f"Default: {code(json.dumps(schema['default']))}.")
    return " ".join(parts) or "&nbsp;"


def operation_anchor(method: str, path: str) -> str:
    return slug(f"{method} {path}")


def operations(document: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    for path, item in document["paths"].items():
        for method, op in item.items():
            yield method.upper(), path, op


def content_cell(content: Mapping[str, Any]) -> str:
    """A body: its schema (when its media types have one) and its media types."""
    if not content:
        return "&nbsp;"
    types = list(dict.fromkeys(type_of(b["schema"]) for b in content.values() if b.get("schema")))
    media = ", ".join(code(m) for m in sorted(content))
    return f"{' or '.join(types)} ({media})" if types else media


def operation_section(method: str, path: str, op: Mapping[str, Any]) -> list[str]:
    out = [f"### `{method} {path}` {{#{operation_anchor(method, path)}}}", ""]
    if op.get("summary"):
        out += [f"**{plain(op['summary'])}.** " + prose(op.get("description", "")), ""]
    elif op.get("description"):
        out += [prose(op["description"]), ""]
    params = op.get("parameters", [])
    if params:
        out += ["**Parameters**", ""]
        out += table(
            ["Name", "In", "Type", "Required", "Description"],
            [
                (
                    code(p["name"]),
                    p["in"],
                    type_of(p.get("schema", {})),
                    "yes" if p.get("required") else "no",
                    schema_note(
                        {
                            **p.get("schema", {}),
                            **({"description": p["description"]} if "description" in p else {}),
                        }
                    ),
                )
                for p in params
            ],
        )
    body = op.get("requestBody")
    if body:
        required = " (required)" if body.get("required") else " (optional)"
        out += [f"**Request body**{required}: {content_cell(body.get('content', {}))}", ""]
    responses = op.get("responses", {})
    out += ["**Responses**", ""]
    out += table(
        ["Status", "Description", "Body"],
        [
            (code(status), prose(r.get("description", "")), content_cell(r.get("content", {})))
            for status, r in responses.items()
        ],
    )
    return out


def schema_section(name: str, schema: Mapping[str, Any]) -> list[str]:
    out = [f"### `{name}` {{#{schema_anchor(name)}}}", ""]
    if schema.get("description"):
        out += [prose(schema["description"]), ""]
    properties: Mapping[str, Any] = schema.get("properties", {})
    if not properties:
        out += [f"Type: {type_of({k: v for k, v in schema.items() if k != 'description'})}.", ""]
        return out
    required = set(schema.get("required", []))
    out += table(
        ["Field", "Type", "Required", "Description"],
        [
            (
                code(field),
                type_of(prop),
                "yes" if field in required else "no",
                schema_note(prop),
            )
            for field, prop in properties.items()
        ],
    )
    if schema.get("additionalProperties") is False:
        out += ["Other fields are refused (422).", ""]
    return out


def http_page(document: Mapping[str, Any]) -> str:
    info = document["info"]
    tags: dict[str, list[tuple[str, str, Mapping[str, Any]]]] = {}
    for method, path, op in operations(document):
        tags.setdefault((op.get("tags") or ["other"])[0], []).append((method, path, op))
    out = [
        header("the OpenAPI document of `wheelq serve` (wheelq.web.app.create_app)"),
        "",
        "# HTTP API",
        "",
        prose(info.get("description", "")),
        "",
        f"OpenAPI {document['openapi']}, API version {info['version']}. The machine-readable "
        "document, for generating clients in other languages, is "
        "[openapi.json](openapi.json); a running service serves it at `/openapi.json`, and "
        "an interactive version at `/docs`. With tokens configured, send one as "
        "`Authorization: Bearer <token>` (see the [HTTP service guide]"
        "(../guides/http-service.md)). The limits settings change (`max_batch`, "
        "`page_limit`, `max_body_bytes`, ...) are in [Configuration](configuration.md#serve).",
        "",
        "## Endpoints",
        "",
        *table(
            ["Method and path", "Summary"],
            [
                (
                    f"[{code(f'{m} {p}')}](#{operation_anchor(m, p)})",
                    plain(op.get("summary", "")),
                )
                for ops in tags.values()
                for m, p, op in ops
            ],
        ),
    ]
    for tag, ops in tags.items():
        out += [f"## {plain(tag[0].upper() + tag[1:])} {{#tag-{slug(tag)}}}", ""]
        for method, path, op in ops:
            out += operation_section(method, path, op)
    out += ["## Schemas", ""]
    for name, schema in sorted(document.get("components", {}).get("schemas", {}).items()):
        out += schema_section(name, schema)
    return "\n".join(out).rstrip() + "\n"
