"""`pdlift stage-weights BLUEPRINT [--run-id R | --nodes NODES.json]` and `pdlift weights manifest s3://...`."""

from __future__ import annotations

import argparse
import json
import sys
import time

from cli.common import add_run_id, before_flow
from tasks.errors import ConfigError


class _Bar:
    """The staging progress on stderr: one redrawn line on a terminal, a line per 10 s otherwise."""

    def __init__(self, stream=None):
        stream = stream or sys.stderr  # looked up now, not at import: stderr may have been replaced
        self.stream, self.tty, self._last = stream, stream.isatty(), 0.0
        self.last: list = []  # the newest snapshot: how every node ended

    def __call__(self, snapshot) -> None:
        from tasks.planning.staging_progress import render_bar

        self.last = snapshot
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r" + render_bar(snapshot))
        elif now - self._last >= 10:
            self.stream.write(render_bar(snapshot) + "\n")
        else:
            return
        self._last = now
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


def load_nodes(path: str) -> list:
    """Nodes from a JSON file: a list of {name, address, host_keys: [...], port?}."""
    from tasks.adapters.ssh import SshNode

    try:
        with open(path) as f:
            listed = json.load(f)
        return [SshNode(n["name"], n["address"], tuple(n.get("host_keys", ())), n.get("port")) for n in listed]
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from e
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{path}: expected a JSON list of {{\"name\", \"address\", \"host_keys\": [...]}} "
                          f"({type(e).__name__}: {e})") from e


def _cmd_stage_weights(args: argparse.Namespace) -> int:
    from flows.weights import weights_flow
    from tasks import weights
    from tasks.planning.staging_progress import render_bar, throughput_rows

    nodes = load_nodes(args.nodes) if args.nodes else None
    before_flow(args.blueprint)
    bar = _Bar()
    try:
        with weights.progress_listener(bar):
            weights_flow(args.blueprint, args.run_id, nodes=nodes, write_manifest=args.write_manifest)
    finally:
        bar.close()
    print(render_bar(bar.last))
    for row in throughput_rows(bar.last):
        print(f"  {row['node']:<24} {row['files']:>9} files {row['fetched_gb']:>8.2f} GB fetched "
              f"{row['seconds']:>7.1f} s {row['mb_per_s']:>8.1f} MB/s")
    return 0


def _cmd_weights_manifest(args: argparse.Namespace) -> int:
    from tasks.adapters.s3 import write_hash_file
    from tasks.planning.staging import HASH_FILE
    from tasks.wiring import RegionWiring

    def hashed(key: str, size: int) -> None:
        print(f"hashed {key} ({size / 1e6:.1f} MB)", file=sys.stderr)

    doc = write_hash_file(RegionWiring(args.region).weight_store(args.parallel), args.uri, hashed)
    uri = args.uri if args.uri.endswith("/") else args.uri + "/"
    print(f"{uri}{HASH_FILE}: {len(doc['objects'])} objects, SHA-256")
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("stage-weights", help="stage the model weights from S3 to every node's NVMe")
    p.add_argument("blueprint")
    add_run_id(p, "stage onto this run's fleet (default: derived from the blueprint); the stage is recorded")
    p.add_argument("--nodes", default=None,
                   help='instead of the run\'s fleet: a JSON list of {"name", "address", "host_keys": [...]} '
                        "(nothing is recorded)")
    p.add_argument("--write-manifest", action="store_true",
                   help="hash objects without a checksum first (writes pdlift-manifest.json)")
    handlers["stage-weights"] = _cmd_stage_weights

    w = sub.add_parser("weights", help="weights in S3: `weights manifest s3://bucket/prefix/`")
    wsub = w.add_subparsers(dest="weights_command", metavar="SUBCOMMAND", required=True)
    m = wsub.add_parser("manifest", help="hash every object once (SHA-256) into pdlift-manifest.json")
    m.add_argument("uri", help="s3://bucket/prefix/ of the weights")
    m.add_argument("--region", default=None)
    m.add_argument("--parallel", type=int, default=4, help="objects hashed at once")
    handlers["weights"] = _cmd_weights_manifest
