"""NodeManager: the sandbox's GPU nodes, one real OpenSSH sshd per EC2 instance (contract items 1,
2 and 5 of sandbox/README.md).

    mgr = NodeManager(state_dir, address_base="127.0.0.11", ssh_port=2222)
    node = mgr.boot("i-0abc", user_data, tags, ["nn-1", "nn-2", "nn-3"])   # node.address = 127.0.0.11
    mgr.console_output("i-0abc")    # host keys in EC2's BEGIN/END SSH HOST KEY KEYS block
    mgr.terminate("i-0abc"); mgr.stop_all()

Each node listens on its own loopback address (base, base+1, ...; an address is reused only
once its node is gone and the port is free there), logs in the sandbox client key only
(ensure_client_key) as root (or, run as a normal user, as that user), and has the GPU-node tools
on its PATH (tools/). Faults: tools/faults.py; a watcher thread applies the two that act on sshd.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import pwd
import shutil
import signal
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from sandbox.nodes import efa_counters, profiles, records, sshd
from sandbox.nodes.records import ensure_client_key
from sandbox.nodes.tools import faults as node_faults

__all__ = ["BootedNode", "NodeManager", "ensure_client_key"]


@dataclass(frozen=True)
class BootedNode:
    instance_id: str
    address: str
    hostname: str
    ssh_port: int
    login_user: str
    host_key_lines: tuple[str, ...]
    node_dir: Path
    nvme_dir: Path
    joined: bool


@dataclass
class _Node:
    booted: BootedNode
    record: dict
    config: Path
    nvme_size_mb: int | None
    proc: subprocess.Popen | None = None
    ns: str | None = None
    unreachable: bool = False
    key_change_applied: object = None
    console: str = ""
    nodeadm_note: str = ""


class NodeManager:
    def __init__(self, state_dir: str | os.PathLike[str], address_base: str = "127.0.0.11", ssh_port: int = 2222,
                 authorized_key_file: str | os.PathLike[str] | None = None, nvme_mount: str = "/mnt/k8s-disks/0",
                 region: str = "us-east-2", max_nodes: int = 64, watch_faults: bool = True):
        self.state_dir = Path(state_dir).resolve()
        self.root = self.state_dir / "sandbox"
        self.ssh_port = ssh_port
        self.nvme_mount = nvme_mount
        self.region = region
        base = ipaddress.IPv4Address(address_base)
        self.pool = [str(base + i) for i in range(max_nodes)]
        if not all(ipaddress.IPv4Address(a).is_loopback for a in self.pool):
            raise ValueError(f"node addresses must stay in 127.0.0.0/8, got {address_base} + {max_nodes}")
        self.authorized_keys = Path(authorized_key_file) if authorized_key_file else Path(
            str(ensure_client_key(self.state_dir)) + ".pub")
        self.login_user = pwd.getpwuid(os.getuid()).pw_name
        self.namespaced = sshd.namespaces_supported()
        self.shim = records.build_shim(self.state_dir)
        for record in sshd.reap_stale(self.root / "nodes"):  # left behind by a manager that died
            record.update(state="terminated", sshd_pid=None, launcher_pid=None)
            records.write_json_atomic(Path(record["node_dir"]) / "node.json", record)
            (self.root / "joins" / f"{record['instance_id']}.json").unlink(missing_ok=True)
        self._nodes: dict[str, _Node] = {}
        self._last_console: dict[str, str] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        atexit.register(self.stop_all)  # a clean interpreter exit stops the nodes; see reap_stale
        if watch_faults:
            self._watcher = threading.Thread(target=self._watch, name="sandbox-node-faults", daemon=True)
            self._watcher.start()

    # -- contract ---------------------------------------------------------------------------------
    def boot(self, instance_id: str, user_data: str | bytes | None = None, tags: dict[str, str] | None = None,
             network_nodes: list[str] | None = None, instance_type: str = profiles.DEFAULT_INSTANCE_TYPE,
             availability_zone: str | None = None) -> BootedNode:
        with self._lock:
            if instance_id in self._nodes:
                return self._nodes[instance_id].booted
            address = self._free_address()
            hostname = records.hostname_for(address, self.region)
            node_dir = self.root / "nodes" / instance_id
            nvme_dir, bin_dir = node_dir / "nvme", node_dir / "bin"
            nvme_dir.mkdir(parents=True, exist_ok=True)
            faults = node_faults.for_node(self.state_dir, address, instance_id)
            keys = sshd.generate_host_keys(node_dir, f"root@{hostname}")
            records.write_wrappers(bin_dir, node_dir, instance_id)
            efa_counters.create(node_dir, profiles.profile(instance_type)["efa_devices"])
            # SHLVL=1: bash sources ~/.bashrc for an ssh command only at shell level 1 (bash's
            # shell.c, SSH_SOURCE_BASHRC), so the login user's rc files on this machine (pyenv's
            # rehash, which waits up to 60 s on a lock a killed session left) stay out of node
            # sessions, as on a node's AMI, whose root has no such rc files.
            env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "SHLVL": "1", "PDLIFT_SANDBOX_NODE": instance_id,
                   "PDLIFT_SANDBOX_NODE_DIR": str(node_dir), "PDLIFT_SANDBOX_ADDRESS": address,
                   "PDLIFT_SANDBOX_NVME": self.nvme_mount if self.namespaced else str(nvme_dir)}
            config = node_dir / "sshd_config"
            config.write_text(sshd.render_config(
                node_dir=node_dir, address=address, port=self.ssh_port, authorized_keys=self.authorized_keys,
                login_user=self.login_user, env=env, permit_open=[f"{a}:*" for a in ["127.0.0.1", *self.pool]]))
            booted = BootedNode(instance_id, address, hostname, self.ssh_port, self.login_user, tuple(keys),
                                node_dir, nvme_dir, joined=False)
            record = {"instance_id": instance_id, "address": address, "hostname": hostname, "ssh_port": self.ssh_port,
                      "instance_type": instance_type, "tags": dict(tags or {}), "state_dir": str(self.state_dir),
                      "node_dir": str(node_dir), "profile": profiles.profile(instance_type), "state": "booting",
                      "bind_shim": str(self.shim) if self.shim else None, "namespaced": self.namespaced,
                      "nvme_mount": env["PDLIFT_SANDBOX_NVME"], "sshd_pid": None}
            node = _Node(booted, record, config, faults.get("nvme_size_mb"))
            self._nodes[instance_id] = node
            try:
                if faults.get("unreachable"):
                    node.unreachable = True
                else:
                    self._start_sshd(node)
                node.key_change_applied = faults.get("host_key_change")
                node.record["state"] = "running"
                records.write_json_atomic(node_dir / "node.json", node.record)
                joined, node.nodeadm_note = records.write_join(
                    self.root / "joins", user_data=user_data, faults=faults, instance_id=instance_id, address=address,
                    hostname=hostname, instance_type=instance_type, region=self.region,
                    network_nodes=list(network_nodes or []), zone=availability_zone)
            except BaseException:
                self._teardown(node)
                del self._nodes[instance_id]
                raise
            node.booted = booted = BootedNode(**{**booted.__dict__, "joined": joined})
            node.console = records.console_text(hostname, keys, sshd.fingerprints(node_dir), node.nodeadm_note)
            return booted

    def terminate(self, instance_id: str) -> None:
        """Stop the node's sshd and every process of the node, delete its join record. Idempotent."""
        with self._lock:
            node = self._nodes.pop(instance_id, None)
            if node is None:
                return
            self._last_console[instance_id] = node.console
            self._teardown(node)
            node.record["state"] = "terminated"
            records.write_json_atomic(node.booted.node_dir / "node.json", node.record)
            shutil.rmtree(node.booted.nvme_dir, ignore_errors=True)  # instance store does not survive

    def console_output(self, instance_id: str) -> str:
        """The node's console (kept after terminate, as EC2 keeps it for a while)."""
        with self._lock:
            node = self._nodes.get(instance_id)
            if node is not None:
                return node.console
            if instance_id in self._last_console:
                return self._last_console[instance_id]
            raise KeyError(f"no sandbox node {instance_id}")

    def stop_all(self) -> None:
        atexit.unregister(self.stop_all)
        self._stop.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=5)
        with self._lock:
            for instance_id in list(self._nodes):
                self.terminate(instance_id)

    def __enter__(self) -> NodeManager:
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()

    # -- faults that act on sshd, and introspection for the sandbox's own tests ----------------------
    def rotate_host_key(self, instance_id: str) -> list[str]:
        """New host keys; sshd reloads them (SIGHUP re-exec, same PID, same namespace)."""
        with self._lock:
            node = self._get(instance_id)
            keys = sshd.generate_host_keys(node.booted.node_dir, f"root@{node.booted.hostname}")
            if node.proc is not None and sshd.alive(node.record["sshd_pid"]):
                os.kill(node.record["sshd_pid"], signal.SIGHUP)
                if not sshd.serves_key(node.booted.address, self.ssh_port, keys[0]):
                    raise sshd.SshdError(f"{instance_id}: sshd did not reload its new host keys")
            node.booted = BootedNode(**{**node.booted.__dict__, "host_key_lines": tuple(keys)})
            node.console = records.console_text(node.booted.hostname, keys, sshd.fingerprints(node.booted.node_dir),
                                                node.nodeadm_note)
            return keys

    def set_unreachable(self, instance_id: str, unreachable: bool) -> None:
        """Unreachable: sshd and every process of the node stop (connection refused). Reachable
        again: a fresh sshd (a size-limited NVMe tmpfs starts empty)."""
        with self._lock:
            node = self._get(instance_id)
            if unreachable and not node.unreachable:
                self._teardown(node, keep_join=True)
                node.unreachable = True
            elif not unreachable and node.unreachable:
                self._start_sshd(node)
                node.unreachable = False
            records.write_json_atomic(node.booted.node_dir / "node.json", node.record)

    def sync_faults(self) -> None:
        """Apply host_key_change and unreachable from the fault file to the running nodes."""
        with self._lock:
            for instance_id, node in list(self._nodes.items()):
                try:
                    faults = node_faults.for_node(self.state_dir, node.booted.address, instance_id)
                except ValueError:
                    continue  # a bad fault file is reported by the tools that read it
                self.set_unreachable(instance_id, bool(faults.get("unreachable")))
                change = faults.get("host_key_change")
                if change and change != node.key_change_applied:
                    self.rotate_host_key(instance_id)
                node.key_change_applied = change

    def node(self, instance_id: str) -> BootedNode:
        with self._lock:
            return self._get(instance_id).booted

    def nodes(self) -> list[BootedNode]:
        with self._lock:
            return [n.booted for n in self._nodes.values()]

    def sshd_pid(self, instance_id: str) -> int | None:
        with self._lock:
            return self._get(instance_id).record["sshd_pid"]

    def processes(self, instance_id: str) -> set[int]:
        """PIDs (host view) of every live process of the node (sshd, sessions, tools)."""
        with self._lock:
            node = self._get(instance_id)
            return sshd.node_processes(sshd_pid=node.record["sshd_pid"], ns=node.ns,
                                       marker=f"PDLIFT_SANDBOX_NODE={instance_id}".encode())

    # -- internals ---------------------------------------------------------------------------------
    def _get(self, instance_id: str) -> _Node:
        try:
            return self._nodes[instance_id]
        except KeyError:
            raise KeyError(f"no running sandbox node {instance_id}") from None

    def _free_address(self) -> str:
        taken = {n.booted.address for n in self._nodes.values()}
        for address in self.pool:
            if address in taken:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as sshd binds
                try:
                    probe.bind((address, self.ssh_port))
                except OSError:
                    continue  # something else (another sandbox, a stale sshd) holds it
            return address
        raise RuntimeError(f"no free sandbox node address among {self.pool[0]}..{self.pool[-1]} port {self.ssh_port}")

    def _start_sshd(self, node: _Node) -> None:
        b = node.booted
        log = b.node_dir / "sshd.log"
        overlay = sshd.overlay_dir(self.nvme_mount, [self.state_dir, self.authorized_keys, records.TOOLS_DIR])
        node.proc = sshd.launch(config=node.config, log=log, namespaced=self.namespaced, overlay=overlay,
                                mount_point=self.nvme_mount, nvme_dir=b.nvme_dir, nvme_size_mb=node.nvme_size_mb,
                                hostname=b.hostname.split(".")[0],
                                sys_class=efa_counters.sys_dir(b.node_dir).parent)
        try:
            pid = sshd.wait_ready(node.proc, b.address, self.ssh_port, log, self.namespaced)
        except sshd.SshdError:
            sshd.kill_all({node.proc.pid})
            node.proc.wait(timeout=5)
            raise
        node.record["sshd_pid"], node.record["launcher_pid"] = pid, node.proc.pid
        node.ns = sshd.mount_ns(pid) if self.namespaced else None
        node.record["mount_ns"] = node.ns

    def _teardown(self, node: _Node, keep_join: bool = False) -> None:
        pids = sshd.node_processes(sshd_pid=node.record["sshd_pid"], ns=node.ns,
                                   marker=f"PDLIFT_SANDBOX_NODE={node.booted.instance_id}".encode())
        if node.proc is not None:
            # sshd first (SIGTERM, bounded, then SIGKILL): as PID 1 of the node's PID namespace its
            # death takes every process of the node with it; unshare then exits and is reaped here.
            sshd.kill_all({p for p in (node.record["sshd_pid"], node.proc.pid) if p})
            try:
                node.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        sshd.kill_all(pids)  # the rest: only without namespaces can anything be left
        node.proc, node.ns = None, None
        node.record["sshd_pid"] = node.record["launcher_pid"] = None
        if not keep_join:
            (self.root / "joins" / f"{node.booted.instance_id}.json").unlink(missing_ok=True)

    def _watch(self) -> None:
        path, last = node_faults.fault_file(self.state_dir), None
        while not self._stop.wait(0.25):
            try:
                stamp = path.stat().st_mtime_ns
            except FileNotFoundError:
                stamp = None
            if stamp != last:
                last = stamp
                try:
                    self.sync_faults()
                except Exception:  # noqa: BLE001 - a fault that cannot be applied must not kill the watcher
                    continue
