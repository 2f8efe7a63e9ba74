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
a changed template rolled out as LWS does (``rolling_partition``, after
pkg/controllers/leaderworkerset_controller.go ``rollingUpdatePartition``): outdated groups are
recreated from the highest index down, at most ``maxUnavailable`` groups unavailable at once,
the next ones only once those are Ready on the new template, never below
``rollingUpdateConfiguration.partition``. Status: replicas, readyReplicas, updatedReplicas
(groups on the current template) and the Available / Progressing / UpdateInProgress conditions
as ``updateConditions`` sets them.

Not modelled: ``maxSurge`` replicas are never created (the step is still maxUnavailable +
maxSurge, as the LWS docs count it, and a Warning event says so); a group below the partition
that is recreated mid-update comes back on the new template (LWS: its ControllerRevision's).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

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


@dataclass(frozen=True)
class GroupState:
    ready: bool  # every pod of the group there and Ready
    updated: bool  # every pod of the group on the current template
    present: bool = True  # some pod of the group exists


def rolling_partition(states: list[GroupState], replicas: int, step: int, current: int) -> int:
    """The lowest group index to update now (LWS ``rollingUpdatePartition``, maxSurge 0): ``step``
    groups below the ready-and-updated tail, raised by the unready groups under it (so no more than
    ``step`` are unavailable), lowered through a tail that is unready or updated anyway; it only
    ever moves down."""
    tail = 0
    for state in reversed(states):
        if not (state.ready and state.updated):
            break
        tail += 1
    step_partition = max(0, replicas - tail - step)
    partition = step_partition + sum(1 for state in states[:step_partition] if not state.ready)
    idx = min(partition, replicas - 1)
    while idx >= step_partition:
        if not states[idx].ready or states[idx].updated:
            partition = idx
            idx -= 1
        else:
            break
    return min(partition, current)


def scaled(value, replicas: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: an int, or a percentage of ``replicas``."""
    if isinstance(value, str) and value.endswith("%"):
        exact = replicas * int(value[:-1]) / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value)


def _rollout(lws: dict) -> tuple[dict, int]:
    """The set's rollingUpdateConfiguration, and its partition (groups below it are not updated)."""
    rollout = (lws["spec"].get("rolloutStrategy") or {}).get("rollingUpdateConfiguration") or {}
    return rollout, int(rollout.get("partition") or 0)


def _restarts(pods: list[dict]) -> int:
    return sum(cs.get("restartCount", 0) for p in pods
               for cs in (p.get("status") or {}).get("containerStatuses") or [])


class LeaderWorkerSets:
    def __init__(self, app):
        self.app = app
        # (namespace, name) -> (template hash, partition): where the leader StatefulSet's
        # partition lives in the real controller.
        self._rollouts: dict[tuple[str, str], tuple[str, int]] = {}

    def _delete(self, pod: dict) -> None:
        try:
            self.app.api.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
        except errors.ApiError:
            pass

    def sync(self, pods: list[dict]) -> None:
        sets = self.app.api.store.list(LWS)
        live = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in sets}
        for gone in set(self._rollouts) - live:  # a set deleted and made again starts afresh
            del self._rollouts[gone]
        for lws in sets:
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
        spec, name, ns = lws["spec"], lws["metadata"]["name"], lws["metadata"]["namespace"]
        lwt = spec["leaderWorkerTemplate"]
        size, replicas = lwt.get("size", 1), spec.get("replicas", 1)
        rev = template_hash(lwt)
        groups: dict[int, list[dict]] = {}
        for p in pods:
            groups.setdefault(int(p["metadata"]["labels"].get(P + "group-index", -1)), []).append(p)
        for i, group in sorted(groups.items()):
            if not 0 <= i < replicas:
                for p in group:
                    self._delete(p)
        states = [self._state(groups.get(i, []), size, rev) for i in range(replicas)]
        partition = self._partition(lws, states, replicas, rev)
        for i in range(replicas):
            group = groups.get(i, [])
            if self._should_recreate(lwt, group, rev, f"{name}-{i}", i >= partition):
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
            if states[i].ready:
                self._mark_started(leader, group)
        self.app.api.write_status(LWS, lws, self._status(lws, states, replicas))

    @staticmethod
    def _state(group: list[dict], size: int, rev: str) -> GroupState:
        return GroupState(ready=len(group) == size and all(pod_ready(p) for p in group),
                          updated=bool(group) and all(
                              p["metadata"]["labels"].get(P + "template-revision-hash") == rev for p in group),
                          present=bool(group))

    def _partition(self, lws: dict, states: list[GroupState], replicas: int, rev: str) -> int:
        """Groups at this index and above are updated (the leader StatefulSet's partition)."""
        key = (lws["metadata"]["namespace"], lws["metadata"]["name"])
        rollout, floor = _rollout(lws)
        seen = self._rollouts.get(key)
        if seen is None or seen[0] != rev:
            # A new template: nothing updated yet where groups run an older one (LWS Case 2);
            # everything at once where none does (a new set).
            partition = replicas if any(s.present and not s.updated for s in states) else 0
        else:
            surge = scaled(rollout.get("maxSurge", 0), replicas, True)
            if surge:
                self.app.recorder.record(lws, "Warning", "SandboxNoSurge",
                                         f"the sandbox does not create maxSurge replicas ({surge}); updating "
                                         "in place", component="lws-controller", min_interval=300)
            step = scaled(rollout.get("maxUnavailable", 1), replicas, False) + min(surge, replicas)
            partition = rolling_partition(states, replicas, step, seen[1])
        partition = max(partition, floor)
        self._rollouts[key] = (rev, partition)
        return partition

    @staticmethod
    def _status(lws: dict, states: list[GroupState], replicas: int) -> dict:
        _, floor = _rollout(lws)
        present = [i for i in range(replicas) if states[i].present]
        ready = sum(1 for s in states if s.ready)
        updated = sum(1 for s in states if s.updated)
        current = [i for i in present if i >= floor]
        updated_above = sum(1 for i in current if states[i].updated)
        ready_updated_above = sum(1 for i in current if states[i].updated and states[i].ready)
        prev = {c["type"]: c["status"] == "True" for c in (lws.get("status") or {}).get("conditions") or []}
        if updated_above < len(current):
            on = {"UpdateInProgress": True, "Progressing": True, "Available": False}
        elif ready == replicas and ready_updated_above == len(current):
            on = {"Available": True, "Progressing": False, "UpdateInProgress": False}
        else:
            on = {"Progressing": True, "Available": False, "UpdateInProgress": prev.get("UpdateInProgress", False)}
        texts = {"Available": ("AllGroupsReady", "All replicas are ready"),
                 "Progressing": ("GroupsProgressing", "Replicas are progressing"),
                 "UpdateInProgress": ("GroupsUpdating", "Rolling Upgrade is in progress")}
        wanted = [(t, on[t], *texts[t]) for t in ("Available", "Progressing", "UpdateInProgress")
                  if on[t] or t in prev]
        name = lws["metadata"]["name"]
        return {"replicas": len(present), "readyReplicas": ready, "updatedReplicas": updated,
                "hpaPodSelector": f"{P}name={name},{P}worker-index=0",
                "conditions": _conditions(lws.get("status"), wanted)}

    def _should_recreate(self, lwt: dict, group: list[dict], rev: str, leader_name: str, due: bool) -> bool:
        """``due``: the group is at or above the rollout's partition, so an outdated one is replaced."""
        if not group:
            return False
        if due and any(p["metadata"]["labels"].get(P + "template-revision-hash") != rev for p in group):
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
