"""``python -m sandbox.aws --state-dir DIR --port P``: serve the sandbox AWS endpoint until
SIGTERM (or SIGINT). Ready when ``GET /__sandbox/health`` answers 200."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import sys
import threading
from pathlib import Path

from sandbox.aws.config import load_config
from sandbox.aws.endpoint import AwsEndpoint
from sandbox.aws.nodes import DEFAULT_MANAGER, load_node_manager


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sandbox.aws", description=__doc__)
    p.add_argument("--state-dir", required=True, type=Path,
                   help="the sandbox state directory ($PDLIFT_STATE_DIR)")
    p.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    p.add_argument("--port", type=int, default=0, help="port (0: pick a free one)")
    p.add_argument("--moto-port", type=int, default=0, help="moto's own port (0: free)")
    p.add_argument("--node-address-base", default="127.0.0.11",
                   help="first node address; each instance gets the next one")
    p.add_argument("--ssh-port", type=int, default=2222, help="SSH port of every node")
    p.add_argument("--config", type=Path, help="YAML: capacity per AZ, offerings, timings")
    p.add_argument("--node-manager", default=DEFAULT_MANAGER,
                   help="module:Class building the nodes (default: %(default)s)")
    p.add_argument("--no-nodes", action="store_true",
                   help="launch instances without booting nodes (API-only tests)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not ipaddress.ip_address(args.host).is_loopback:
        print(f"sandbox.aws: refusing {args.host}: the sandbox binds loopback addresses only",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = load_config(args.config)
    nodes = None if args.no_nodes else load_node_manager(
        args.node_manager, args.state_dir, args.node_address_base, args.ssh_port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    endpoint = AwsEndpoint(args.state_dir, args.host, args.port, config, nodes,
                           args.moto_port).start()
    print(f"sandbox AWS endpoint on {endpoint.url}", file=sys.stderr, flush=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        endpoint.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
