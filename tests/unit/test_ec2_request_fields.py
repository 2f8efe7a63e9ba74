"""The fields of each EC2 request as EC2 receives them (``tasks.planning.ec2_requests``): the
reservation's platform, tenancy and end, the Capacity Block search and choice, the NIC layout when
NetworkInfo says less, and the launch template's optional parts."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from blueprints.loader import load_blueprint
from tasks.planning import ec2_requests as req
from tasks.planning import identity
from tasks.planning.identity import Generation, RunIdentity

ROOT = Path(__file__).resolve().parents[2]
BP = load_blueprint(ROOT / "blueprints" / "glm51-fp8-2p2d.yaml")
T0 = dt.datetime(2026, 11, 29, 16, 20, 5, tzinfo=dt.timezone.utc)
RUN = RunIdentity(BP.name, "r0001", T0, 72)


def with_capacity(**update):
    return BP.model_copy(update={"aws": BP.aws.model_copy(update={
        "capacity": BP.aws.capacity.model_copy(update=update)})})


def test_the_placement_group_is_named_and_tagged_for_the_run():
    assert req.placement_group_request(RUN) == {
        "GroupName": "pdlift-glm51-fp8-2p2d-r0001", "Strategy": "cluster",
        "TagSpecifications": identity.tag_specifications("placement-group", RUN, "reserve",
                                                         name="pdlift-glm51-fp8-2p2d-r0001")}


def test_the_reservation_request_is_a_targeted_linux_odcr_in_the_zone_ending_after_its_hours():
    r = req.capacity_reservation_request(BP, RUN, "us-east-2b", None)
    assert r == {
        "ClientToken": identity.client_token(RUN, "reserve", "us-east-2b", 4, generation=0),
        "InstanceType": "p5en.48xlarge", "InstancePlatform": "Linux/UNIX", "AvailabilityZone": "us-east-2b",
        "Tenancy": "default", "InstanceCount": 4, "InstanceMatchCriteria": "targeted", "EndDateType": "limited",
        "EndDate": dt.datetime(2026, 11, 29, 16, tzinfo=dt.timezone.utc) + dt.timedelta(hours=49),
        "TagSpecifications": identity.tag_specifications("capacity-reservation", RUN, "reserve",
                                                         name="pdlift-glm51-fp8-2p2d-r0001-us-east-2b")}


def test_a_reservation_made_again_in_a_new_generation_gets_a_new_token_and_ends_after_its_own_start():
    later = dt.datetime(2026, 11, 30, 9, 59, 59, tzinfo=dt.timezone.utc)
    r = req.capacity_reservation_request(BP, RUN, "us-east-2a", None, Generation(2, later))
    assert r["ClientToken"] == identity.client_token(RUN, "reserve", "us-east-2a", 4, generation=2)
    assert r["ClientToken"] != req.capacity_reservation_request(BP, RUN, "us-east-2a", None)["ClientToken"]
    assert r["EndDate"] == dt.datetime(2026, 11, 30, 9, tzinfo=dt.timezone.utc) + dt.timedelta(hours=49)


def test_a_blueprint_end_time_is_the_reservations_end_in_utc():
    eastern = dt.timezone(dt.timedelta(hours=-5))
    bp = with_capacity(end_time=dt.datetime(2026, 12, 1, 8, 0, tzinfo=eastern))
    assert req.reservation_end(bp, RUN) == dt.datetime(2026, 12, 1, 13, 0, tzinfo=dt.timezone.utc)
    assert req.reservation_end(bp, RUN).tzinfo == dt.timezone.utc


def test_a_reservation_without_a_duration_holds_one_hour_past_the_hour_it_began_in():
    assert req.reservation_end(with_capacity(duration_hours=None), RUN) == \
        dt.datetime(2026, 11, 29, 18, tzinfo=dt.timezone.utc)


def test_the_capacity_block_search_covers_eight_weeks_from_now_for_the_fleet():
    assert req.capacity_block_offerings_request(with_capacity(duration_hours=None), T0) == {
        "InstanceType": "p5en.48xlarge", "InstanceCount": 4, "CapacityDurationHours": 24,
        "StartDateRange": T0, "EndDateRange": T0 + dt.timedelta(weeks=8)}
    assert req.capacity_block_offerings_request(BP, T0)["CapacityDurationHours"] == 48


def offer(oid: str, zone: str, fee: str | None, start: dt.datetime = T0) -> dict:
    o = {"CapacityBlockOfferingId": oid, "AvailabilityZone": zone, "StartDate": start}
    if fee is not None:
        o["UpfrontFee"] = fee
    return o


def test_no_offering_in_the_blueprints_zones_says_which_zones_were_searched():
    choice = req.choose_capacity_block(with_capacity(max_upfront_usd=1e9), [offer("a", "us-west-2a", "1")])
    assert choice.offering is None
    assert choice.reason == "no Capacity Block offering in us-east-2a, us-east-2b, us-east-2c"


def test_too_dear_offerings_name_the_cheapest_fee_and_the_limit():
    choice = req.choose_capacity_block(with_capacity(max_upfront_usd=20000),
                                       [offer("a", "us-east-2a", "31000.5"), offer("b", "us-east-2b", "25000")])
    assert choice.offering is None
    assert choice.reason == ("cheapest offering costs $25,000.00 upfront, above aws.capacity.max_upfront_usd "
                             "$20,000.00")


def test_an_offering_without_a_fee_is_never_bought():
    choice = req.choose_capacity_block(with_capacity(max_upfront_usd=1e9), [offer("a", "us-east-2a", None)])
    assert choice.offering is None and "cheapest offering costs $inf" in choice.reason


def test_offerings_starting_together_go_by_the_blueprints_zone_order_then_the_fee():
    bp = with_capacity(max_upfront_usd=50000)
    offers = [offer("c", "us-east-2c", "100"), offer("b2", "us-east-2b", "300"), offer("b1", "us-east-2b", "200")]
    choice = req.choose_capacity_block(bp, offers)
    assert choice.offering["CapacityBlockOfferingId"] == "b1"
    assert choice.reason == "earliest affordable offering"


def test_the_purchase_names_the_offering_and_tags_the_block():
    assert req.purchase_capacity_block_request(RUN, "cb-123") == {
        "CapacityBlockOfferingId": "cb-123", "InstancePlatform": "Linux/UNIX",
        "TagSpecifications": identity.tag_specifications("capacity-reservation", RUN, "reserve",
                                                         name="pdlift-glm51-fp8-2p2d-r0001-block")}


def test_without_network_cards_listed_only_the_ena_primary_is_attached():
    assert req.network_interfaces({}, "s", "g") == [
        {"SubnetId": "s", "Groups": ["g"], "DeleteOnTermination": True, "NetworkCardIndex": 0, "DeviceIndex": 0,
         "InterfaceType": "interface"}]


def test_cards_without_efa_only_support_get_no_efa_interface_and_cards_are_taken_in_index_order():
    info = {"NetworkCards": [{"NetworkCardIndex": 2, "InterfaceTypes": ["interface", "efa-only"]},
                             {"NetworkCardIndex": 1, "InterfaceTypes": ["interface"]},
                             {"NetworkCardIndex": 0, "InterfaceTypes": ["interface", "efa", "efa-only"]}]}
    nics = req.network_interfaces(info, "s", "g")
    assert [(n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in nics] == [
        (0, 0, "interface"), (0, 1, "efa-only"), (2, 0, "efa-only")]


def test_without_an_efa_maximum_every_card_gets_one():
    info = {"NetworkCards": [{"NetworkCardIndex": i} for i in range(3)]}
    assert len(req.network_interfaces(info, "s", "g")) == 4


def test_node_user_data_without_taints_registers_no_taint_and_quotes_its_values():
    text = req.nodeadm_user_data('c"l', "https://k", "Q0E=", "10.0.0.0/16", {"a": "1"}, [])
    assert "--register-with-taints" not in text
    assert '    name: "c\\"l"\n' in text
    assert '      - "--node-labels=a=1"\n' in text
    assert text.startswith('MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="PDLIFT-NODEADM-BOUNDARY"\n')
    assert text.endswith("--PDLIFT-NODEADM-BOUNDARY--\n")


def test_a_backslash_in_a_user_data_value_is_escaped():
    assert '    cidr: "a\\\\b"\n' in req.nodeadm_user_data("c", "e", "ca", "a\\b", {}, [])


def inputs(**update) -> req.LaunchInputs:
    base = dict(image_id="ami-1", subnet="s", security_group="g", key_pair="kp", instance_profile="",
                reservation_id=None, placement_group=None, capacity_block=False, user_data="x")
    return req.LaunchInputs(**{**base, **update})


def test_a_launch_template_without_profile_reservation_or_group_leaves_them_out():
    r = req.launch_template_request(BP, RUN, {}, inputs())
    data = r["LaunchTemplateData"]
    assert not {"IamInstanceProfile", "CapacityReservationSpecification", "Placement",
                "InstanceMarketOptions"} & set(data)
    assert r["LaunchTemplateName"] == "pdlift-glm51-fp8-2p2d-r0001"
    assert r["ClientToken"] == identity.client_token(RUN, "launch", "template", 4, "")
    assert data["MetadataOptions"] == {"HttpTokens": "required", "HttpPutResponseHopLimit": 2,
                                       "HttpEndpoint": "enabled"}
    assert (data["ImageId"], data["InstanceType"], data["KeyName"]) == ("ami-1", "p5en.48xlarge", "kp")
    assert data["TagSpecifications"] == [
        {"ResourceType": "instance", "Tags": identity.tags(RUN, "launch", name="pdlift-glm51-fp8-2p2d-r0001-node")},
        {"ResourceType": "volume", "Tags": identity.tags(RUN, "launch")}]
    assert r["TagSpecifications"] == identity.tag_specifications("launch-template", RUN, "launch",
                                                                 name="pdlift-glm51-fp8-2p2d-r0001")


@pytest.mark.parametrize("profile, field", [("arn:aws:iam::1:instance-profile/n", {"Arn": "arn:aws:iam::1:instance-profile/n"}),
                                            ("pdlift-node", {"Name": "pdlift-node"})])
def test_an_instance_profile_is_given_by_arn_or_by_name(profile, field):
    data = req.launch_template_request(BP, RUN, {}, inputs(instance_profile=profile))["LaunchTemplateData"]
    assert data["IamInstanceProfile"] == field


def test_a_launch_template_names_its_placement_group_and_its_token_follows_the_reservation():
    r = req.launch_template_request(BP, RUN, {}, inputs(placement_group="pg-1", reservation_id="cr-1"))
    assert r["LaunchTemplateData"]["Placement"] == {"GroupName": "pg-1"}
    assert r["ClientToken"] == identity.client_token(RUN, "launch", "template", 4, "cr-1")


def test_a_gang_launch_uses_the_templates_latest_version_and_a_token_per_generation():
    r = req.run_instances_request(RUN, "lt-1", 4, attempt=2, generation=1)
    assert r == {"LaunchTemplate": {"LaunchTemplateId": "lt-1", "Version": "$Latest"}, "MinCount": 4, "MaxCount": 4,
                 "ClientToken": identity.client_token(RUN, "launch", "lt-1", 4, "attempt-2", 1)}
    assert r["ClientToken"] != req.run_instances_request(RUN, "lt-1", 4, attempt=2)["ClientToken"]


# --- more boundaries ---------------------------------------------------------------------------


def test_every_worker_asks_for_the_same_reservation_end_whatever_its_clocks_zone(india_clock):
    # A retried request must carry identical parameters (EC2 refuses a reused token otherwise),
    # so the end is counted in UTC hours wherever the worker runs.
    end = req.reservation_end(BP, RUN)
    assert end == dt.datetime(2026, 11, 29, 16, tzinfo=dt.timezone.utc) + dt.timedelta(hours=49)
    assert end.utcoffset() == dt.timedelta(0)
    eastern = dt.timezone(dt.timedelta(hours=-5))
    fixed = req.reservation_end(with_capacity(end_time=dt.datetime(2026, 12, 1, 8, 0, tzinfo=eastern)), RUN)
    assert fixed.utcoffset() == dt.timedelta(0)


def test_a_run_started_mid_second_still_ends_on_a_whole_hour():
    run = RunIdentity(BP.name, "r0001", T0.replace(microsecond=123456), 72)
    assert req.reservation_end(BP, run) == dt.datetime(2026, 12, 1, 17, tzinfo=dt.timezone.utc)


def test_several_taints_are_registered_together():
    text = req.nodeadm_user_data("c", "e", "ca", "10.0.0.0/16", {"a": "1"}, ["gpu=true:NoSchedule", "x=y:NoExecute"])
    assert '      - "--register-with-taints=gpu=true:NoSchedule,x=y:NoExecute"\n' in text


def test_the_node_config_part_is_an_eks_nodeadm_document():
    text = req.nodeadm_user_data("c", "e", "ca", "10.0.0.0/16", {}, [])
    assert "\n--PDLIFT-NODEADM-BOUNDARY\nContent-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\n" \
           "kind: NodeConfig\n" in text


def test_without_a_fee_limit_an_offering_that_states_its_fee_goes_before_one_that_does_not():
    bp = with_capacity(max_upfront_usd=float("inf"))
    offers = [offer("no-fee", "us-east-2a", None), offer("fee", "us-east-2a", "900000")]
    assert req.choose_capacity_block(bp, offers).offering["CapacityBlockOfferingId"] == "fee"
