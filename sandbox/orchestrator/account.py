"""What a real AWS account would already hold for the sandbox blueprint, created with boto3.

pdlift expects to find, not create: a VPC with a subnet per AZ (tagged Name=<blueprint subnet>),
the EFA security group (all traffic in and out to itself, as EFA requires), the SSH key pair,
the EKS cluster, and the SSM parameter naming the EKS AL2023 NVIDIA AMI. Every step looks first
and creates only what is missing, so `up` can run it again.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

VPC_NAME = "pdlift-sandbox"
VPC_CIDR = "10.0.0.0/16"
EKS_VERSION = "1.33"
EKS_ROLE = "pdlift-sandbox-eks-cluster"
# An AL2023 x86_64 AMI moto ships for us-east-2; it stands in for the EKS NVIDIA AMI.
FALLBACK_AMI = "ami-070db52ff58e36a5a"


def client_key(state_dir: Path) -> Path:
    """The SSH client key sandbox nodes authorise (PDLIFT_SSH_KEY_FILE).

    Made by the node manager when it is built; until then, the same kind of key here."""
    try:
        from sandbox.nodes.manager import ensure_client_key
    except ImportError:
        ensure_client_key = None
    if ensure_client_key is not None:
        return Path(ensure_client_key(state_dir))
    key = state_dir / "ssh" / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        keygen = shutil.which("ssh-keygen") or "ssh-keygen"
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", "pdlift-sandbox",
                        "-f", str(key)], check=True, timeout=30)
    return key


def _clients(endpoint: str, region: str, access_key: str, secret_key: str) -> dict:
    config = Config(connect_timeout=3, read_timeout=30, retries={"max_attempts": 2})
    return {svc: boto3.client(svc, endpoint_url=endpoint, region_name=region, config=config,
                              aws_access_key_id=access_key, aws_secret_access_key=secret_key)
            for svc in ("ec2", "iam", "eks", "ssm")}


def _by_name(items: list[dict], name: str) -> dict | None:
    for item in items:
        if {"Key": "Name", "Value": name} in item.get("Tags", []):
            return item
    return None


def _tag(ec2, resource_id: str, name: str) -> None:
    ec2.create_tags(Resources=[resource_id], Tags=[{"Key": "Name", "Value": name},
                                                  {"Key": "pdlift:sandbox", "Value": "true"}])


def _vpc(ec2) -> str:
    found = _by_name(ec2.describe_vpcs()["Vpcs"], VPC_NAME)
    if found:
        return found["VpcId"]
    vpc_id = ec2.create_vpc(CidrBlock=VPC_CIDR)["Vpc"]["VpcId"]
    _tag(ec2, vpc_id, VPC_NAME)
    return vpc_id


def _subnets(ec2, vpc_id: str, wanted: dict[str, str]) -> dict[str, str]:
    existing = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Subnets"]
    ids = {}
    for i, (zone, name) in enumerate(sorted(wanted.items())):
        found = _by_name(existing, name)
        if not found:
            found = ec2.create_subnet(VpcId=vpc_id, CidrBlock=f"10.0.{16 * i}.0/20",
                                      AvailabilityZone=zone)["Subnet"]
            _tag(ec2, found["SubnetId"], name)
        ids[zone] = found["SubnetId"]
    return ids


def _efa_group(ec2, vpc_id: str, name: str) -> str:
    found = ec2.describe_security_groups(Filters=[
        {"Name": "group-name", "Values": [name]}, {"Name": "vpc-id", "Values": [vpc_id]}])
    if found["SecurityGroups"]:
        return found["SecurityGroups"][0]["GroupId"]
    sg = ec2.create_security_group(GroupName=name, VpcId=vpc_id,
                                   Description="EFA: all traffic to and from itself")["GroupId"]
    _tag(ec2, sg, name)
    self_ref = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": sg}]}]
    ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=self_ref)
    ec2.authorize_security_group_egress(GroupId=sg, IpPermissions=self_ref)
    return sg


def _key_pair(ec2, name: str, public_key: bytes) -> None:
    try:
        ec2.describe_key_pairs(KeyNames=[name])
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "InvalidKeyPair.NotFound":
            raise
        ec2.import_key_pair(KeyName=name, PublicKeyMaterial=public_key)


def _eks_cluster(iam, eks, name: str, subnet_ids: list[str], sg: str) -> str:
    try:
        return eks.describe_cluster(name=name)["cluster"]["arn"]
    except eks.exceptions.ResourceNotFoundException:
        pass
    try:
        role = iam.get_role(RoleName=EKS_ROLE)["Role"]["Arn"]
    except iam.exceptions.NoSuchEntityException:
        trust = ('{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":'
                 '{"Service":"eks.amazonaws.com"},"Action":"sts:AssumeRole"}]}')
        role = iam.create_role(RoleName=EKS_ROLE, AssumeRolePolicyDocument=trust)["Role"]["Arn"]
    return eks.create_cluster(
        name=name, version=EKS_VERSION, roleArn=role,
        resourcesVpcConfig={"subnetIds": subnet_ids, "securityGroupIds": [sg]},
    )["cluster"]["arn"]


def _ami_parameter(ssm, name: str) -> str:
    """'present' if the endpoint answers for it, 'created', or why it is not available."""
    try:
        ssm.get_parameter(Name=name)
        return "present"
    except ssm.exceptions.ParameterNotFound:
        pass
    try:
        ssm.put_parameter(Name=name, Value=FALLBACK_AMI, Type="String")
        return "created"
    except ClientError as exc:  # moto refuses /aws/... names, as AWS does for accounts
        return f"unavailable ({exc.response['Error']['Code']})"


def provision(endpoint: str, bp, public_key: bytes, access_key: str, secret_key: str) -> dict:
    """Create what the blueprint expects to find; returns the ids (for fixtures and `up`)."""
    c = _clients(endpoint, bp.aws.region, access_key, secret_key)
    ec2 = c["ec2"]
    vpc_id = _vpc(ec2)
    subnets = _subnets(ec2, vpc_id, dict(bp.aws.subnets))
    sg = _efa_group(ec2, vpc_id, bp.aws.security_group)
    _key_pair(ec2, bp.aws.ssh.key_pair, public_key)
    cluster = _eks_cluster(c["iam"], c["eks"], bp.aws.eks.cluster, list(subnets.values()), sg)
    return {"vpc_id": vpc_id, "subnets": subnets, "security_group_id": sg,
            "key_pair": bp.aws.ssh.key_pair, "eks_cluster_arn": cluster,
            "ami_parameter": _ami_parameter(c["ssm"], bp.aws.eks.ami_ssm_parameter)}
