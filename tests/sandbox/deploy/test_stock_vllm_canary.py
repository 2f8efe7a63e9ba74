"""A stock vLLM image with NIXL exports no KV-transfer exporter counters: the canary proves the KV
path from vLLM's own NIXL metrics and the transport the engines' start-up logs name."""

from __future__ import annotations

import re

import pytest

from tasks.stages import deploy as stage
from tasks.errors import StackFailure
from tests.sandbox.deploy.conftest import FAST

OPTIONS = stage.DeployOptions(limits=FAST)
NIXL = {"kv_transfer": {"connector": "nixl", "nixl_mode": "push"}}


def _stock_site(make_site, engine_faults, **faults):
    site = make_site(sections=NIXL)
    engine_faults({"namespace": f"{site.blueprint.name}-blue"}, {"no_kv_exporter": True, **faults})
    return site


def test_stock_vllm_with_nixl_over_efa_passes_the_canary_on_its_own_metrics(make_site, http, engine_faults):
    site = _stock_site(make_site, engine_faults)
    deployed = stage.deploy(site.blueprint, site.kube, http, options=OPTIONS)
    summary = deployed.canary  # the stage returned: the canary passed
    assert "counted by vLLM's NIXL metrics" in summary
    assert re.search(r"decode received [\d.]+ [kMG]B over efa", summary)
    # The engines really exported no exporter counter: the proof came from vLLM's own metrics.
    leader = site.kube.pods(f"{site.blueprint.name}-blue", {"leaderworkerset.sigs.k8s.io/name": "decode",
                                                           "leaderworkerset.sigs.k8s.io/worker-index": "0"})[0]
    names = {s.name for s in http.metrics(f"http://{leader.pod_ip}:{site.blueprint.engine.decode_port}/metrics")}
    assert "vllm:nixl_bytes_transferred_sum" in names and not any("pdlift_sandbox_kv" in n for n in names)


def test_stock_vllm_whose_libfabric_fell_back_to_tcp_is_caught_by_its_log(make_site, http, engine_faults):
    site = _stock_site(make_site, engine_faults, tcp_fallback=True)
    with pytest.raises(StackFailure) as failed:
        stage.deploy(site.blueprint, site.kube, http, options=OPTIONS)
    assert failed.value.reason == "Canary"
    assert re.search(r"the engines moved [\d.]+ [kMG]?B of KV over tcp, none over efa", str(failed.value))
