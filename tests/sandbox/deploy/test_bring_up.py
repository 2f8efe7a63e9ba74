"""`pdlift deploy` on the sandbox: the candidate comes up (its progress shown per role), the canary
proves the KV path, re-applying changes nothing, kubectl sees it, and blue/green rollback removes
only the candidate."""

from __future__ import annotations

import contextlib
import io
import json
import time

import pytest

from cli.main import main
from tasks.errors import ConfigError, StageFailed
from tasks.planning.manifests import render_production_service
from tasks.stages import deploy as stage
from sandbox.nodes import efa_counters
from tasks.errors import StackFailure
from tests.fixtures.artifacts import progress_artifacts


@pytest.fixture(scope="module")
def cli_stderr() -> io.StringIO:
    """What `pdlift deploy` wrote to stderr in ``blue`` (not a terminal: its progress as log lines)."""
    return io.StringIO()


@pytest.fixture(scope="module")
def blue(make_module_site, kube_sandbox, prefect_harness, tmp_path_factory, cli_stderr):
    """The first deploy of a fresh site through the CLI (flow, tasks, KUBECONFIG): colour blue."""
    site = make_module_site()
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(kube_sandbox.kubeconfig))
        mp.setenv("PDLIFT_STATE_DIR", str(tmp_path_factory.mktemp("state")))
        started = time.monotonic()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(cli_stderr):
            code = main(["deploy", str(site.path)])
        wall = time.monotonic() - started
    assert code == 0, cli_stderr.getvalue()[-3000:]
    result = json.loads(out.getvalue())
    print(f"\nsandbox bring-up (apply -> canary passed): {result['bring_up_s']:.1f} s; "
          f"phases {result['phases_s']}; whole CLI call {wall:.1f} s")
    return site, result


def test_pdlift_deploy_brings_up_blue_and_its_canary_proves_kv_moved_over_efa(blue, http):
    site, result = blue
    bp = site.blueprint
    assert result["colour"] == "blue" and result["live_colour"] is None
    assert result["engines_namespace"] == f"{bp.name}-blue"
    assert "prefill log: efa" in result["canary"] and "decode log: efa" in result["canary"]
    assert list(result["phases_s"]) == ["scheduled", "started", "ready", "router"]
    # Independently of the stage: Mooncake wrote the KV over the nodes' EFA devices.
    written = {name: efa_counters.read(site.nodes.node(t.name).node_dir) for name, t in site.targets.items()}
    assert sum(c["rdma_write_bytes"] for c in written.values()) > 0
    assert sum(c["rdma_write_recv_bytes"] for c in written.values()) > 0


def test_the_bring_up_shows_its_pods_ready_per_role_up_to_100_percent(blue, cli_stderr):
    site, _ = blue
    name = site.blueprint.name
    progress = progress_artifacts(prefix=f"{name}-deploy-")
    roles = ("prefill", "decode", "router", "total")
    assert {key: pct for key, (pct, _) in progress.items()} == {f"{name}-deploy-{r}": 100.0 for r in roles}
    assert progress[f"{name}-deploy-router"][1] == "deploy router: 2 of 2 pods Ready"
    assert progress[f"{name}-deploy-total"][1] == "deploy total: 6 of 6 pods Ready"
    # The CLI's bar on stderr (a log here, not a terminal): it ends at the same count.
    bars = [line for line in cli_stderr.getvalue().splitlines() if line.startswith("deploy [")]
    assert bars and bars[-1].endswith("100.0% prefill 2/2, decode 2/2, router 2/2")


def test_kubectl_get_pods_shows_what_pdlift_applied(blue, kube_sandbox):
    site, _ = blue
    name = site.blueprint.name
    engines = kube_sandbox.kubectl("get", "pods", "-n", f"{name}-blue", "--no-headers").stdout
    rows = {line.split()[0]: line.split() for line in engines.splitlines()}
    assert set(rows) == {"prefill-0", "prefill-0-1", "decode-0", "decode-0-1"}
    assert all(r[1] == "1/1" and r[2] == "Running" for r in rows.values())
    routers = kube_sandbox.kubectl("get", "pods", "-n", name, "-l", "pdlift.io/colour=blue",
                                   "--no-headers").stdout.splitlines()
    assert len(routers) == 2 and all(line.startswith("router-blue-") and "Running" in line for line in routers)


def test_applying_the_same_stack_again_changes_nothing(blue):
    site, _ = blue
    objects = stage.render(site.blueprint, "blue")
    current = [site.kube.get(o["apiVersion"], o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
               ["metadata"]["resourceVersion"] for o in objects]
    again = [a.resource_version for a in stage.apply_objects(site.kube, objects)]
    assert again == current


def test_with_blue_live_the_candidate_is_green_and_its_rollback_leaves_blue_untouched(blue):
    site, _ = blue
    bp, kube = site.blueprint, site.kube
    kube.apply(render_production_service(bp, "blue"))  # what promotion will do
    assert stage.candidate_colour(bp, kube) == ("green", "blue")
    blue_pods = {p.name: p for p in kube.pods(f"{bp.name}-blue", {})}
    stage.apply_objects(kube, stage.render(bp, "green"))
    assert kube.get("v1", "Namespace", f"{bp.name}-green") is not None

    rolled = stage.rollback(bp, kube, "green", wait_s=30)

    assert set(rolled.deleted) == {f"Deployment {bp.name}/router-green", f"Service {bp.name}/router-green",
                                   f"Namespace {bp.name}-green"}
    assert kube.get("v1", "Namespace", f"{bp.name}-green") is None
    assert kube.get("apps/v1", "Deployment", "router-green", bp.name) is None
    after = {p.name: p for p in kube.pods(f"{bp.name}-blue", {})}
    assert {n: (p.ready, p.node) for n, p in after.items()} == {n: (True, p.node) for n, p in blue_pods.items()}
    assert kube.get("apps/v1", "Deployment", "router-blue", bp.name) is not None
    assert stage.rollback(bp, kube, "green", wait_s=5).deleted == ()  # already gone: a no-op


def test_the_live_colour_is_neither_rolled_back_nor_deployed_over(blue, http):
    site, _ = blue
    bp, kube = site.blueprint, site.kube
    kube.apply(render_production_service(bp, "blue"))
    with pytest.raises(StageFailed, match="live colour"):
        stage.rollback(bp, kube, "blue")
    with pytest.raises(ConfigError, match="live colour"):
        stage.deploy(bp, kube, http, "blue")
    assert kube.get("v1", "Namespace", f"{bp.name}-blue") is not None


def test_a_candidate_the_fleet_cannot_hold_beside_the_live_colour_is_refused_before_any_apply(blue, http):
    site, _ = blue   # blue holds all 8 GPUs of each of the site's 4 nodes
    bp, kube = site.blueprint, site.kube
    kube.apply(render_production_service(bp, "blue"))
    blue_pods = {p.name: p.uid for p in kube.pods(f"{bp.name}-blue", {})}
    with pytest.raises(StackFailure) as failed:
        stage.deploy(bp, kube, http)
    assert failed.value.reason == "NoRoom"
    message = str(failed.value)
    assert "no room for the candidate green beside the live blue" in message
    assert "prefill: 2 pod(s) of 8 GPUs wanted, room for 0 on 2 prefill node(s)" in message
    assert f"{bp.name}-blue/prefill-0" in message   # who holds the GPUs
    assert kube.get("v1", "Namespace", f"{bp.name}-green") is None   # nothing was applied
    assert {p.name: p.uid for p in kube.pods(f"{bp.name}-blue", {})} == blue_pods
