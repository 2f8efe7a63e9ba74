#!/usr/bin/env python3
"""Benchmark: wall time of the fabric validation stage on 2, 4 and 8 sandbox GPU nodes.

Boots the nodes with the sandbox node manager (real sshd each, on loopback, a temporary state
dir), pins their host keys from the console output, and runs the stage's procedure
(``tasks.stages.fabric.validate``) exactly as the flow does, without EC2 (no replacement).
The blueprint's fabric floors are used, except the fi_pingpong latency limit, which a loaded
shared CPU cannot meet over the tcp provider (override with --max-latency-us).

    .venv/bin/python scripts/bench/fabric_walltime.py [--nodes 2 4 8] [--fault slow_link=2]
    [--report FILE]   # markdown report of the last run

No external peer (it times pdlift's stage alone on 2, 4 and 8 nodes): nothing to install beyond
``scripts/setup`` (sshd, libfabric's fi_pingpong, cc).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import peers  # noqa: E402  (standard library only)

if __name__ == "__main__":
    peers.run_in_repo_venv(__file__)

from blueprints.loader import load_blueprint  # noqa: E402
from sandbox.nodes import NodeManager  # noqa: E402
from sandbox.nodes.tools import faults  # noqa: E402
from tasks.adapters.ssh import NodeShell, SshSettings  # noqa: E402
from tasks.parsing.console_output import parse_console_output  # noqa: E402
from tasks.planning.fabric import report as fabric_report  # noqa: E402
from tasks.planning.records import Node  # noqa: E402
from tasks.stages import fabric  # noqa: E402
from tasks.stages.fabric_exec import Runner  # noqa: E402
from tasks.stages.fabric_results import ResultsDir  # noqa: E402
from sandbox.ports import free_port  # noqa: E402


def run_once(count: int, spec, fault: dict | None, report: Path | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="pdlift-fabric-bench-") as tmp:
        state = Path(tmp)
        manager = NodeManager(state, address_base="127.0.1.11", ssh_port=free_port())
        try:
            booted = [manager.boot(f"i-bench{i:04d}", None, {}, ["nn-1", "nn-2", f"nn-{3 + i // 4}"])
                      for i in range(count)]
            if fault:
                faults.set_node_faults(state, booted[-1].instance_id, **fault)
            nodes = [Node(b.instance_id, b.address, "prefill" if i < count // 2 else "decode",
                                tuple(parse_console_output(manager.console_output(b.instance_id))))
                     for i, b in enumerate(booted)]
            settings = SshSettings(user=booted[0].login_user, key_file=str(state / "ssh" / "id_ed25519"),
                                   port=manager.ssh_port, connect_timeout_s=5)
            results = ResultsDir(None)
            start = time.monotonic()
            with NodeShell(settings) as shell:
                outcome = fabric.validate(spec, nodes, Runner(shell, f"bench{count}", results.keep))
            seconds = time.monotonic() - start
            if report is not None:
                report.write_text(fabric_report.render(outcome, spec, "bench", f"bench-{count}-nodes"))
            layers = {layer.name: round(layer.seconds, 1) for layer in outcome.passes[-1].layers}
            return {"nodes": count, "seconds": round(seconds, 1), "passed": outcome.passed,
                    "commands": len(results.tests), "layers": layers,
                    "rounds": next((la.rounds for la in outcome.passes[-1].layers if la.name == "pairwise"), 0)}
        finally:
            manager.stop_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--blueprint", default=str(ROOT / "blueprints" / "sandbox-2p2d.yaml"))
    parser.add_argument("--max-latency-us", type=float, default=1e6)
    parser.add_argument("--fault", action="append", default=[], help="NAME=VALUE on the last node, e.g. slow_link=2")
    parser.add_argument("--report", type=Path, default=None)
    args = parser.parse_args(argv)
    fault = {k: json.loads(v) for k, v in (f.split("=", 1) for f in args.fault)} or None
    spec = load_blueprint(args.blueprint).fabric.model_copy(update={"max_pingpong_latency_us": args.max_latency_us})
    for count in args.nodes:
        print(json.dumps(run_once(count, spec, fault, args.report)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
