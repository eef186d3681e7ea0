"""The prediction follows the cluster's steering: Pack when its agent steers, else node_choice."""

from __future__ import annotations

import pytest

from gpufleet.core.capacity import policy_for
from gpufleet.core.model import Cluster, ClusterName, NodeChoice, SchedulingConfig, Steering


@pytest.mark.parametrize(
    ("steering", "configured", "want"),
    [
        (Steering.PREFERRED, None, "Pack"),
        (Steering.REQUIRED, NodeChoice.SPREAD, "Pack"),
        (Steering.PREFERRED, NodeChoice.SPREAD, "Pack"),
        (Steering.OFF, None, "Spread"),
        (Steering.OFF, NodeChoice.SPREAD, "Spread"),
        (Steering.OFF, NodeChoice.PACK, "Pack"),
    ],
)
def test_prediction_follows_steering(
    steering: Steering, configured: NodeChoice | None, want: str
) -> None:
    name = ClusterName("a")
    config = SchedulingConfig(node_choice={} if configured is None else {name: configured})
    assert policy_for(Cluster(name, steering=steering), config).name == want
