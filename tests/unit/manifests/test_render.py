"""What the rendered stack tells Kubernetes and the engines, read from the objects themselves."""

from __future__ import annotations

import json

import pytest

from blueprints.schema import DecodeSpec, PrefillSpec
from tasks.errors import ConfigError
from tasks.planning.manifests import cmdline, render_production_service, render_stack
from tests.unit.manifests.helpers import (REFERENCE, WEIGHTS, combo, engine_container, find, render, template,
                                          variant)

GPU, EFA = "nvidia.com/gpu", "vpc.amazonaws.com/efa"


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _flags(container: dict) -> dict:
    return cmdline.flags(cmdline.argv(container))


def test_objects_come_in_apply_order_with_the_router_last():
    kinds = [(o["kind"], o["metadata"]["name"]) for o in render()]
    assert kinds[:2] == [("Namespace", "glm51-fp8-2p2d-blue"), ("Namespace", "glm51-fp8-2p2d")]
    assert kinds.index(("LeaderWorkerSet", "prefill")) < kinds.index(("Deployment", "router-blue"))
    assert kinds.index(("LeaderWorkerSet", "decode")) < kinds.index(("Deployment", "router-blue"))
    assert kinds[-1] == ("Deployment", "router-blue")


def test_each_colour_has_its_own_namespace_labelled_with_deployment_and_colour():
    green = render(colour="green")
    ns = find(green, "Namespace", "glm51-fp8-2p2d-green")
    assert ns["metadata"]["labels"]["pdlift.io/deployment"] == "glm51-fp8-2p2d"
    assert ns["metadata"]["labels"]["pdlift.io/colour"] == "green"
    assert find(green, "LeaderWorkerSet", "prefill")["metadata"]["namespace"] == "glm51-fp8-2p2d-green"
    with pytest.raises(ConfigError, match="colour"):
        render(colour="red")


def test_the_prefill_group_spans_both_prefill_nodes_with_pipeline_parallelism():
    lws = find(render(), "LeaderWorkerSet", "prefill")
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = _flags(engine_container(render(), "prefill")), _flags(engine_container(render(), "prefill",
                                                                                             "workerTemplate"))
    assert leader["--pipeline-parallel-size"] == ["2"] and leader["--nnodes"] == ["2"]
    assert leader["--node-rank"] == ["0"] and "--headless" not in leader
    assert worker["--node-rank"] == ["$LWS_WORKER_INDEX"] and "--headless" in worker
    assert worker["--master-addr"] == ["$LWS_LEADER_ADDRESS"]


def test_workers_start_with_the_leader_because_the_leader_waits_for_them():
    for name in ("prefill", "decode"):
        assert find(render(), "LeaderWorkerSet", name)["spec"]["startupPolicy"] == "LeaderCreated"


def test_decode_ranks_follow_the_worker_index():
    worker = _flags(engine_container(render(), "decode", "workerTemplate"))
    assert worker["--data-parallel-size"] == ["16"] and worker["--data-parallel-size-local"] == ["8"]
    assert worker["--data-parallel-start-rank"] == ["$((LWS_WORKER_INDEX*8))"]
    assert worker["--all2all-backend"] == ["deepep_low_latency"] and "--enable-expert-parallel" in worker
    lws = find(render(), "LeaderWorkerSet", "decode")
    assert "UCCL-EP" in lws["metadata"]["annotations"]["pdlift.io/all2all"]


@pytest.mark.parametrize("lws", ["prefill", "decode"])
@pytest.mark.parametrize("which", ["leaderTemplate", "workerTemplate"])
def test_every_engine_pod_takes_a_whole_node_with_requests_equal_to_limits(lws, which):
    res = engine_container(render(), lws, which)["resources"]
    for key, want in ((GPU, "8"), (EFA, "16"), ("hugepages-2Mi", "5Gi")):
        assert res["requests"][key] == res["limits"][key] == want
    assert res["requests"]["memory"] == res["limits"]["memory"]


def test_the_leader_probes_allow_a_long_but_bounded_load_and_headless_workers_have_none():
    leader = engine_container(render(), "prefill")
    startup = leader["startupProbe"]
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    assert 10 * 60 <= budget <= 45 * 60
    assert leader["readinessProbe"]["httpGet"] == {"path": "/v1/models", "port": 8000}
    assert leader["readinessProbe"]["periodSeconds"] * leader["readinessProbe"]["failureThreshold"] <= 60
    worker = engine_container(render(), "prefill", "workerTemplate")
    assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(worker)


