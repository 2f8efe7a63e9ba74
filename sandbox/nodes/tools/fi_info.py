#!/usr/bin/env python3
"""Sandbox `fi_info`: `-p efa` (or FI_PROVIDER=efa) lists the node's EFA domains in libfabric's
format (`rdmapNs0-rdm` for FI_EP_RDM, `rdmapNs0-dgram` for FI_EP_DGRAM; 16 on a p5en, fewer with
an `efa_devices` fault). Every other invocation is the real /usr/bin/fi_info, unchanged."""

from __future__ import annotations

import getopt
import os
import sys

import toolkit

REAL = os.environ.get("PDLIFT_SANDBOX_REAL_FI_INFO", "/usr/bin/fi_info")
EP_TYPES = {"FI_EP_RDM": "rdm", "FI_EP_DGRAM": "dgram"}
ENODATA = 61


def no_data() -> int:
    # what libfabric's fi_info prints when fi_getinfo() matches nothing; exit status is -ret.
    print(f"fi_getinfo: -{ENODATA}", file=sys.stderr)
    return ENODATA


def efa_listing(node: toolkit.Node, ep_type: str | None, domain: str | None) -> int:
    if ep_type is not None and ep_type not in EP_TYPES:
        return no_data()  # EFA offers no FI_EP_MSG endpoints
    kinds = [EP_TYPES[ep_type]] if ep_type else ["rdm", "dgram"]
    version = node.profile.get("efa_provider_version", "122.0")
    printed = 0
    for kind in kinds:
        for dev in node.efa_domains():
            name = f"{dev}-{kind}"
            if domain is not None and domain != name:
                continue
            print("provider: efa")
            print("    fabric: efa")
            print(f"    domain: {name}")
            print(f"    version: {version}")
            print(f"    type: FI_EP_{kind.upper()}")
            print("    protocol: FI_PROTO_EFA")
            printed += 1
    return 0 if printed else no_data()


def main(argv: list[str]) -> int:
    try:
        opts, _ = getopt.gnu_getopt(
            argv, "p:t:d:f:n:P:c:m:a:e:lhv", ["provider=", "ep_type=", "domain=", "fabric=", "version", "list"]
        )
    except getopt.GetoptError:
        opts = []
    provider = os.environ.get("FI_PROVIDER")
    ep_type = domain = None
    for opt, val in opts:
        if opt in ("-p", "--provider"):
            provider = val
        elif opt in ("-t", "--ep_type"):
            ep_type = val
        elif opt in ("-d", "--domain"):
            domain = val
        elif opt in ("-l", "--list", "--version", "-h", "-e"):
            provider = None  # informational: the real binary answers
            break
    if provider == "efa":
        return efa_listing(toolkit.this_node(), ep_type, domain)
    os.execv(REAL, [REAL, *argv])
    return 127  # not reached


if __name__ == "__main__":
    toolkit.run_tool(main, sys.argv[1:])
