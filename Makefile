.PHONY: install check lint typecheck layers test
PY ?= python

install:
	$(PY) -m pip install -e ".[dev]"

lint:
	ruff check wheelq tests loadtest
	ruff format --check wheelq tests loadtest

typecheck:
	mypy --strict wheelq

layers:
	lint-imports

test:
	$(PY) -m pytest

check: lint typecheck layers test
