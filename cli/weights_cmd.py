"""`pdlift stage-weights BLUEPRINT --nodes NODES.json` and `pdlift weights manifest s3://...`."""

from __future__ import annotations

import argparse
import sys
import time


class _Bar:
    """The staging progress on stderr: one redrawn line on a terminal, a line per 10 s otherwise."""

    def __init__(self, stream=None):
        stream = stream or sys.stderr  # looked up now, not at import: stderr may have been replaced
        self.stream, self.tty, self._last = stream, stream.isatty(), 0.0

    def __call__(self, snapshot) -> None:
        from tasks.planning.staging_progress import render_bar

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


def _cmd_stage_weights(args: argparse.Namespace) -> int:
    from flows.stage_weights import load_nodes, stage_weights
    from tasks import weights
    from tasks.planning.staging_progress import render_bar, throughput_rows

    bar = _Bar()
    try:
        with weights.progress_listener(bar):
            result = stage_weights(args.blueprint, load_nodes(args.nodes), write_manifest=args.write_manifest)
    finally:
        bar.close()
    print(render_bar(result))
    for row in throughput_rows(result):
        print(f"  {row['node']:<24} {row['files']:>9} files {row['fetched_gb']:>8.2f} GB fetched "
              f"{row['seconds']:>7.1f} s {row['mb_per_s']:>8.1f} MB/s")
    return 0


def _cmd_weights_manifest(args: argparse.Namespace) -> int:
    from tasks.adapters.s3 import WeightStore, s3_client, write_hash_file
    from tasks.planning.staging import HASH_FILE

    def hashed(key: str, size: int) -> None:
        print(f"hashed {key} ({size / 1e6:.1f} MB)", file=sys.stderr)

    doc = write_hash_file(WeightStore(s3_client(args.region), max_workers=args.parallel), args.uri, hashed)
    uri = args.uri if args.uri.endswith("/") else args.uri + "/"
    print(f"{uri}{HASH_FILE}: {len(doc['objects'])} objects, SHA-256")
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("stage-weights", help="stage the model weights from S3 to every node's NVMe")
    p.add_argument("blueprint")
    p.add_argument("--nodes", required=True,
                   help='JSON list of {"name", "address", "host_keys": [...]} (until launch provides them)')
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
