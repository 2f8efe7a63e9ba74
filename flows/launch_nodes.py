"""Stage 2 flow: launch the gang into the reservation, join EKS, label by topology and role."""

from __future__ import annotations

from prefect import flow

from tasks import capacity
from tasks.errors import StageFailed
from tasks.stages.reserve import Reserved


@flow(name="launch-nodes")
def launch_nodes_flow(blueprint_path: str, run_id: str | None = None) -> dict:
    run = capacity.start_run(blueprint_path, run_id)
    reserved_out = run.ledger.outputs.get("reserve")
    if not reserved_out:
        raise StageFailed(f"run {run.identity.run_id} has no reservation yet: run `pdlift reserve` first")
    fleet = capacity.launch(run, Reserved(**{**reserved_out, "blocked_zones": tuple(reserved_out["blocked_zones"])}))
    capacity.publish_ledger(run)
    return {"run_id": run.identity.run_id,
            "nodes": [{"instance_id": n.instance_id, "node": n.node_name, "address": n.address, "role": n.role}
                      for n in fleet.nodes],
            "prefill_shared_layer": fleet.shared_layer, "replaced": list(fleet.replaced)}
