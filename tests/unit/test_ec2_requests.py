"""EC2 requests built by planning: right shape (botocore's service model), right layout, stable tokens."""

import base64
import datetime as dt
from pathlib import Path

import botocore.session
import pytest
import yaml
from botocore.validate import ParamValidator

from blueprints.loader import load_blueprint
from tasks.planning import ec2_requests as req
from tasks.planning import identity
from tasks.planning.aws_errors import Action, classify, fix_for
from tasks.planning.identity import RunIdentity
from tasks.planning.topology import assign_roles, label_patch

ROOT = Path(__file__).resolve().parents[2]
EC2 = botocore.session.get_session().get_service_model("ec2")
T0 = dt.datetime(2026, 11, 29, 16, 20, 5, tzinfo=dt.timezone.utc)


def valid(operation: str, params: dict) -> None:
    report = ParamValidator().validate(params, EC2.operation_model(operation).input_shape)
    assert not report.has_errors(), report.generate_report()


@pytest.fixture(scope="module")
def bp():
    return load_blueprint(ROOT / "blueprints" / "glm51-fp8-2p2d.yaml")


@pytest.fixture(scope="module")
def run(bp):
    return RunIdentity(bp.name, "r0001", T0, 72)


def p5en_network_info(cards=16, efa=16):
    return {"MaximumNetworkCards": cards, "EfaInfo": {"MaximumEfaInterfaces": efa},
            "NetworkCards": [{"NetworkCardIndex": i, "InterfaceTypes": ["interface", "efa", "efa-only"]}
                             for i in range(cards)]}


def test_client_token_is_stable_and_changes_with_zone_and_count(run):
    a = identity.client_token(run, "reserve", "us-east-2a", 4)
    assert a == identity.client_token(run, "reserve", "us-east-2a", 4)
    assert a != identity.client_token(run, "reserve", "us-east-2b", 4)
    assert a != identity.client_token(run, "reserve", "us-east-2a", 3)
    assert len(a) <= 64 and a.isascii()


def test_every_resource_is_tagged_with_deployment_run_stage_created_and_ttl(run):
    tags = identity.tag_dict(identity.tags(run, "reserve"))
    assert tags == {"pdlift:deployment": "glm51-fp8-2p2d", "pdlift:run": "r0001", "pdlift:stage": "reserve",
                    "pdlift:created-at": "2026-11-29T16:20:05Z", "pdlift:ttl": "72"}


def test_capacity_reservation_is_targeted_in_the_placement_group_and_valid(bp, run):
    r = req.capacity_reservation_request(bp, run, "us-east-2b", "arn:aws:ec2:us-east-2:1:placement-group/pg")
    valid("CreateCapacityReservation", r)
    assert r["InstanceMatchCriteria"] == "targeted" and r["InstanceCount"] == 4
    assert r["PlacementGroupArn"].endswith("placement-group/pg")
    assert r["ClientToken"] == identity.client_token(run, "reserve", "us-east-2b", 4)


def test_reservation_end_is_the_same_on_every_retry_of_a_run(bp, run):
    first = req.capacity_reservation_request(bp, run, "us-east-2a", None)["EndDate"]
    assert first == req.capacity_reservation_request(bp, run, "us-east-2a", None)["EndDate"]
    assert first == dt.datetime(2026, 11, 29, 16, tzinfo=dt.timezone.utc) + dt.timedelta(hours=49)


def test_placement_group_request_is_cluster_strategy_and_valid(run):
    r = req.placement_group_request(run)
    valid("CreatePlacementGroup", r)
    assert r["Strategy"] == "cluster"


