"""Controllers: LeaderWorkerSets, Deployments, StatefulSets, Service endpoints, cascading delete."""

from __future__ import annotations

from kubernetes import client

from tests.fixtures.kube import wait_for
from tests.sandbox.kube.conftest import IMAGE, wait_running_ready

LWS_API = ("leaderworkerset.x-k8s.io", "v1")
PRINT_LWS_ENV = ["sh", "-c", "echo leader=$LWS_LEADER_ADDRESS index=$LWS_WORKER_INDEX "
                             "size=$LWS_GROUP_SIZE bind=$PDLIFT_SANDBOX_BIND; exec sleep 60"]


def _lws(name: str, selector: dict, size: int = 2) -> dict:
    template = {"spec": {"nodeSelector": selector, "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "engine", "image": IMAGE, "command": PRINT_LWS_ENV,
                                         "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": size, "workerTemplate": template}}}


def _log(core, ns, name):
    try:
        return core.read_namespaced_pod_log(name, ns)
    except client.ApiException:
        return ""


def test_a_leader_worker_set_of_size_two_runs_a_leader_and_a_worker_with_the_lws_env(
        kube_client, core, test_nodes, kube_namespace):
    leader_node = test_nodes.join("p0")
    worker_node = test_nodes.join("p1")
    custom = client.CustomObjectsApi(kube_client)
    custom.create_namespaced_custom_object(*LWS_API, kube_namespace, "leaderworkersets",
                                           _lws("prefill", test_nodes.selector))
    leader = wait_running_ready(core, kube_namespace, "prefill-0")
    worker = wait_running_ready(core, kube_namespace, "prefill-0-1")
    labels = worker.metadata.labels
    assert labels["leaderworkerset.sigs.k8s.io/name"] == "prefill"
    assert labels["leaderworkerset.sigs.k8s.io/group-index"] == "0"
    assert labels["leaderworkerset.sigs.k8s.io/worker-index"] == "1"
    assert leader.metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    env = {e.name: e.value for e in worker.spec.containers[0].env}
    assert env == {"LWS_LEADER_ADDRESS": f"prefill-0.prefill.{kube_namespace}",
                   "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}
    # One GPU node each (8 GPUs per pod); the worker reaches the leader at its node address.
    addresses = {n.metadata.name: n.status.addresses[0].address for n in (leader_node, worker_node)}
    leader_addr = addresses[leader.spec.node_name]
    assert leader.spec.node_name != worker.spec.node_name
    line = wait_for(lambda: _log(core, kube_namespace, "prefill-0-1").strip())
    assert line == (f"leader={leader_addr} index=1 size=2 "
                    f"bind={addresses[worker.spec.node_name]}")
    wait_for(lambda: (custom.get_namespaced_custom_object(
        *LWS_API, kube_namespace, "leaderworkersets", "prefill").get("status") or {})
        .get("readyReplicas") == 1, what="the LWS to report one ready group")
    svc = core.read_namespaced_service("prefill", kube_namespace)
    assert svc.spec.cluster_ip == "None"


def test_deleting_a_leader_worker_set_deletes_its_pods(kube_client, core, test_nodes, kube_namespace):
    test_nodes.join("q0")
    test_nodes.join("q1")
    custom = client.CustomObjectsApi(kube_client)
    custom.create_namespaced_custom_object(*LWS_API, kube_namespace, "leaderworkersets",
                                           _lws("decode", test_nodes.selector))
    wait_for(lambda: len(core.list_namespaced_pod(kube_namespace).items) == 2)
    custom.delete_namespaced_custom_object(*LWS_API, kube_namespace, "leaderworkersets", "decode")
    assert core.list_namespaced_pod(kube_namespace).items == []


def test_a_deployment_becomes_available_and_its_service_lists_ready_endpoints(
        kube_client, core, test_nodes, kube_namespace):
    node = test_nodes.join("web", allocatable={})
    address = node.status.addresses[0].address
    container = {"name": "web", "image": IMAGE,
                 "command": ["python3", "-m", "http.server", "8080", "--bind", "$(POD_IP)"],
                 "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                 "ports": [{"name": "http", "containerPort": 8080}],
                 "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1}}
    client.AppsV1Api(kube_client).create_namespaced_deployment(kube_namespace, {
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"nodeSelector": test_nodes.selector,
                                       "terminationGracePeriodSeconds": 1, "containers": [container]}}}})
    core.create_namespaced_service(kube_namespace, {
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}})
    apps = client.AppsV1Api(kube_client)
    wait_for(lambda: apps.read_namespaced_deployment("web", kube_namespace).status.available_replicas == 1,
             timeout=30, what="the deployment to become available")
    pod = core.list_namespaced_pod(kube_namespace, label_selector="app=web").items[0]
    assert pod.metadata.name.startswith("web-") and pod.metadata.labels["pod-template-hash"]

    def ready_subsets():
        subsets = core.read_namespaced_endpoints("web", kube_namespace).subsets or []
        return subsets if subsets and subsets[0].addresses else None

    subsets = wait_for(ready_subsets, what="a ready endpoint address")
    assert [(a.ip, a.target_ref.name) for a in subsets[0].addresses] == [(address, pod.metadata.name)]
    assert [p.port for p in subsets[0].ports] == [8080]


