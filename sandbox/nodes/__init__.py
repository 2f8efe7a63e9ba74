"""Sandbox GPU nodes: one real OpenSSH sshd per EC2 instance, on its own loopback address, with
the GPU-node tools (nvidia-smi, fi_info/fi_pingpong over libfabric, mpirun + nccl-tests) on its
PATH and per-node faults. See manager.py (NodeManager) and tools/faults.py (fault schema)."""

from sandbox.nodes.manager import BootedNode, NodeManager, ensure_client_key

__all__ = ["BootedNode", "NodeManager", "ensure_client_key"]
