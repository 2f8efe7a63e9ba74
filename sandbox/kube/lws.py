"""The LeaderWorkerSet controller (``leaderworkerset.x-k8s.io/v1``), after kubernetes-sigs/lws.

Group ``i`` of LWS ``NAME`` is a leader pod ``NAME-i`` and workers ``NAME-i-1 .. NAME-i-(size-1)``
(the names the real leader/worker StatefulSets give them). Every container gets
``LWS_LEADER_ADDRESS=NAME-i.NAME.NAMESPACE`` (the leader's DNS name under the headless
Service ``NAME``, which this controller creates), ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``;
pods carry the ``leaderworkerset.sigs.k8s.io/{name,group-index,worker-index,group-key}``
labels. Workers are owned by their leader, so deleting a leader recreates the group.

Honoured: replicas, size, leaderTemplate/workerTemplate, startupPolicy (LeaderCreated,
LeaderReady), restartPolicy RecreateGroupOnPodRestart (a pod lost, or a container restart
once the whole group had been Ready, recreates the group; a group that never became Ready
is left to crash-loop so its error stays visible), the exclusive-topology annotation, and
a changed template (outdated groups are recreated, all at once). Status: replicas,
readyReplicas, updatedReplicas and the Available condition.
"""

from __future__ import annotations

import hashlib

from sandbox.kube import errors, resources
from sandbox.kube.workloads import _conditions, owner_ref, pod_from_template, pod_ready, template_hash

LWS = resources.lookup(resources.LWS_GROUP, "v1", "leaderworkersets")
PODS = resources.lookup("", "v1", "pods")
SERVICES = resources.lookup("", "v1", "services")
P = "leaderworkerset.sigs.k8s.io/"
STARTED = "sandbox.pdlift.io/group-started-restarts"


def _with_env(pod: dict, env: list[dict]) -> None:
    names = {e["name"] for e in env}
    for group in ("initContainers", "containers"):
        for c in pod["spec"].get(group) or []:
            c["env"] = env + [e for e in c.get("env") or [] if e.get("name") not in names]


def _exclusive(pod: dict, topology_key: str, group_key: str) -> None:
    """What the LWS webhook adds for the exclusive-topology annotation: one group per domain."""
    aff = pod["spec"].setdefault("affinity", {})
    term_same = {"labelSelector": {"matchExpressions": [
        {"key": P + "group-key", "operator": "In", "values": [group_key]}]},
        "topologyKey": topology_key}
    term_other = {"labelSelector": {"matchExpressions": [
        {"key": P + "group-key", "operator": "Exists"},
        {"key": P + "group-key", "operator": "NotIn", "values": [group_key]}]},
        "topologyKey": topology_key}
    aff.setdefault("podAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", []).append(term_same)
    aff.setdefault("podAntiAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", []).append(term_other)


def _restarts(pods: list[dict]) -> int:
    return sum(cs.get("restartCount", 0) for p in pods
               for cs in (p.get("status") or {}).get("containerStatuses") or [])


