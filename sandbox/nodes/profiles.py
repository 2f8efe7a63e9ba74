"""What each sandbox node pretends to be: the published shape of the GPU instance types.

p5en.48xlarge: 8 x NVIDIA H200 (141 GB = 143771 MiB), 16 EFA devices, 3200 Gbps, 192 vCPU,
2048 GiB. p5.48xlarge: 8 x H100 80GB HBM3 (81559 MiB), 32 EFA devices, 3200 Gbps.
The GPU PCI buses are those of a p5 (0x53, 0x64, ... 0xca); the EFA device names follow the
`rdmap<bus>s0` pattern of EFA on p5/p5en. The node's tools read the profile from its node.json.
"""

from __future__ import annotations

GPU_BUS = [0x53, 0x64, 0x75, 0x86, 0x97, 0xA8, 0xB9, 0xCA]


def _efa_names(count: int) -> list[str]:
    # groups of four NICs beside each pair of GPUs' PCIe switches
    buses = [base + i for base in (79, 96, 113, 130, 147, 164, 181, 198) for i in range(4)]
    return [f"rdmap{bus}s0" for bus in buses[:count]]


PROFILES: dict[str, dict] = {
    "p5en.48xlarge": {
        "gpus": 8,
        "gpu_name": "NVIDIA H200",
        "gpu_memory_mib": 143771,
        "gpu_bus": GPU_BUS,
        "efa_devices": _efa_names(16),
        "link_gbps": 3200,
        "vcpus": 192,
        "memory_gib": 2048,
        "driver_version": "570.172.08",
        "cuda_version": "12.8",
        "efa_provider_version": "122.0",
    },
    "p5.48xlarge": {
        "gpus": 8,
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "gpu_memory_mib": 81559,
        "gpu_bus": GPU_BUS,
        "efa_devices": _efa_names(32),
        "link_gbps": 3200,
        "vcpus": 192,
        "memory_gib": 2048,
        "driver_version": "570.172.08",
        "cuda_version": "12.8",
        "efa_provider_version": "122.0",
    },
}

DEFAULT_INSTANCE_TYPE = "p5en.48xlarge"

# The 2 MiB hugepages a node preallocates at boot. The kubelet reports hugepages-<size> only as
# the kernel holds them ("huge pages must be pre-allocated"; Kubernetes "Manage HugePages"; EKS
# user guide "Configure hugepages in Amazon EKS clusters"): the EFA installer on the EKS
# accelerated AMI reserves a pool for libfabric (ofiwg/libfabric#9739: "If you have EFA installer
# installed on your instance, you should be able to see there are huge page reserved"). A node
# without that pool (fault hugepages_2mi: "0") reports 0 and engine pods cannot schedule on it.
HUGEPAGES_2MI = "10Gi"


def profile(instance_type: str) -> dict:
    """The profile of `instance_type`; unknown types get the p5en shape (the sandbox's only GPU)."""
    return dict(PROFILES.get(instance_type, PROFILES[DEFAULT_INSTANCE_TYPE]))


def allocatable(prof: dict, efa_devices: int, gpus: int, max_pods: int,
                hugepages_2mi: str = HUGEPAGES_2MI) -> dict[str, str]:
    """Node allocatable as the kubelet on an EKS GPU node would report it."""
    reserved_cpu_m = 550  # EKS AMI kube-reserved at 192 vCPU, roughly
    return {
        "cpu": f"{prof['vcpus'] * 1000 - reserved_cpu_m}m",
        "memory": f"{(prof['memory_gib'] - 18) * 1024 * 1024}Ki",
        "ephemeral-storage": "95491281146",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": hugepages_2mi,
        "nvidia.com/gpu": str(gpus),
        "vpc.amazonaws.com/efa": str(efa_devices),
        "pods": str(max_pods),
    }
