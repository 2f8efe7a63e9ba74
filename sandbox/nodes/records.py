"""Files a sandbox node is made of, besides sshd: the client key, the tool wrappers on its PATH,
its node.json, its Kubernetes join record (contract item 2) and its EC2 console output."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from sandbox.nodes import profiles
from sandbox.nodes.userdata import NodeJoin, UserDataError, parse_user_data

TOOLS_DIR = Path(__file__).resolve().parent / "tools"
SHIM_SOURCE = Path(__file__).resolve().parent / "bindshim.c"
# executable name on the node -> (tool script, leading argument)
TOOLS = {
    "nvidia-smi": ("nvidia_smi.py", None),
    "fi_info": ("fi_info.py", None),
    "fi_pingpong": ("fi_pingpong.py", None),
    "mpirun": ("mpirun.py", None),
    "all_reduce_perf": ("nccl_tests.py", "all_reduce_perf"),
    "alltoall_perf": ("nccl_tests.py", "alltoall_perf"),
    "sendrecv_perf": ("nccl_tests.py", "sendrecv_perf"),
}


def ensure_client_key(state_dir: str | os.PathLike[str]) -> Path:
    """The sandbox SSH client key (`<state>/ssh/id_ed25519`, ed25519, no passphrase), created once.
    The orchestrator exports this path as PDLIFT_SSH_KEY_FILE; the nodes authorize its .pub."""
    key = Path(state_dir) / "ssh" / "id_ed25519"
    if key.exists() and key.with_name("id_ed25519.pub").exists():
        return key
    key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    for stale in (key, key.with_name("id_ed25519.pub")):
        stale.unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "pdlift-sandbox", "-f", str(key)],
        check=True, capture_output=True, timeout=30,
    )
    key.chmod(0o600)
    return key


def write_json_atomic(path: Path, data: dict) -> None:
    """Readers (the node tools, the Kubernetes stand-in's watcher) never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


_built_shims: dict[str, Path] = {}  # one compile per process (tests make many state dirs)


def build_shim(state_dir: Path) -> Path | None:
    """Compile the bind() shim for fi_pingpong into the state dir; None without a C compiler."""
    digest = hashlib.sha256(SHIM_SOURCE.read_bytes()).hexdigest()[:12]
    target = state_dir / "sandbox" / "lib" / f"bindshim-{digest}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    built = _built_shims.get(digest)
    try:
        if built is not None and built.exists():
            shutil.copyfile(built, tmp)
        else:
            subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(tmp), str(SHIM_SOURCE), "-ldl"],
                           check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    os.replace(tmp, target)
    _built_shims[digest] = target
    return target


def system_python() -> str:
    """The system python3 (not a pyenv shim or venv that a login shell's PATH may put first)."""
    return shutil.which("python3", path="/usr/bin:/bin:/usr/local/bin") or "python3"


def write_wrappers(bin_dir: Path, node_dir: Path, instance_id: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    python = shlex.quote(system_python())
    for name, (script, lead) in TOOLS.items():
        args = " ".join(shlex.quote(a) for a in [str(TOOLS_DIR / script), *([lead] if lead else [])])
        text = (
            "#!/bin/sh\n"
            f"# sandbox stand-in for {name} (sandbox/nodes/tools/{script}); system python3, stdlib only\n"
            f"PDLIFT_SANDBOX_NODE_DIR={shlex.quote(str(node_dir))}; export PDLIFT_SANDBOX_NODE_DIR\n"
            f"PDLIFT_SANDBOX_NODE={shlex.quote(instance_id)}; export PDLIFT_SANDBOX_NODE\n"
            f'exec {python} -B {args} "$@"\n'
        )
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)


def hostname_for(address: str, region: str) -> str:
    return f"ip-{address.replace('.', '-')}.{region}.compute.internal"


def join_record(*, instance_id: str, address: str, hostname: str, instance_type: str, region: str,
                network_nodes: list[str], join: NodeJoin, faults: dict, zone: str | None) -> dict:
    prof = profiles.profile(instance_type)
    labels = dict(join.labels)
    labels.update({
        "kubernetes.io/hostname": hostname,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/region": region,
    })
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    # EKS labels every layer DescribeInstanceTopology returns (3 on p5en, 4 on p6-b200).
    for layer, network_node in enumerate(network_nodes, start=1):
        labels[f"topology.k8s.aws/network-node-layer-{layer}"] = network_node
    gpus = int(faults.get("gpus", prof["gpus"]))
    efa = min(int(faults.get("efa_devices", len(prof["efa_devices"]))), len(prof["efa_devices"]))
    return {
        "name": hostname,
        "instance_id": instance_id,
        "address": address,
        "cluster": join.cluster,
        "labels": labels,
        "taints": list(join.taints),
        "allocatable": profiles.allocatable(prof, efa, gpus, join.max_pods or 110,
                                            str(faults.get("hugepages_2mi", profiles.HUGEPAGES_2MI))),
    }


def write_join(joins_dir: Path, *, user_data, faults: dict, **node) -> tuple[bool, str]:
    """Write the join record when the user data configures a join; (joined, nodeadm's log line)."""
    try:
        join = parse_user_data(user_data)
    except UserDataError as exc:
        return False, f"error: {exc}"
    if join is None:
        return False, "no NodeConfig in user data: not joining a cluster"
    if faults.get("never_join"):
        return False, "kubelet failed to register (never_join fault)"
    write_json_atomic(joins_dir / f"{node['instance_id']}.json", join_record(join=join, faults=faults, **node))
    return True, f"node joined cluster {join.cluster}"


def console_text(hostname: str, host_keys: list[str], fingerprints: list[str], nodeadm_note: str) -> str:
    """GetConsoleOutput as an Amazon Linux instance prints it: cloud-init's host key block."""
    stamp = time.strftime("%b %d %H:%M:%S")
    short = hostname.split(".")[0]
    lines = [
        "[    0.000000] Linux version 6.1.0-pdlift-sandbox (sandbox@pdlift) #1 SMP",
        f"[    4.120000] cloud-init[1618]: Cloud-init v. 22.2.2 running 'init' at {stamp}.",
        f"[   11.380000] nodeadm[1702]: {nodeadm_note}",
        f"<14>{stamp} {short} ec2: #############################################################",
        f"<14>{stamp} {short} ec2: -----BEGIN SSH HOST KEY FINGERPRINTS-----",
        *(f"<14>{stamp} {short} ec2: {fp}" for fp in fingerprints),
        f"<14>{stamp} {short} ec2: -----END SSH HOST KEY FINGERPRINTS-----",
        f"<14>{stamp} {short} ec2: #############################################################",
        "-----BEGIN SSH HOST KEY KEYS-----",
        *host_keys,
        "-----END SSH HOST KEY KEYS-----",
        f"[   12.940000] cloud-init[1850]: Cloud-init v. 22.2.2 finished at {stamp}. Up 12.94 seconds",
    ]
    return "\n".join(lines) + "\n"
