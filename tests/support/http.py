"""Plain HTTP requests with the standard library, as a client in any language would send
them (no wheelq, no aiohttp): for tests of the service run as a separate process."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def request(
    method: str, url: str, body: Any = None, token: str | None = None, timeout_s: float = 10
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data, headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            text = r.read()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
    except OSError:
        return 0, None


def get_status(url: str) -> int:
    """The status of a GET of `url` (0 when nothing answers)."""
    return request("GET", url)[0]


def get_page(url: str, timeout_s: float = 10) -> tuple[int, str, bytes]:
    """(status, Content-Type, body) of a GET of `url` that may not answer JSON (a page, a
    style sheet); (0, "", b"") when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()
    except OSError:
        return 0, "", b""
