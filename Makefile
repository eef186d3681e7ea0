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
# needs); `.installed` adds the dev tools, the benchmarks' solver and pip itself (what
# `make test`, `make check` and `.ci/run` need; tests/deploy/test_image.py runs the venv's pip).
# Fast from cold (docs/performance.md, "Cold start"): the venv is made without pip and filled by
# the pip of $(PYTHON) (`pip --python`), when it has one new enough, instead of bootstrapping a
# pip of its own (ensurepip: about 6 s of CPU); nothing is byte-compiled at install
# (--no-compile: Python compiles a module when it is first imported, so the thousands of
# lightkube-models modules the daemons never load cost nothing).
PIP = $$([ -x $(BIN)/pip ] && echo $(BIN)/pip || echo $(PYTHON) -m pip --python $(PY)) \
	install -q --disable-pip-version-check --no-compile

$(VENV)/.runtime: pyproject.toml
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(PY) --version >/dev/null 2>&1 || $(PY) -m ensurepip -q
	$(PIP) -e .
	touch $@

$(VENV)/.installed: $(VENV)/.runtime
	$(PIP) -e '.[dev,bench]' pip
	touch $@

install: $(VENV)/.installed

test: install
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check --no-cache src tests
	$(BIN)/ruff format --no-cache --check src tests

typecheck: install
	$(BIN)/mypy

# import-linter's contracts, then the structure tests it cannot express (tests/layers: the
# core's purity, no import circle, class sizes, docs naming only code that exists).
layers: install
	$(BIN)/lint-imports
	$(BIN)/pytest -q -p no:cacheprovider tests/layers

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
