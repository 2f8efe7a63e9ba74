"""EKS, STS, IAM, SSM and Service Quotas through the same sandbox endpoint."""

from __future__ import annotations

import base64
import json

import pytest
from botocore.exceptions import ClientError

from tests.sandbox.aws.helpers import NO_RETRIES, admin


def client(aws, boto_session, service: str):
    return boto_session.client(service, endpoint_url=aws.url, config=NO_RETRIES)


def make_cluster(aws, boto_session) -> None:
    ec2 = client(aws, boto_session, "ec2")
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    client(aws, boto_session, "eks").create_cluster(
        name="pd", roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": [subnet]})


def test_eks_describe_cluster_points_at_the_sandbox_kubernetes_api(aws, boto_session):
    make_cluster(aws, boto_session)
    ca_pem = b"-----BEGIN CERTIFICATE-----\nsandbox\n-----END CERTIFICATE-----\n"
    kube = aws.state_dir / "sandbox" / "kube"
    kube.mkdir(parents=True, exist_ok=True)
    (kube / "endpoint.json").write_text(json.dumps({
        "server": "https://127.0.0.1:6443", "ca_file": str(kube / "ca.crt"),
        "ca_data": base64.b64encode(ca_pem).decode()}))

    cluster = client(aws, boto_session, "eks").describe_cluster(name="pd")["cluster"]

    assert cluster["endpoint"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["certificateAuthority"]["data"]) == ca_pem


def test_eks_keeps_motos_answer_until_the_kubernetes_stand_in_is_up(aws, boto_session):
    make_cluster(aws, boto_session)
    cluster = client(aws, boto_session, "eks").describe_cluster(name="pd")["cluster"]
    assert cluster["status"] == "ACTIVE"
    assert not cluster["endpoint"].startswith("https://127.")


def test_sts_and_iam_answer_through_the_same_endpoint(aws, boto_session):
    identity = client(aws, boto_session, "sts").get_caller_identity()
    role = client(aws, boto_session, "iam").create_role(
        RoleName="node", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17",
                                                              "Statement": []}))["Role"]
    assert identity["Account"] == "123456789012"
    assert role["Arn"] == "arn:aws:iam::123456789012:role/node"


def test_the_eks_gpu_ami_parameter_resolves_to_a_stable_ami(aws, boto_session):
    ssm = client(aws, boto_session, "ssm")
    name = ("/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/nvidia/recommended/"
            "image_id")
    first = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    assert first.startswith("ami-")
    assert ssm.get_parameter(Name=name)["Parameter"]["Value"] == first
    with pytest.raises(ClientError) as exc:
        ssm.get_parameter(Name="/not/there")
    assert exc.value.response["Error"]["Code"] == "ParameterNotFound"


def test_the_p_instance_vcpu_quota_is_readable_from_service_quotas(aws, boto_session):
    quotas = client(aws, boto_session, "service-quotas")
    quota = quotas.get_service_quota(ServiceCode="ec2", QuotaCode="L-417A185B")["Quota"]
    assert quota["Value"] == 1536.0
    assert quota["QuotaName"] == "Running On-Demand P instances"


def test_every_request_is_logged_with_its_service_and_action(aws, boto_session):
    client(aws, boto_session, "sts").get_caller_identity()
    client(aws, boto_session, "ssm").describe_parameters()
    logged = [(e["service"], e.get("action")) for e in admin(aws, "GET", "/__sandbox/requests")]
    assert logged == [("sts", "GetCallerIdentity"), ("ssm", "DescribeParameters")]
