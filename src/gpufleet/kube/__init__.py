"""gpufleet on a real Kubernetes API: the `Store` port over lightkube, leader election on a
Lease, CRDs generated from the API models, and install manifests.

The only package that talks to Kubernetes; the agent and the controller see it through the
`gpufleet.store.Store` port (`KubeStore`) and `gpufleet.kube.leader`.
"""

from gpufleet.kube.store import KubeStore, KubeStoreConfig

__all__ = ["KubeStore", "KubeStoreConfig"]
