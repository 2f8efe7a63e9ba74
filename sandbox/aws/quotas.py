"""On-Demand vCPU quotas: Service Quotas GetServiceQuota for EC2, and VcpuLimitExceeded.

moto's Service Quotas knows only VPC quotas. EC2 counts running On-Demand vCPUs per instance
bucket (P, G/VT, standard, ...) against a per-Region quota; instances in a Capacity Block do
not count. The quota values come from ``vcpu_quotas`` in the configuration.
"""

from __future__ import annotations

from typing import Any

from sandbox.aws.render import Ec2Error

# Quota code -> (quota name, instance families it covers).
BUCKETS: dict[str, tuple[str, str]] = {
    "L-417A185B": ("Running On-Demand P instances", "p"),
    "L-DB2E81BA": ("Running On-Demand G and VT instances", "g,vt"),
    "L-1216C47A": ("Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
                   "a,c,d,h,i,m,r,t,z"),
    "L-7295265B": ("Running On-Demand X instances", "x"),
    "L-74FC7D96": ("Running On-Demand F instances", "f"),
    "L-1945791B": ("Running On-Demand Inf instances", "inf"),
    "L-2C3B7624": ("Running On-Demand Trn instances", "trn"),
}
DEFAULT_QUOTAS = {"L-417A185B": 1536, "L-DB2E81BA": 768, "L-1216C47A": 4096,
                  "L-7295265B": 1024, "L-74FC7D96": 176, "L-1945791B": 512, "L-2C3B7624": 1024}


def bucket_of(instance_type: str) -> str | None:
    """The quota code whose bucket holds ``instance_type`` (by its family letters)."""
    family = instance_type.split(".", 1)[0]
    letters = "".join(ch for ch in family if ch.isalpha()).lower()
    best: tuple[int, str] | None = None
    for code, (_, prefixes) in BUCKETS.items():
        for prefix in prefixes.split(","):
            if letters.startswith(prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), code)
    return best[1] if best else None


def check_vcpus(quotas: dict[str, int], instance_type: str, vcpus_each: int, count: int,
                running: list[tuple[str, int]]) -> None:
    """Raise VcpuLimitExceeded when ``count`` more instances would pass the bucket's quota.

    ``running``: (instance type, vCPUs) of the On-Demand instances running now.
    """
    code = bucket_of(instance_type)
    if code is None or code not in quotas:
        return
    used = sum(v for t, v in running if bucket_of(t) == code)
    if used + vcpus_each * count > quotas[code]:
        raise Ec2Error(
            "VcpuLimitExceeded",
            f"You have requested more vCPU capacity than your current vCPU limit of "
            f"{quotas[code]} allows for the instance bucket that the specified instance type "
            f"belongs to ({BUCKETS[code][0]}: {used} in use, {vcpus_each * count} asked). "
            "Please visit http://aws.amazon.com/contact-us/ec2-request to request an "
            "adjustment to this limit.",
        )


def get_service_quota(quotas: dict[str, int], region: str, account_id: str,
                      body: dict[str, Any]) -> dict[str, Any] | None:
    """The GetServiceQuota answer for an EC2 vCPU quota; None for anything else (-> moto)."""
    code = body.get("QuotaCode")
    if body.get("ServiceCode") != "ec2" or code not in BUCKETS:
        return None
    return {"Quota": {
        "ServiceCode": "ec2",
        "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
        "QuotaArn": f"arn:aws:servicequotas:{region}:{account_id}:ec2/{code}",
        "QuotaCode": code,
        "QuotaName": BUCKETS[code][0],
        "Value": float(quotas.get(code, DEFAULT_QUOTAS[code])),
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }}
