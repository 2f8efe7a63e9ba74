"""Stage 4: stage the model weights from S3 to every node's NVMe, verified and resumable.

The nodes (address, instance id, pinned host keys) are a parameter until the launch stage hands
them over. Re-running is cheap: verified files are skipped and partial ones resume by range.

    python -m flows.stage_weights BLUEPRINT NODES.json   # [{"name", "address", "host_keys"}, ...]
"""

from __future__ import annotations

import json
import sys

from prefect import flow

from tasks import plan as plan_tasks
from tasks import weights
from tasks.adapters.ssh import SshNode
from tasks.planning.staging_progress import NodeProgress


@flow(name="stage-weights", log_prints=True)
def stage_weights(blueprint_path: str, nodes: list[SshNode], write_manifest: bool = False,
                  timeout_s: float | None = None) -> list[NodeProgress]:
    """Args:
        blueprint_path: the blueprint (model.weights_uri, staging, aws.ssh).
        nodes: where to stage, with their host keys from the console output.
        write_manifest: hash objects that have no checksum yet (pdlift-manifest.json) first.
        timeout_s: per-node stager timeout; default from the model size (50 MB/s + 15 min).
    """
    blueprint = plan_tasks.load(blueprint_path)
    manifest = weights.make_manifest(blueprint.model.weights_uri, blueprint.aws.region, write_manifest)
    probes = weights.probe_nodes(blueprint, nodes, manifest)
    weights.plan(blueprint, manifest, probes)
    return weights.stage(blueprint, nodes, manifest, timeout_s)


def load_nodes(path: str) -> list[SshNode]:
    """Nodes from a JSON file: a list of {name, address, host_keys: [...], port?}."""
    with open(path) as f:
        return [SshNode(n["name"], n["address"], tuple(n.get("host_keys", ())), n.get("port")) for n in json.load(f)]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m flows.stage_weights BLUEPRINT NODES.json")
    stage_weights(sys.argv[1], load_nodes(sys.argv[2]))
