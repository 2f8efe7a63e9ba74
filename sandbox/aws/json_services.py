"""The JSON-protocol calls the front answers or patches: what pdlift needs that moto lacks.

* EKS DescribeCluster / CreateCluster: the cluster's endpoint and CA become the sandbox
  Kubernetes API's, from ``<state>/sandbox/kube/endpoint.json`` (contract item 4), once that
  file exists; until then moto's fake endpoint stays.
* SSM GetParameter for the public EKS AMI parameters (``/aws/service/eks/optimized-ami/...``):
  moto has none, and refuses to store names under ``/aws``. The answer is a stable AMI id
  per parameter name; moto launches any AMI id.
* Service Quotas GetServiceQuota for the EC2 On-Demand vCPU quotas (quotas.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

from sandbox.aws.proxy import json_body
from sandbox.aws.quotas import get_service_quota

CLUSTER_PATH = re.compile(r"^/clusters(/[^/]+)?$")
EKS_AMI_PREFIX = "/aws/service/eks/optimized-ami/"


def patch_eks(state_dir: Path, path: str, data: bytes) -> bytes:
    """Point an EKS cluster answer at the sandbox Kubernetes API, when it is up."""
    endpoint_file = state_dir / "sandbox" / "kube" / "endpoint.json"
    doc = json_body(data)
    if not CLUSTER_PATH.match(path) or not isinstance(doc, dict) or "cluster" not in doc:
        return data
    if not endpoint_file.is_file():
        return data
    kube = json.loads(endpoint_file.read_text(encoding="utf-8"))
    doc["cluster"]["endpoint"] = kube["server"]
    doc["cluster"]["certificateAuthority"] = {"data": kube["ca_data"]}
    return json.dumps(doc).encode()


def answer(service: str, region: str, account_id: str, quotas: dict[str, int],
           target: str, body: bytes) -> bytes | None:
    """The JSON answer for a call handled here, or None to forward it to moto."""
    request = json_body(body)
    if not isinstance(request, dict):
        return None
    operation = target.rsplit(".", 1)[-1]
    if service == "ssm" and operation == "GetParameter":
        name = str(request.get("Name", ""))
        if name.startswith(EKS_AMI_PREFIX) and name.endswith("/image_id"):
            return json.dumps({"Parameter": _eks_ami(name, region, account_id)}).encode()
    if service == "servicequotas" and operation == "GetServiceQuota":
        found = get_service_quota(quotas, region, account_id, request)
        if found is not None:
            return json.dumps(found).encode()
    return None


def _eks_ami(name: str, region: str, account_id: str) -> dict[str, Any]:
    digest = hashlib.sha256(f"{region}|{name}".encode()).hexdigest()
    return {
        "Name": name,
        "Type": "String",
        "Value": "ami-" + digest[:17],
        "Version": 1,
        "LastModifiedDate": int(time.time()),
        "ARN": f"arn:aws:ssm:{region}::parameter{name}",
        "DataType": "aws:ec2:image" if name.endswith("image_id") else "text",
    }
