"""Instances through the front: node addresses, console host keys, EFA layout, request log."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.sandbox.aws.fake_nodes import host_key_line
from tests.sandbox.aws.helpers import admin, error_code, launch, p5en_interfaces, subnet_in


def describe_one(ec2, instance_id: str) -> dict:
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


def test_each_instances_private_address_is_its_nodes_loopback_address(ec2):
    out = ec2.run_instances(ImageId="ami-12c6146b", InstanceType="p5en.48xlarge", MinCount=2,
                            MaxCount=2)["Instances"]
    addresses = [i["PrivateIpAddress"] for i in out]

    assert all(a.startswith("127.0.0.") for a in addresses)
    assert len(set(addresses)) == 2
    assert [describe_one(ec2, i["InstanceId"])["PrivateIpAddress"] for i in out] == addresses
    assert describe_one(ec2, out[0]["InstanceId"])["State"]["Name"] == "running"


def test_console_output_carries_the_nodes_host_keys_as_cloud_init_prints_them(ec2):
    iid = launch(ec2, 1)[0]
    text = ec2.get_console_output(InstanceId=iid)["Output"]  # botocore decodes the base64

    block = text.split("-----BEGIN SSH HOST KEY KEYS-----\n", 1)[1]
    block = block.split("-----END SSH HOST KEY KEYS-----", 1)[0]
    assert [" ".join(line.split()[:2]) for line in block.splitlines()] == [host_key_line(iid)]


def test_the_efa_interface_layout_asked_for_is_what_describe_instances_shows(ec2):
    group = ec2.describe_security_groups()["SecurityGroups"][0]["GroupId"]
    nics = p5en_interfaces(subnet_in(ec2, "us-east-2b"), group)
    iid = launch(ec2, 1, NetworkInterfaces=nics)[0]
    shown = describe_one(ec2, iid)["NetworkInterfaces"]

    layout = sorted((n["Attachment"]["NetworkCardIndex"], n["Attachment"]["DeviceIndex"],
                     n["InterfaceType"]) for n in shown)
    asked = sorted((n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in nics)
    assert layout == asked
    assert sum(n["InterfaceType"] == "efa-only" for n in shown) == 16
    assert describe_one(ec2, iid)["Placement"]["AvailabilityZone"] == "us-east-2b"


def test_the_request_log_keeps_the_launch_templates_network_interfaces(aws, ec2):
    group = ec2.describe_security_groups()["SecurityGroups"][0]["GroupId"]
    nics = p5en_interfaces(subnet_in(ec2, "us-east-2a"), group)
    template = ec2.create_launch_template(LaunchTemplateName="nodes", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "p5en.48xlarge", "NetworkInterfaces": nics,
        "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 2},
    })["LaunchTemplate"]["LaunchTemplateId"]
    ec2.run_instances(LaunchTemplate={"LaunchTemplateId": template, "Version": "$Latest"},
                      MinCount=1, MaxCount=1, ClientToken="launch-1")

    created = admin(aws, "GET", "/__sandbox/requests?action=CreateLaunchTemplate")
    runs = admin(aws, "GET", "/__sandbox/requests?action=RunInstances")
    asked = created[0]["params"]["LaunchTemplateData"]["NetworkInterfaces"]
    assert asked == nics
    assert runs[0]["params"]["LaunchTemplate"] == {"LaunchTemplateId": template,
                                                   "Version": "$Latest"}
    assert runs[0]["params"]["ClientToken"] == "launch-1"
    assert runs[0]["launch_template_data"]["NetworkInterfaces"] == nics
    assert runs[0]["launch_template_data"]["MetadataOptions"]["HttpTokens"] == "required"


def test_run_instances_with_the_same_client_token_returns_the_same_instances(ec2):
    first = launch(ec2, 2, ClientToken="gang-1")
    again = launch(ec2, 2, ClientToken="gang-1")
    with pytest.raises(ClientError) as exc:
        launch(ec2, 3, ClientToken="gang-1")

    assert again == first
    assert error_code(exc) == "IdempotentParameterMismatch"
    running = ec2.describe_instances(Filters=[{"Name": "instance-state-name",
                                               "Values": ["running", "pending"]}])
    assert sum(len(r["Instances"]) for r in running["Reservations"]) == 2


def test_dry_run_says_it_would_have_succeeded_and_creates_nothing(ec2):
    with pytest.raises(ClientError) as exc:
        ec2.create_capacity_reservation(InstanceType="p5en.48xlarge",
                                        InstancePlatform="Linux/UNIX",
                                        AvailabilityZone="us-east-2a", InstanceCount=1,
                                        DryRun=True)
    assert error_code(exc) == "DryRunOperation"
    assert ec2.describe_capacity_reservations()["CapacityReservations"] == []


def test_p5en_instance_type_reports_its_real_network_info(ec2):
    info = ec2.describe_instance_types(InstanceTypes=["p5en.48xlarge"])["InstanceTypes"][0]

    assert info["NetworkInfo"]["MaximumNetworkCards"] == 16
    assert info["NetworkInfo"]["EfaInfo"]["MaximumEfaInterfaces"] == 16
    assert info["GpuInfo"]["Gpus"][0]["Count"] == 8
    assert info["GpuInfo"]["Gpus"][0]["Name"] == "H200"
