"""The KV canary on stock-engine evidence only: every engine x connector combination passes on the
healthy sandbox (the EFA counters of real sshd nodes, read over SSH; the engines' own metrics and
log lines), and each way the KV path goes wrong fails it with the cause and the fix.

vLLM + Mooncake, the reference blueprint, is deployed by test_bring_up.py through the CLI; the
other three are here. The start-time fault (TCP fallback) is in test_failures.py; the live
faults (recompute, failed transfers) are set on a stack that passed and the canary run again.
"""

from __future__ import annotations

import pytest

from sandbox.nodes import efa_counters
from tasks.planning.canary import MIN_FABRIC_SHARE, canary_tokens
from tasks.planning.capacity_math import kv_bytes_per_token
from tasks.stages import deploy as stage
from tests.sandbox.deploy.conftest import FAST

OPTIONS = stage.DeployOptions(limits=FAST)
SGLANG = {"name": "sglang", "image": "lmsysorg/sglang@sha256:" + "a" * 64, "version": "0.5.9"}


def deployed_kv_bytes(site) -> float:
    bp = site.blueprint
    return canary_tokens(bp.model.max_context) * kv_bytes_per_token(bp.model, bp.engine.kv_cache_dtype)


def _node_counters(site) -> dict[str, int]:
    return {name: sum(efa_counters.read(site.nodes.node(t.name).node_dir).values())
            for name, t in site.targets.items()}


def _deploy_and_count(site, http) -> tuple[str, dict[str, int]]:
    """Deploy the site's stack; return the canary's summary and what each node's devices counted."""
    before = _node_counters(site)
    deployed = stage.deploy(site.blueprint, site.kube, http, options=OPTIONS, fabric=site.fabric)
    after = _node_counters(site)
    return deployed.canary, {n: after[n] - before[n] for n in after}


def _assert_passed_on_stock_evidence(site, summary: str, moved_by_node: dict[str, int]) -> None:
    assert "prefill log: efa" in summary and "decode log: efa" in summary
    # Independently of the product: the nodes of each role counted the canary's KV on their devices.
    for role in ("prefill", "decode"):
        moved = sum(moved_by_node[n] for n, r in site.roles.items() if r == role)
        assert moved >= 0.9 * deployed_kv_bytes(site), (role, site.blueprint.kv_transfer, moved)


@pytest.fixture(scope="module")
def nixl_deploy(make_module_site, http):
    """vLLM + NIXL, deployed once: its pass is checked, then the live faults are set on it."""
    site = make_module_site(sections={"kv_transfer": {"connector": "nixl"}})
    summary, moved = _deploy_and_count(site, http)  # the stage returned: the canary passed
    return site, summary, moved


@pytest.fixture
def nixl_site(nixl_deploy):
    return nixl_deploy[0]


def test_vllm_with_nixl_passes_the_canary_on_stock_evidence(nixl_deploy):
    _assert_passed_on_stock_evidence(*nixl_deploy)


@pytest.mark.parametrize("connector", ["mooncake", "nixl"])
def test_sglang_with_each_connector_passes_the_canary_on_stock_evidence(make_site, http, connector):
    site = make_site(sections={"kv_transfer": {"connector": connector}}, **SGLANG)
    _assert_passed_on_stock_evidence(site, *_deploy_and_count(site, http))


def _canary_with(site, http, engine_faults, **faults) -> tuple[str, ...]:
    engine_faults({"namespace": f"{site.blueprint.name}-blue", "role": "decode"}, faults)
    report = stage.run_canary(site.blueprint, site.kube, http, "blue", OPTIONS, site.fabric)
    assert not report.ok
    return report.problems


def test_a_decode_that_recomputes_the_prompt_fails_the_canary(nixl_site, http, engine_faults):
    problems = _canary_with(nixl_site, http, engine_faults, recompute=True)
    text = "\n".join(problems)
    assert "the decode engine computed" in text and "recomputed the prefill instead of loading the KV" in text
    assert f"below {MIN_FABRIC_SHARE:.0%}" in text  # nothing crossed the fabric either
    assert "kv_load_failure_policy" in text  # the fix


def test_failed_kv_transfers_fail_the_canary(nixl_site, http, engine_faults):
    problems = _canary_with(nixl_site, http, engine_faults, kv_transfer_fail=True)
    text = "\n".join(problems)
    assert "the canary request failed" in text  # kv_load_failure_policy "fail": an error, not a recompute
    assert "counted 1 failed KV transfer(s) (vllm:nixl_num_failed_transfers)" in text
