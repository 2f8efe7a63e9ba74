"""Per-node faults of the sandbox GPU nodes: the schema of `<state>/sandbox/node-faults.json`.

The file is one JSON object. Its keys name nodes: a node's address (`"127.0.0.12"`), its
instance id (`"i-0abc..."`) or `"*"` (every node). A node's faults are the merge of `"*"`, then
its address, then its instance id (later wins). Each value is an object of optional faults:

    gpus: int                 nvidia-smi and nccl-tests see this many GPUs (default: the instance
                              type's, 8 on p5en)
    efa_devices: int          fi_info -p efa lists this many domains; fi_pingpong accepts only
                              those; NCCL logs "found N nics" (default 16 on p5en)
    slow_link: float          the node's network link is this many times slower (2 = half the
                              bandwidth): nccl-tests across nodes and fi_pingpong show it
    nccl_wrong: int           nccl-tests count this many wrong elements per checked row
                              (#wrong), print FAILED and exit 1
    hang: true | [tool, ...]  nccl-tests (also through mpirun) and fi_pingpong - or only the
                              named tools - block until killed (SIGTERM, SIGHUP, channel closed)
    no_efa_evidence: true     the NCCL log shows the socket transport (NET/Socket), not EFA
    host_key_change: true|int the node manager regenerates the node's host keys and reloads sshd;
                              each new value rotates again
    unreachable: true         the node manager stops the node's sshd and its processes
                              (connection refused); mpirun / fi_pingpong peers cannot reach it;
                              removing the fault boots sshd again
    never_join: true          the node never writes its Kubernetes join record (read at boot)
    nvme_size_mb: int         the node's local NVMe is a tmpfs of this size (read at boot)
    hugepages_2mi: str        the 2 MiB hugepages the node preallocated at boot, as a quantity
                              ("0": none, as on an AMI without the EFA installer's reservation);
                              its kubelet reports that as allocatable hugepages-2Mi (read at boot)

The node tools read the file on every run, so a test can change it while the nodes are up. The
node manager watches it for the faults that act on sshd itself (host_key_change, unreachable).
Write it with `write_faults` (atomic rename) so a tool never reads half a file.

Standard library only: the node tools import this module with the system python3.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

KNOWN = frozenset(
    {
        "gpus",
        "efa_devices",
        "slow_link",
        "nccl_wrong",
        "hang",
        "no_efa_evidence",
        "host_key_change",
        "unreachable",
        "never_join",
        "nvme_size_mb",
        "hugepages_2mi",
    }
)


class FaultFileError(ValueError):
    """The fault file is not what this schema describes."""


def fault_file(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / "sandbox" / "node-faults.json"


def load_all(state_dir: str | os.PathLike[str]) -> dict[str, dict]:
    """The whole fault file; {} when there is none. A half-written file is re-read briefly."""
    path = fault_file(state_dir)
    for _ in range(5):
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            time.sleep(0.02)
            continue
        if not isinstance(data, dict):
            raise FaultFileError(f"{path}: expected a JSON object keyed by node address or instance id")
        return {str(k): v for k, v in data.items() if isinstance(v, dict)}
    raise FaultFileError(f"{path}: not valid JSON")


def for_node(state_dir: str | os.PathLike[str], address: str, instance_id: str) -> dict:
    """The merged faults of one node ("*" < address < instance id)."""
    data = load_all(state_dir)
    merged: dict = {}
    for key in ("*", address, instance_id):
        merged.update(data.get(key, {}))
    unknown = set(merged) - KNOWN
    if unknown:
        raise FaultFileError(f"unknown node fault(s) {sorted(unknown)}; known: {sorted(KNOWN)}")
    return merged


def write_faults(state_dir: str | os.PathLike[str], data: dict[str, dict]) -> None:
    """Replace the fault file atomically (tools may read it at any moment)."""
    path = fault_file(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".node-faults.")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)


def set_node_faults(state_dir: str | os.PathLike[str], key: str, **faults) -> None:
    """Set (merge) faults for one key; a value of None removes that fault."""
    unknown = set(faults) - KNOWN
    if unknown:
        raise ValueError(f"unknown node fault(s) {sorted(unknown)}; known: {sorted(KNOWN)}")
    data = load_all(state_dir)
    entry = dict(data.get(key, {}))
    for name, value in faults.items():
        if value is None:
            entry.pop(name, None)
        else:
            entry[name] = value
    if entry:
        data[key] = entry
    else:
        data.pop(key, None)
    write_faults(state_dir, data)


def clear_faults(state_dir: str | os.PathLike[str]) -> None:
    write_faults(state_dir, {})


def hangs(faults: dict, tool: str) -> bool:
    """Whether the `hang` fault applies to `tool` (true = every hanging-capable tool)."""
    value = faults.get("hang")
    if isinstance(value, list):
        return tool in value
    return bool(value)