def test_p5en_layout_is_one_ena_and_sixteen_efa_only_interfaces():
    nics = req.network_interfaces(p5en_network_info(), "subnet-1", "sg-1")
    assert len(nics) == 17
    assert nics[0] == {"SubnetId": "subnet-1", "Groups": ["sg-1"], "DeleteOnTermination": True,
                       "NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "interface"}
    efa = [(n["NetworkCardIndex"], n["DeviceIndex"]) for n in nics if n["InterfaceType"] == "efa-only"]
    assert efa == [(0, 1)] + [(c, 0) for c in range(1, 16)]


def test_nic_layout_follows_network_info_not_a_hard_coded_count():
    assert len(req.network_interfaces(p5en_network_info(cards=32, efa=32), "s", "g")) == 33
    assert len(req.network_interfaces(p5en_network_info(cards=4, efa=2), "s", "g")) == 3


def test_launch_template_targets_the_reservation_with_imdsv2_and_no_public_ip(bp, run):
    user_data = req.nodeadm_user_data("c", "https://k", "Q0E=", "10.100.0.0/16", {"pdlift.io/run": "r0001"}, [])
    inputs = req.LaunchInputs("ami-1", "subnet-1", "sg-1", "kp", "arn:aws:iam::1:instance-profile/n",
                              "cr-0123456789abcdef0", "pg", False, user_data)
    r = req.launch_template_request(bp, run, p5en_network_info(), inputs)
    valid("CreateLaunchTemplate", r)
    data = r["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}}
    assert not any(n.get("AssociatePublicIpAddress") for n in data["NetworkInterfaces"])
    assert "InstanceMarketOptions" not in data
    assert base64.b64decode(data["UserData"]).decode() == user_data


def test_capacity_block_launch_sets_the_market_type(bp, run):
    inputs = req.LaunchInputs("ami-1", "s", "g", "kp", "", "cr-0123456789abcdef0", None, True, "x")
    data = req.launch_template_request(bp, run, p5en_network_info(), inputs)["LaunchTemplateData"]
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}


def test_gang_launch_is_min_equals_max_with_a_token(run):
    r = req.run_instances_request(run, "lt-1", 4)
    valid("RunInstances", r)
    assert r["MinCount"] == r["MaxCount"] == 4
    assert r["ClientToken"] != req.run_instances_request(run, "lt-1", 4, attempt=1)["ClientToken"]


def test_nodeadm_user_data_carries_a_node_config_with_labels_and_raid0():
    text = req.nodeadm_user_data("cl", "https://1.2.3.4", "Q0E=", "10.100.0.0/16",
                                 {"b": "2", "a": "1"}, ["gpu=true:NoSchedule"])
    part = text.split("Content-Type: application/node.eks.aws\n\n", 1)[1].split("\n--", 1)[0]
    config = yaml.safe_load(part)
    assert config["kind"] == "NodeConfig"
    assert config["spec"]["cluster"] == {"name": "cl", "apiServerEndpoint": "https://1.2.3.4",
                                         "certificateAuthority": "Q0E=", "cidr": "10.100.0.0/16"}
    assert config["spec"]["kubelet"]["flags"] == ["--node-labels=a=1,b=2", "--register-with-taints=gpu=true:NoSchedule"]
    assert config["spec"]["instance"]["localStorage"]["strategy"] == "RAID0"


def test_capacity_block_is_bought_only_within_the_upfront_limit(bp):
    cb = bp.model_copy(update={"aws": bp.aws.model_copy(update={"capacity": bp.aws.capacity.model_copy(
        update={"mode": "capacity-block", "max_upfront_usd": 20000})})})
    offers = [{"CapacityBlockOfferingId": "cb-1", "AvailabilityZone": "us-east-2a", "UpfrontFee": "30000",
               "StartDate": T0},
              {"CapacityBlockOfferingId": "cb-2", "AvailabilityZone": "us-east-2b", "UpfrontFee": "19000",
               "StartDate": T0 + dt.timedelta(days=1)}]
    assert req.choose_capacity_block(cb, offers).offering["CapacityBlockOfferingId"] == "cb-2"
    too_dear = req.choose_capacity_block(cb, offers[:1])
    assert too_dear.offering is None and "above aws.capacity.max_upfront_usd" in too_dear.reason


@pytest.mark.parametrize("code,action", [
    ("RequestLimitExceeded", Action.RETRY), ("InternalError", Action.RETRY), ("ServiceUnavailable", Action.RETRY),
    ("InsufficientInstanceCapacity", Action.FAIL_OVER),  # Unsupported: tests/unit/test_capacity_blocks_and_tokens.py
    ("ReservationCapacityExceeded", Action.WAIT_SLOT), ("VcpuLimitExceeded", Action.FAIL),
    ("InvalidParameterValue", Action.FAIL), ("IdempotentParameterMismatch", Action.FAIL),
    ("InvalidPlacementGroup.Unknown", Action.GONE), ("InvalidInstanceID.NotFound", Action.GONE),
])
def test_error_codes_map_to_what_the_caller_should_do(code, action):
    assert classify(code) is action


def test_quota_errors_carry_the_fix():
    assert "quota" in fix_for("VcpuLimitExceeded") and "Capacity Block" in fix_for("VcpuLimitExceeded")


def test_prefill_goes_to_the_two_nodes_sharing_the_closest_network_node():
    topo = {"i-a": ["n1", "n2", "n3a"], "i-b": ["n1", "n2", "n3b"],
            "i-c": ["n1", "n2", "n3b"], "i-d": ["n1", "n2b", "n3c"]}
    roles = assign_roles(topo, 2)
    assert set(roles.prefill) == {"i-b", "i-c"} and roles.shared_layer == 3
    assert set(roles.decode) == {"i-a", "i-d"}


def test_role_assignment_falls_back_to_the_deepest_shared_layer():
    topo = {"i-a": ["n1", "n2a", "x"], "i-b": ["n1", "n2b", "y"], "i-c": ["n1", "n2b", "z"]}
    roles = assign_roles(topo, 2)
    assert set(roles.prefill) == {"i-b", "i-c"} and roles.shared_layer == 2


def test_label_patch_adds_missing_topology_labels_and_the_role_only():
    current = {"topology.k8s.aws/network-node-layer-1": "n1", "topology.k8s.aws/network-node-layer-2": "wrong"}
    patch = label_patch(current, ["n1", "n2", "n3"], "prefill")
    assert patch == {"topology.k8s.aws/network-node-layer-2": "n2", "topology.k8s.aws/network-node-layer-3": "n3",
                     "pdlift.io/role": "prefill"}
