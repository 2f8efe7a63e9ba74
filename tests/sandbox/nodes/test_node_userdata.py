"""What a node registers with comes from its nodeadm user data, in the forms EC2 carries it."""

from __future__ import annotations

import base64

import pytest

from sandbox.nodes.userdata import UserDataError, parse_user_data
from tests.sandbox.nodes.helpers import USER_DATA

BARE = """apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster: {name: c1}
  kubelet:
    config:
      registerWithTaints: [{key: dedicated, value: decode, effect: NoExecute}]
    flags: ["--node-labels", "role=decode"]
"""


def test_the_nodeconfig_part_of_a_mime_multipart_is_read():
    join = parse_user_data(USER_DATA)
    assert join.cluster == "pdlift-sandbox" and join.max_pods == 200
    assert join.labels == {"pdlift.io/role": "prefill", "pdlift.io/deployment": "sandbox-2p2d"}
    assert join.taints == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]


def test_base64_user_data_as_run_instances_carries_it_is_decoded():
    assert parse_user_data(base64.b64encode(USER_DATA.encode()).decode()).labels["pdlift.io/role"] == "prefill"


def test_a_bare_nodeconfig_with_config_taints_and_a_split_flag_is_read():
    join = parse_user_data(BARE)
    assert join.labels == {"role": "decode"}
    assert join.taints == [{"key": "dedicated", "value": "decode", "effect": "NoExecute"}]


def test_user_data_without_a_nodeconfig_means_no_join():
    assert parse_user_data("#!/bin/bash\necho hello\n") is None
    assert parse_user_data(None) is None


def test_a_taint_without_a_valid_effect_is_an_error():
    with pytest.raises(UserDataError, match="bad taint"):
        parse_user_data(BARE.replace('"--node-labels", "role=decode"', '"--register-with-taints=gpu=true:Sometimes"'))


def test_yaml_tags_are_not_executed():
    with pytest.raises(UserDataError):
        parse_user_data("kind: NodeConfig\nspec: !!python/object/apply:os.system ['true']\n")