def test_a_stateful_set_creates_ordinal_pods_in_order(kube_client, core, test_nodes, kube_namespace):
    test_nodes.join("sts", allocatable={})
    client.AppsV1Api(kube_client).create_namespaced_stateful_set(kube_namespace, {
        "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}}, "spec": {
                     "nodeSelector": test_nodes.selector, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "db", "image": IMAGE, "command": ["sleep", "60"]}]}}}})
    wait_running_ready(core, kube_namespace, "db-0")
    db1 = wait_running_ready(core, kube_namespace, "db-1")
    assert db1.spec.hostname == "db-1" and db1.spec.subdomain == "db"
    assert db1.metadata.labels["apps.kubernetes.io/pod-index"] == "1"


def test_deleting_a_pod_stops_its_process(core, test_nodes, kube_namespace):
    import socket

    node = test_nodes.join("kill", allocatable={})
    address = node.status.addresses[0].address
    core.create_namespaced_pod(kube_namespace, {
        "metadata": {"name": "server"},
        "spec": {"nodeSelector": test_nodes.selector, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "http", "image": IMAGE,
                                 "command": ["python3", "-m", "http.server", "8081", "--bind", address],
                                 "readinessProbe": {"tcpSocket": {"port": 8081}}}]}})
    wait_running_ready(core, kube_namespace, "server")

    def answers() -> bool:
        try:
            socket.create_connection((address, 8081), timeout=1).close()
            return True
        except OSError:
            return False

    assert answers()
    core.delete_namespaced_pod("server", kube_namespace)
    wait_for(lambda: not answers(), timeout=10, what="the pod's server to stop")


def test_the_gpu_operators_dcgm_exporter_runs_once_on_every_gpu_node_and_serves_gpu_utilisation(
        kube_client, core, test_nodes):
    import urllib.request

    gpu = test_nodes.join("g0", allocatable={"nvidia.com/gpu": "8"}).metadata.name
    gpu_instance = test_nodes.instance_ids[-1]
    cpu = test_nodes.join("c0", allocatable={}).metadata.name
    apps = client.AppsV1Api(kube_client)
    ds = apps.read_namespaced_daemon_set("nvidia-dcgm-exporter", "gpu-operator")
    assert ds.spec.template.spec.node_selector == {"nvidia.com/gpu.present": "true"}

    def exporter_on(node_name):
        pods = core.list_namespaced_pod("gpu-operator", label_selector="app=nvidia-dcgm-exporter").items
        return [p for p in pods if p.spec.node_name == node_name and p.status.pod_ip]

    (pod,) = wait_for(lambda: [p for p in exporter_on(gpu) if any(
        c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])],
        what="a ready DCGM exporter on the GPU node")
    assert not exporter_on(cpu)                                   # no GPUs, no exporter
    with urllib.request.urlopen(f"http://{pod.status.pod_ip}:9400/metrics", timeout=5) as r:
        text = r.read().decode()
    lines = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(lines) == 8 and all(line.endswith(" 0") for line in lines)     # idle: nothing runs there
    assert 'gpu="7"' in text and 'modelName="NVIDIA H200"' in text
    test_nodes.sandbox.leave(gpu_instance)
    wait_for(lambda: not exporter_on(gpu), what="the exporter to go with its node")
