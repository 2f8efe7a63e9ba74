"""Every rendered object passes the Kubernetes schemas; a malformed one is named with its path."""

from __future__ import annotations

import kubernetes_validate
import pytest

from tasks.planning.manifests import render_production_service, schema_problems
from tasks.planning.manifests.schema_check import lws_crd
from tests.unit.manifests.helpers import COMBOS, REFERENCE, combo, engine_container, find, render


@pytest.mark.parametrize("engine,connector", COMBOS)
def test_every_rendered_object_passes_schema_validation(engine, connector):
    bp = combo(engine, connector)
    objects = render(bp) + [render_production_service(bp, "green")]
    assert [str(p) for p in schema_problems(objects)] == []


def test_the_kept_crd_is_a_valid_crd_and_names_its_lws_version():
    crd = lws_crd()
    assert kubernetes_validate.validate(crd, "1.33", strict=True) == "1.33"
    assert crd["metadata"]["annotations"]["pdlift.io/lws-version"] == "v0.7.0"
    assert crd["spec"]["names"]["kind"] == "LeaderWorkerSet"


def test_a_misspelt_lws_field_is_an_error_not_silently_pruned():
    objects = render()
    lws = find(objects, "LeaderWorkerSet", "prefill")
    lws["spec"]["startupPolicy"] = "LeaderCreatd"
    lws["spec"]["leaderWorkerTemplate"]["restartPolicyy"] = "None"
    found = [str(p) for p in schema_problems([lws])]
    assert any("spec.startupPolicy: 'LeaderCreatd' is not one of" in p for p in found)
    assert any("'restartPolicyy' was unexpected" in p for p in found)


def test_a_malformed_pod_template_inside_an_lws_is_found_with_its_path():
    objects = render()
    engine_container(objects, "decode", "workerTemplate")["resource"] = {}
    found = [str(p) for p in schema_problems(objects)]
    assert found == ["LeaderWorkerSet glm51-fp8-2p2d-blue/decode: spec.leaderWorkerTemplate.workerTemplate."
                     "spec.containers[0]: Additional properties are not allowed ('resource' was unexpected)"]


def test_a_malformed_core_object_is_found_with_its_path():
    service = render_production_service(REFERENCE, "blue")
    service["spec"]["ports"][0]["port"] = "http"
    found = [str(p) for p in schema_problems([service])]
    assert len(found) == 1 and found[0].startswith("Service glm51-fp8-2p2d/glm51-fp8-2p2d: spec.ports[0].port")


def test_an_unknown_kind_is_reported_rather_than_passed():
    found = schema_problems([{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}])
    assert len(found) == 1 and "Couldn't find schema" in found[0].message
