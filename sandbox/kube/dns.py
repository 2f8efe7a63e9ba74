"""Cluster DNS for the sandbox, which has none: pod and Service names -> node addresses.

Pods with ``hostname`` and ``subdomain`` are ``<hostname>.<subdomain>.<namespace>``; Services
with a selector are ``<service>.<namespace>`` (the address of a selected pod, Ready ones
first: there are no ClusterIPs to route to). The same table is written to
``<state>/sandbox/hosts.json``, where the engines look names up; the ``.svc`` and
``.svc.cluster.local`` forms resolve to the same entries.
"""

from __future__ import annotations

import json
from pathlib import Path

from sandbox.kube.nodes import node_address
from sandbox.kube.workloads import pod_ready


def hosts_table(pods: list[dict], services: list[dict], nodes: dict[str, dict]) -> dict[str, str]:
    addresses = {name: node_address(n) for name, n in nodes.items()}
    placed = [(p, addresses.get(p["spec"].get("nodeName") or "")) for p in pods]
    placed = sorted([(p, a) for p, a in placed if a],
                    key=lambda pa: (not pod_ready(pa[0]), pa[0]["metadata"]["name"]))
    table: dict[str, str] = {}
    for p, addr in placed:
        spec, ns = p["spec"], p["metadata"]["namespace"]
        if spec.get("hostname") and spec.get("subdomain"):
            table.setdefault(f"{spec['hostname']}.{spec['subdomain']}.{ns}", addr)
    for svc in services:
        selector = (svc.get("spec") or {}).get("selector")
        ns = svc["metadata"]["namespace"]
        if not selector:
            continue
        for p, addr in placed:
            labels = p["metadata"].get("labels") or {}
            if p["metadata"]["namespace"] == ns and all(labels.get(k) == v
                                                        for k, v in selector.items()):
                table.setdefault(f"{svc['metadata']['name']}.{ns}", addr)
                break
    return table


def resolve(table: dict[str, str], host: str) -> str | None:
    name = host.lower().rstrip(".")
    for suffix in (".svc.cluster.local", ".svc"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return table.get(name)


class HostsFile:
    def __init__(self, path: Path):
        self.path = path
        self._written: dict | None = None

    def write(self, table: dict[str, str]) -> None:
        if table == self._written:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
        tmp.replace(self.path)
        self._written = table
