"""Shared settings of the kube contract tests (a module, not conftest: names must be unique)."""

from gpufleet.kube.store import KubeStoreConfig

#: Short periods so failure paths finish within a test's time bound.
FAST = KubeStoreConfig(
    request_timeout_s=5.0,
    watch_timeout_s=30,
    resync_period_s=30.0,
    backoff_initial_s=0.05,
    backoff_max_s=0.2,
    initial_sync_timeout_s=5.0,
)