def test_sglang_workers_are_probed_on_the_health_port_they_serve():
    worker = engine_container(render(combo("sglang", "mooncake")), "decode", "workerTemplate")
    assert worker["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8200}


def test_prefill_and_decode_never_share_a_host_and_prefill_shares_a_layer3_network_node():
    prefill = template(render(), "prefill")["spec"]
    anti = prefill["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"]["pdlift.io/role"] == "decode"
    near = prefill["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert near["topologyKey"] == "topology.k8s.aws/network-node-layer-3"
    decode = template(render(), "decode")["spec"]["affinity"]
    assert decode["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"][
        "matchLabels"]["pdlift.io/role"] == "prefill"
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in decode["podAffinity"]
    assert prefill["nodeSelector"]["pdlift.io/role"] == "prefill"
    assert prefill["nodeSelector"]["node.kubernetes.io/instance-type"] == "p5en.48xlarge"


def test_the_staged_weights_are_mounted_read_only_from_the_node():
    spec = template(render(), "prefill", "workerTemplate")["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["weights"]["hostPath"] == {"path": WEIGHTS, "type": "Directory"}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["weights"] == {"name": "weights", "mountPath": "/models/zai-org/GLM-5.1-FP8", "readOnly": True}
    assert mounts["dshm"]["mountPath"] == "/dev/shm"
    assert cmdline.positionals(cmdline.argv(spec["containers"][0]))[2] == "/models/zai-org/GLM-5.1-FP8"
    with pytest.raises(ConfigError, match="absolute"):
        render_stack(REFERENCE, "blue", "models/GLM")


def test_an_image_without_a_digest_is_refused():
    bp = variant(engine={"image": "public.ecr.aws/deep-learning-containers/vllm:latest"})
    with pytest.raises(ConfigError, match="not pinned by digest"):
        render(bp)


def test_mooncake_over_efa_is_asked_for_explicitly_with_the_efa_environment():
    c = engine_container(render(), "prefill")
    config = json.loads(_flags(c)["--kv-transfer-config"][0])
    assert config == {"kv_connector": "MooncakeConnector", "kv_role": "kv_producer", "kv_load_failure_policy": "fail",
                      "kv_connector_extra_config": {"mooncake_protocol": "efa"}}
    env = _env(c)
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert env["FI_EFA_ENABLE_SHM_TRANSFER"] == "0" and env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "8998"
    assert env["LD_LIBRARY_PATH"].startswith("/opt/amazon/efa/lib:")
    assert c["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}


def test_nixl_push_uses_libfabric_the_pod_ip_and_privileged_containers():
    c = engine_container(render(combo("vllm", "nixl")), "decode", "workerTemplate")
    config = json.loads(_flags(c)["--kv-transfer-config"][0])
    assert config["kv_connector"] == "NixlPushConnector" and config["kv_role"] == "kv_consumer"
    assert config["kv_connector_extra_config"] == {"backends": ["LIBFABRIC"]}
    assert _env(c)["VLLM_NIXL_SIDE_CHANNEL_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert c["securityContext"]["privileged"] is True


def test_sglang_selects_its_transfer_backend_and_efa_through_flags_and_environment():
    objs = render(combo("sglang", "nixl"))
    prefill, decode = engine_container(objs, "prefill"), engine_container(objs, "decode")
    assert _flags(prefill)["--disaggregation-transfer-backend"] == ["nixl"]
    assert _env(prefill)["SGLANG_DISAGGREGATION_NIXL_BACKEND"] == "LIBFABRIC"
    assert _flags(prefill)["--dist-init-addr"] == ["$LWS_LEADER_ADDRESS:5000"]
    d = _flags(decode)
    assert d["--tp-size"] == ["16"] and d["--dp-size"] == ["16"] and "--enable-dp-attention" in d
    assert d["--ep-size"] == ["16"] and d["--moe-a2a-backend"] == ["deepep"] and d["--deepep-mode"] == ["low_latency"]
    assert d["--disaggregation-prefill-pp"] == ["2"] and d["--kv-cache-dtype"] == ["fp8_e4m3"]
    moon = engine_container(render(combo("sglang", "mooncake")), "decode")
    assert _env(moon)["MOONCAKE_PROTOCOL"] == "efa" and "privileged" not in moon["securityContext"]


def test_protocol_tcp_renders_the_tcp_equivalents():
    vllm = engine_container(render(variant(kv={"protocol": "tcp"})), "prefill")
    assert json.loads(_flags(vllm)["--kv-transfer-config"][0])["kv_connector_extra_config"] == {
        "mooncake_protocol": "tcp"}
    nixl = engine_container(render(combo("vllm", "nixl", protocol="tcp")), "prefill")
    assert json.loads(_flags(nixl)["--kv-transfer-config"][0])["kv_connector_extra_config"] == {"backends": ["UCX"]}
    assert "privileged" not in nixl["securityContext"]
    sglang = engine_container(render(combo("sglang", "mooncake", protocol="tcp")), "prefill")
    assert _env(sglang)["MOONCAKE_PROTOCOL"] == "tcp"


def test_the_router_points_at_the_leader_services_with_the_bootstrap_port():
    objs = render()
    argv = cmdline.argv(find(objs, "Deployment", "router-blue")["spec"]["template"]["spec"]["containers"][0])
    ns = "glm51-fp8-2p2d-blue.svc.cluster.local"
    assert cmdline.repeated(argv, "--prefill") == [[f"http://prefill-leader.{ns}:8000", "8998"]]
    assert cmdline.repeated(argv, "--decode") == [[f"http://decode-leader.{ns}:8200"]]
    assert argv[:2] == ["vllm-router", "--vllm-pd-disaggregation"]
    assert cmdline.flags(argv)["--kv-connector"] == ["mooncake"]
    sglang = find(render(combo("sglang", "nixl")), "Deployment", "router-blue")
    assert sglang["spec"]["template"]["spec"]["containers"][0]["command"] == ["python3"]


def test_the_production_service_selects_the_router_of_the_live_colour_only():
    blue, green = render_production_service(REFERENCE, "blue"), render_production_service(REFERENCE, "green")
    assert blue["metadata"]["namespace"] == "glm51-fp8-2p2d" and blue["metadata"]["name"] == "glm51-fp8-2p2d"
    assert blue["spec"]["selector"]["pdlift.io/colour"] == "blue"
    assert green["spec"]["selector"]["pdlift.io/colour"] == "green"
    router = find(render(colour="green"), "Deployment", "router-green")
    labels = router["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in green["spec"]["selector"].items())
    assert router["metadata"]["namespace"] == green["metadata"]["namespace"]
    assert not all(labels.get(k) == v for k, v in blue["spec"]["selector"].items())


def test_extra_args_may_add_flags_but_not_override_rendered_ones():
    added = render(variant(engine={"extra_args": ["--enable-eplb"]}))
    assert "--enable-eplb" in _flags(engine_container(added, "decode"))
    with pytest.raises(ConfigError, match="--kv-cache-dtype"):
        render(variant(engine={"extra_args": ["--kv_cache_dtype=auto"]}))


def test_a_kv_cache_dtype_the_engine_lacks_is_refused():
    with pytest.raises(ConfigError, match="no fp16 KV cache"):
        render(variant(engine={"kv_cache_dtype": "fp16"}))


def test_rendered_objects_share_no_sub_objects():
    objs = render()
    engine_container(objs, "prefill")["env"][0]["name"] = "CHANGED"
    assert engine_container(objs, "prefill", "workerTemplate")["env"][0]["name"] == "POD_IP"


def test_single_node_roles_render_groups_of_one_without_rendezvous_flags():
    bp = variant(topology={"prefill": PrefillSpec(nodes=1, tp=8, pp=1), "decode": DecodeSpec(nodes=1, dp=8, ep=8)})
    objs = render(bp)
    assert find(objs, "LeaderWorkerSet", "prefill")["spec"]["leaderWorkerTemplate"]["size"] == 1
    prefill, decode = _flags(engine_container(objs, "prefill")), _flags(engine_container(objs, "decode"))
    assert "--nnodes" not in prefill and "--headless" not in prefill
    assert decode["--data-parallel-size-local"] == ["8"] and "--data-parallel-address" not in decode
