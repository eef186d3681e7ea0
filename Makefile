# One target per check; CI (.ci/run) runs `make ci`, the README names `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin

.PHONY: install test lint typecheck layers check ci demo bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,bench]'
	touch $@

install: $(VENV)/.installed

test: install
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check --no-cache src tests
	$(BIN)/ruff format --no-cache --check src tests

typecheck: install
	$(BIN)/mypy

layers: install
	$(BIN)/lint-imports

check: lint typecheck layers

ci: check test

bench: install
	$(BIN)/gpufleet bench --write docs/performance.md

demo: install
	$(BIN)/gpufleet simulate
