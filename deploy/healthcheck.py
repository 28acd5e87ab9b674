"""The container image's HEALTHCHECK: exit 0 when a wheelq process in the container answers
``GET /healthz`` with 200, else 1. It asks, in turn, ``$WHEELQ_HEALTHCHECK_URL`` if set,
else the ports the docs run the roles on: 9100 (``--metrics-port`` of a scheduler node, a
worker, `wheelq run` or `wheelq relay`) and 8080 (`wheelq serve`). Standard library only:
the image has no curl (docs/operations/deploying.md, "The image")."""

import os
import sys
import urllib.request

DEFAULT = "http://127.0.0.1:9100/healthz http://127.0.0.1:8080/healthz"
TIMEOUT_S = 2.0


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as reply:  # noqa: S310 (http only)
            return bool(reply.status == 200)
    except OSError:
        return False


def main() -> int:
    urls = os.environ.get("WHEELQ_HEALTHCHECK_URL", "").split() or DEFAULT.split()
    return 0 if any(healthy(url) for url in urls) else 1


if __name__ == "__main__":
    sys.exit(main())
