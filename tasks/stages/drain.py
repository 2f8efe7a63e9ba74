"""Wait for a colour's engines to finish what they are serving before it goes away: a recreate's
drain (production already answers 503) and a retire after a promotion (production already routes
to the new colour, and requests that reached the old one before the switch must finish).
Adapters and the clock are injected.
"""

from __future__ import annotations

from blueprints.schema import Blueprint
from tasks.errors import NotReadyYet, RemoteUnavailable, StackNotReady
from tasks.planning.manifests import common
from tasks.planning.manifests.common import COLOUR_LABEL, colour_namespace
from tasks.stages.clock import Clock, poll_until
from tasks.stages.ports import Engines, KubeObjects

# In flight: running, and waiting (a disaggregated request waiting for its KV transfer counts as
# waiting, not running: vLLM num_requests_waiting, SGLang num_queue_reqs).
IN_FLIGHT_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "sglang:num_running_reqs",
                    "sglang:num_queue_reqs")


def wait_in_flight(bp: Blueprint, kube: KubeObjects, http: Engines, colour: str, clock: Clock,
                   bound_s: float = common.SHUTDOWN_TIMEOUT_S) -> tuple[float, int]:
    """Wait until the colour's engine leaders report no running request, at most ``bound_s`` (the
    engines' own --shutdown-timeout would cut them off then anyway). (seconds waited, requests
    still running when the wait ended)."""
    ns = colour_namespace(bp, colour)
    ports = {common.PREFILL: bp.engine.prefill_port, common.DECODE: bp.engine.decode_port}
    leaders = [p for p in kube.pods(ns, {COLOUR_LABEL: colour})
               if p.labels.get(common.LWS_WORKER_INDEX_LABEL) == "0" and p.pod_ip and p.ready]
    started, left = clock.monotonic(), [0]

    def idle():
        running = 0
        for p in leaders:
            port = p.ports.get("http", ports.get(p.labels.get(common.ROLE_LABEL, ""), 0))
            try:
                samples = http.metrics(f"http://{p.pod_ip}:{port}/metrics")
            except (StackNotReady, RemoteUnavailable, OSError):
                continue  # an engine that does not answer cannot be waited for: its own drain applies
            running += int(sum(s.value for s in samples if s.name in IN_FLIGHT_GAUGES))
        left[0] = running
        return running == 0 or None

    try:
        poll_until(idle, bound_s=bound_s, clock=clock, interval_s=0.5)
    except NotReadyYet:
        pass
    return round(clock.monotonic() - started, 3), left[0]
