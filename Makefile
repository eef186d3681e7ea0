# One target per check; CI (.ci/run) runs `make install`, `make check` and `make test`; the README
# names `make demo` and `make test`.
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

# Two stamps: `.runtime` is the project and its runtime dependencies only (what `make demo`
# needs, about 35 packages); `.installed` adds the dev tools and the benchmarks' solver (what
# `make test`, `make check` and `.ci/run` need). pip's own upgrade is skipped: the venv's pip
# installs these pins, and --disable-pip-version-check keeps it quiet about newer ones.
PIP := $(BIN)/pip install -q --disable-pip-version-check

$(VENV)/.runtime: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	touch $@

$(VENV)/.installed: $(VENV)/.runtime
	$(PIP) -e '.[dev,bench]'
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

demo: $(VENV)/.runtime
	$(BIN)/gpufleet simulate

image:
	$(ENGINE) build -t $(IMAGE):$(VERSION) .

# The Kustomize base's generated files (deploy/), from `gpufleet install`; a test checks them.
deploy: install
	$(PY) -c 'from pathlib import Path; from gpufleet.kube import install; install.write_deploy(Path("deploy"))'
