"""Fixtures for the kube contract tests: an emulated API server over HTTP and stores on it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/kube has no __init__.py

from kmockplus import Served, serve
from kube_helpers import FAST

from gpufleet.kube.store import KubeStore, KubeStoreConfig


@pytest.fixture
def api() -> Iterator[Served]:
    with serve() as served:
        yield served


@pytest.fixture
def make_store(api: Served) -> Iterator[Callable[..., KubeStore]]:
    stores: list[KubeStore] = []

    def make(config: KubeStoreConfig = FAST) -> KubeStore:
        store = KubeStore.from_url(api.url, config)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def store(make_store: Callable[..., KubeStore]) -> KubeStore:
    return make_store()
