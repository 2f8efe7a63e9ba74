"""Run the Kubernetes API stand-in: ``python -m sandbox.kube --state-dir DIR [--port P]``.

Writes ``<state>/sandbox/kube/{kubeconfig,endpoint.json,ca.crt,server.pid}`` once serving,
prints ``kube: serving https://HOST:PORT`` and stops (killing its pods) on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
import threading
from pathlib import Path

from sandbox.kube.config import Settings
from sandbox.kube.server import KubeApp


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sandbox.kube", description=__doc__)
    p.add_argument("--state-dir", type=Path,
                   default=Path(os.environ.get("PDLIFT_STATE_DIR", ".pdlift")))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--cluster-name", default=None)
    p.add_argument("--sts-endpoint", default=None,
                   help="STS endpoint tokens must be presigned for (default: $AWS_ENDPOINT_URL_STS "
                        "or <state>/sandbox/aws/endpoint.json)")
    p.add_argument("--allowed-image", action="append", default=None,
                   help="fnmatch pattern of pullable images (repeatable; digests always pull)")
    p.add_argument("--no-system-node", action="store_true")
    p.add_argument("--system-node-address", default=None,
                   help="the CPU node's address (default 127.0.0.10): routers and other CPU pods bind it, so "
                        "two sandboxes side by side each need their own")
    args = p.parse_args(argv)
    if not ipaddress.ip_address(args.host).is_loopback:
        p.error("the sandbox listens on loopback addresses only")
    if args.system_node_address and not ipaddress.ip_address(args.system_node_address).is_loopback:
        p.error("the system node's address must be a loopback address")
    settings = Settings.load(args.state_dir.resolve(), host=args.host, port=args.port,
                             cluster_name=args.cluster_name, sts_endpoint=args.sts_endpoint,
                             allowed_images=args.allowed_image,
                             system_node=False if args.no_system_node else None,
                             system_node_address=args.system_node_address)
    app = KubeApp(settings)
    app.start()
    stopping = threading.Event()

    def stop(signum, frame):
        stopping.set()
        threading.Thread(target=app.httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"kube: serving https://{settings.host}:{app.port}", flush=True)
    app.serve_forever()
    app.stop()
    (settings.kube_dir / "server.pid").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
