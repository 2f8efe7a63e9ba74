"""The bottom network-node layer is the instance type's: 3 on p5/p5e/p5en, 4 on p6-b200/p6-b300."""

from __future__ import annotations

import pytest

from blueprints.schema import AwsSpec
from tasks.planning import topology
from tasks.planning.manifests.common import affinity
from tests.unit.manifests.helpers import REFERENCE

NEAR = "topology.k8s.aws/network-node-layer-{}"


def on(instance_type: str):
    return REFERENCE.model_copy(update={"aws": REFERENCE.aws.model_copy(update={"instance_type": instance_type})})


@pytest.mark.parametrize("instance_type, layers", [
    ("p5en.48xlarge", 3), ("p5e.48xlarge", 3), ("p5.48xlarge", 3),
    ("p6-b200.48xlarge", 4), ("p6-b300.48xlarge", 4),
    ("x9.unknown", 3),  # EC2: instances attach "at or below the third layer"
])
def test_the_bottom_layer_comes_from_the_instance_types_layer_count(instance_type, layers):
    assert topology.bottom_layer(instance_type) == layers


@pytest.mark.parametrize("instance_type, layer", [("p5en.48xlarge", 3), ("p6-b200.48xlarge", 4),
                                                  ("p6-b300.48xlarge", 4)])
def test_prefill_must_and_decode_would_rather_share_the_bottom_network_node_of_the_instance_type(
        instance_type, layer):
    prefill = affinity(on(instance_type), "prefill")["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["topologyKey"] for t in prefill] == [NEAR.format(layer)]
    decode = affinity(on(instance_type), "decode")["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert {t["podAffinityTerm"]["topologyKey"] for t in decode} == {NEAR.format(layer)}


def test_a_blueprint_may_name_a_hyphenated_instance_type():
    fields = REFERENCE.aws.model_dump()
    assert AwsSpec(**{**fields, "instance_type": "p6-b200.48xlarge"}).instance_type == "p6-b200.48xlarge"
