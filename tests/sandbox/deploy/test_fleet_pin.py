"""A fleet update's candidate lands on the second fleet's nodes only: two fleets of the same
deployment and roles in one cluster, the first joined first, and the deploy pinned to the second."""

from __future__ import annotations

from tasks.planning.manifests.common import RUN_LABEL, colour_namespace
from tasks.stages import deploy as stage
from tests.sandbox.deploy.conftest import FAST


def test_a_pinned_candidate_runs_on_its_own_fleets_nodes_though_the_other_fleet_has_room(make_site, http):
    site = make_site(sections={"kv_transfer": {"protocol": "tcp"}})  # the first fleet: nodes joined first
    site.join_nodes(extra_labels={RUN_LABEL: "r-second"})
    bp = site.blueprint
    second = {name for name in site.roles if name not in list(site.roles)[:4]}
    deployed = stage.deploy(bp, site.kube, http, "green", stage.DeployOptions(limits=FAST, fleet_run="r-second"))
    pods = site.kube.pods(colour_namespace(bp, "green"), {"pdlift.io/colour": "green"})
    assert deployed.colour == "green" and len(pods) == 4
    assert {p.node for p in pods} == second  # one engine pod on each of the second fleet's nodes
    routers = site.kube.pods(bp.name, {"pdlift.io/colour": "green", "app.kubernetes.io/component": "router"})
    first = set(list(site.roles)[:4])
    assert routers and not {p.node for p in routers} & first  # no router dies with the first fleet