class LeaderWorkerSets:
    def __init__(self, app):
        self.app = app

    def _delete(self, pod: dict) -> None:
        try:
            self.app.api.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
        except errors.ApiError:
            pass

    def sync(self, pods: list[dict]) -> None:
        for lws in self.app.api.store.list(LWS):
            name, ns = lws["metadata"]["name"], lws["metadata"]["namespace"]
            mine = [p for p in pods if p["metadata"]["namespace"] == ns
                    and (p["metadata"].get("labels") or {}).get(P + "name") == name]
            self._service(lws)
            self._reconcile(lws, mine)

    def _service(self, lws: dict) -> None:
        name, ns = lws["metadata"]["name"], lws["metadata"]["namespace"]
        if self.app.api.store.get(SERVICES, ns, name) is not None:
            return
        body = {"metadata": {"name": name, "namespace": ns, "ownerReferences": [owner_ref(lws)]},
                "spec": {"clusterIP": "None", "selector": {P + "name": name},
                         "publishNotReadyAddresses": True}}
        try:
            self.app.api.create(SERVICES, ns, body, "lws-controller")
        except errors.ApiError:
            pass  # created meanwhile

    def _reconcile(self, lws: dict, pods: list[dict]) -> None:
        spec, name = lws["spec"], lws["metadata"]["name"]
        lwt = spec["leaderWorkerTemplate"]
        size, replicas = lwt.get("size", 1), spec.get("replicas", 1)
        rev = template_hash(lwt)
        groups: dict[int, list[dict]] = {}
        for p in pods:
            groups.setdefault(int(p["metadata"]["labels"].get(P + "group-index", -1)), []).append(p)
        ready_groups = updated = 0
        for i, group in sorted(groups.items()):
            if not 0 <= i < replicas:
                for p in group:
                    self._delete(p)
        for i in range(replicas):
            group = groups.get(i, [])
            if self._should_recreate(lwt, group, rev, f"{name}-{i}"):
                for p in group:
                    self._delete(p)
                continue
            by_worker = {int(p["metadata"]["labels"].get(P + "worker-index", 0)): p for p in group}
            leader = by_worker.get(0)
            if leader is None:
                self._create(lws, i, 0, size, rev)
                continue
            if spec.get("startupPolicy") == "LeaderReady" and not pod_ready(leader):
                continue
            for j in range(1, size):
                if j not in by_worker:
                    self._create(lws, i, j, size, rev, leader)
            if len(group) == size and all(pod_ready(p) for p in group):
                ready_groups += 1
                self._mark_started(leader, group)
            updated += 1
        available = ready_groups >= replicas
        status = {"replicas": len([g for g in groups if 0 <= g < replicas]),
                  "readyReplicas": ready_groups, "updatedReplicas": updated,
                  "hpaPodSelector": f"{P}name={name},{P}worker-index=0",
                  "conditions": _conditions(lws.get("status"), [
                      ("Available", available, "AllGroupsReady" if available else "GroupsNotReady",
                       "All replicas are ready" if available else "Not all replicas are ready"),
                      ("Progressing", not available, "GroupsProgressing",
                       "Replicas are progressing")])}
        self.app.api.write_status(LWS, lws, status)

    def _should_recreate(self, lwt: dict, group: list[dict], rev: str, leader_name: str) -> bool:
        if not group:
            return False
        if any(p["metadata"]["labels"].get(P + "template-revision-hash") != rev for p in group):
            return True
        leader = next((p for p in group if p["metadata"]["name"] == leader_name), None)
        if leader is None:
            return True  # workers without their leader: the real ones are garbage collected
        if lwt.get("restartPolicy", "RecreateGroupOnPodRestart") != "RecreateGroupOnPodRestart":
            return False
        started = (leader["metadata"].get("annotations") or {}).get(STARTED)
        return started is not None and _restarts(group) > int(started)

    def _mark_started(self, leader: dict, group: list[dict]) -> None:
        if STARTED in (leader["metadata"].get("annotations") or {}):
            return
        restarts = str(_restarts(group))
        self.app.api.mutate(PODS, leader, lambda p: p["metadata"].setdefault(
            "annotations", {}).setdefault(STARTED, restarts))

    def _create(self, lws: dict, i: int, j: int, size: int, rev: str,
                leader: dict | None = None) -> None:
        name, ns = lws["metadata"]["name"], lws["metadata"]["namespace"]
        lwt = lws["spec"]["leaderWorkerTemplate"]
        template = lwt.get("leaderTemplate") if j == 0 and lwt.get("leaderTemplate") else \
            lwt["workerTemplate"]
        leader_name = f"{name}-{i}"
        pod_name = leader_name if j == 0 else f"{leader_name}-{j}"
        group_key = hashlib.sha1(f"{ns}/{leader_name}".encode()).hexdigest()
        labels = {P + "name": name, P + "group-index": str(i), P + "worker-index": str(j),
                  P + "group-key": group_key, P + "template-revision-hash": rev}
        annotations = {P + "size": str(size)}
        if j:
            annotations[P + "leader-name"] = leader_name
        owner = leader if j else lws
        pod = pod_from_template(template, owner, pod_name, labels, annotations)
        pod["metadata"]["namespace"] = ns
        pod["spec"]["hostname"] = pod_name
        pod["spec"]["subdomain"] = name
        _with_env(pod, [{"name": "LWS_LEADER_ADDRESS", "value": f"{leader_name}.{name}.{ns}"},
                        {"name": "LWS_GROUP_SIZE", "value": str(size)},
                        {"name": "LWS_WORKER_INDEX", "value": str(j)}])
        topology = (lws["metadata"].get("annotations") or {}).get(P + "exclusive-topology")
        if topology:
            _exclusive(pod, topology, group_key)
        try:
            self.app.api.create(PODS, ns, pod, "lws-controller")
        except errors.ApiError as e:
            self.app.recorder.record(lws, "Warning", "FailedCreate", f"Error creating: {e.message}",
                                     component="lws-controller", min_interval=30)
