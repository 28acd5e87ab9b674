.PHONY: install check lint typecheck layers test docs
PY ?= python

install:
	$(PY) -m pip install -e ".[dev]"

lint:
	ruff check wheelq tests loadtest docs
	ruff format --check wheelq tests loadtest docs/scripts

typecheck:
	mypy --strict wheelq
	mypy --strict -p docs.scripts

layers:
	lint-imports

test:
	$(PY) -m pytest

docs:
	mkdocs build --strict

check: lint typecheck layers test
