# One target per check; CI (.ci/run) runs `make ci`, the README names `make test`.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
# `make image`: any engine with `build` (docker, podman); the tag is the project's version, the
# image `gpufleet install` refers to.
ENGINE ?= docker
IMAGE ?= ghcr.io/gpufleet/gpufleet
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

.PHONY: install test lint typecheck layers check ci demo bench image deploy

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
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

image:
	$(ENGINE) build -t $(IMAGE):$(VERSION) .

# The Kustomize base's generated files (deploy/), from `gpufleet install`; a test checks them.
deploy: install
	$(PY) -c 'from pathlib import Path; from gpufleet.kube import install; install.write_deploy(Path("deploy"))'
