"""The pods that pull a recreate candidate's images onto the live colour's nodes."""

from __future__ import annotations

from tasks.planning.manifests import prepull
from tasks.planning.manifests.common import stable_namespace
from tasks.planning.manifests.render import render_stack
from tests.unit.manifests.helpers import REFERENCE


def test_every_engine_image_of_the_rendered_stack_is_pulled_once_in_order():
    objects = render_stack(REFERENCE, "green", "/mnt/nvme/models")
    images = prepull.images(objects)
    assert images[0] == REFERENCE.engine.image and len(images) == len(set(images))
    # The engines' LeaderWorkerSets only: the router Deployment is not on the GPU nodes.
    lws_images = {c["image"] for o in objects if o["kind"] == "LeaderWorkerSet"
                  for t in ("leaderTemplate", "workerTemplate")
                  for c in (o["spec"]["leaderWorkerTemplate"].get(t) or {}).get("spec", {}).get("containers", [])}
    assert set(images) == lws_images

def test_one_pod_per_node_pinned_to_it_admitted_on_a_full_node_and_run_once():
    pods = prepull.pods(REFERENCE, ["node-b", "node-a", "node-b"], ["img@sha256:" + "1" * 64, "img2@sha256:" + "2" * 64])
    assert [p["spec"]["nodeName"] for p in pods] == ["node-a", "node-b"]
    for pod in pods:
        spec = pod["spec"]
        assert pod["metadata"]["namespace"] == stable_namespace(REFERENCE)
        assert pod["metadata"]["labels"].items() >= prepull.selector(REFERENCE).items()
        assert spec["restartPolicy"] == "Never"
        assert spec["tolerations"] == [{"operator": "Exists"}]  # GPU/EFA NoSchedule and NoExecute taints
        assert all("resources" not in c for c in spec["containers"])  # BestEffort: no GPU, CPU or memory asked
        assert [c["name"] for c in spec["containers"]] == ["image-0", "image-1"]
        assert [c["image"] for c in spec["containers"]] == ["img@sha256:" + "1" * 64, "img2@sha256:" + "2" * 64]
        assert all(c["command"] == ["true"] for c in spec["containers"])


def test_pod_names_follow_the_node_and_the_images():
    a = prepull.pod_name("node-a", ["x"])
    assert a == prepull.pod_name("node-a", ["x"])  # a re-run finds its own pod
    assert a != prepull.pod_name("node-b", ["x"]) and a != prepull.pod_name("node-a", ["y"])
    assert len(a) <= 63 and a.startswith("prepull-")
