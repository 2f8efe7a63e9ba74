"""Stage 5: bring up the candidate colour of the 2P2D stack beside the live one and prove its KV path.

    render_checked -> apply (namespaces, accounts, leader Services, prefill and decode
    LeaderWorkerSets, router last) -> wait in phases -> canary through the candidate's router

Blue/green: the live colour is the one the production Service ``<name>/<name>`` selects; the
candidate is the other one (blue when nothing is live yet). This stage never touches the
production Service: promotion switches it after the benchmark gate. ``rollback`` deletes a
candidate (its namespace and its router) and refuses to delete the live colour.

The pods are reached at their pod IPs (EKS's VPC CNI makes them routable inside the VPC, where
the Prefect worker runs); nothing here depends on a Service proxy or a port-forward.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from blueprints.schema import Blueprint
from tasks.adapters.kube_apply import Applied, PodInfo
from tasks.errors import ConfigError, NotReadyYet, RemoteUnavailable, StackFailure, StackNotReady, StageFailed
from tasks.planning import canary, room
from tasks.planning.capacity_math import kv_bytes_per_token
from tasks.planning.manifests import colour_namespace, common, render_checked, stable_namespace, to_yaml
from tasks.planning.manifests.common import KEPT_ANNOTATION
from tasks.planning.manifests.router import router_name, selector as router_selector
from tasks.planning.manifests.views import routers
from tasks.planning.records import Deployed, RolledBack
from tasks.stages.clock import Clock, poll_until
from tasks.stages.deploy_wait import PodGroup, ReadyListener, WaitLimits, wait_for_stack
from tasks.stages.ports import Engines, FabricCounters, KubeObjects, Progress


@dataclass(frozen=True)
class DeployOptions:
    limits: WaitLimits = field(default_factory=WaitLimits)
    canary_tokens: int | None = None  # default: canary_tokens(max_context)
    canary_max_tokens: int = 16
    ttft_bound_s: float | None = None  # default: the gate's TTFT SLO, else 30 s
    canary_timeout_s: float = 600.0
    # The engine pods on this run's fleet only (``common.pin_to_fleet``): a ``fleet`` update's
    # candidate, while the first fleet still holds nodes of the same deployment and roles.
    fleet_run: str = ""


def weights_host_path(bp: Blueprint) -> str:
    """Where stage 4 put the model on every node's NVMe: the blueprint's staging.local_path."""
    return posixpath.normpath(bp.staging.local_path)


def live_colour(bp: Blueprint, kube: KubeObjects) -> str | None:
    svc = kube.get("v1", "Service", bp.name, stable_namespace(bp))
    colour = (((svc or {}).get("spec") or {}).get("selector") or {}).get(common.COLOUR_LABEL)
    return colour if colour in common.COLOURS else None


def candidate_colour(bp: Blueprint, kube: KubeObjects, requested: str | None = None) -> tuple[str, str | None]:
    """(candidate, live). The candidate is never the live colour."""
    live = live_colour(bp, kube)
    if requested is not None:
        common.check_colour(requested)
        if requested == live:
            raise ConfigError(f"{requested} is the live colour of {bp.name} (its production Service selects it); "
                              f"deploy the other colour and promote it instead")
        return requested, live
    if live is None:
        return "blue", None
    return common.other_colour(live), live


def render(bp: Blueprint, colour: str, fleet_run: str = "") -> list[dict]:
    """The checked objects of ``colour`` (its engines pinned to ``fleet_run``'s nodes, when given)."""
    objects = render_checked(bp, colour, weights_host_path(bp))
    return common.pin_to_fleet(objects, fleet_run) if fleet_run else objects


def snapshot_key(deployment: str, run_id: str) -> str:
    """The run's applied manifests in the state store, one ``<deployment>-<colour>.yaml`` per colour."""
    return f"runs/{deployment}/{run_id}/deploy"


def render_to_dir(bp: Blueprint, colour: str, directory: str | Path, fleet_run: str = "") -> Path:
    """The checked manifests of ``colour`` as one YAML stream in apply order; no API call."""
    text = to_yaml(render(bp, colour, fleet_run))  # a ConfigError leaves nothing behind
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{bp.name}-{colour}.yaml"
    path.write_text(text)
    return path


def snapshot_blueprint_name(deployment: str, colour: str) -> str:
    return f"{deployment}-{colour}.blueprint.yaml"


def save_blueprint(directory: str | Path, bp: Blueprint, colour: str) -> Path:
    """Beside the colour's manifests: the blueprint they were rendered from (a restore's canary
    judges the previous version by its own engine, connector and model)."""
    path = Path(directory) / snapshot_blueprint_name(bp.name, colour)
    path.write_text(yaml.safe_dump(bp.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=False))
    return path


def apply_objects(kube: KubeObjects, objects: list[dict], progress: Progress = lambda _: None) -> list[Applied]:
    """Apply in the rendered order (dependencies first, router last); idempotent."""
    out = []
    for obj in objects:
        applied = kube.apply(obj)
        progress(f"applied {applied.ref} (resourceVersion {applied.resource_version})")
        out.append(applied)
    return out


def deploy(bp: Blueprint, kube: KubeObjects, http: Engines, colour: str | None = None,
           options: DeployOptions = DeployOptions(), clock: Clock = Clock(),
           progress: Progress = lambda _: None, fabric: FabricCounters | None = None,
           on_ready: ReadyListener = lambda _: None) -> Deployed:
    """Bring up the candidate and pass the canary, or raise StackFailure (with diagnostics).
    A failed candidate is left in place for inspection; ``rollback`` removes it."""
    render(bp, colour or "blue")  # invariants and schemas: a ConfigError comes before any API call
    candidate, live = candidate_colour(bp, kube, colour)
    objects = render(bp, candidate, options.fleet_run)
    check_not_kept(bp, kube, candidate)
    if live:
        check_room(bp, kube, candidate, live, objects, options.fleet_run)
    # A namespace still being deleted (a rollback or a retire just before) refuses new objects.
    wait_namespace_gone(kube, colour_namespace(bp, candidate), options.limits.scheduled_s, clock, terminating_only=True)
    progress(f"deploying {bp.name} colour {candidate} (live: {live or 'none'})")
    started = clock.monotonic()
    apply_objects(kube, objects, progress)
    groups = pod_groups(bp, candidate, objects)
    phases = wait_for_stack(kube, groups, lambda pods: router_gaps(http, bp, objects, pods), options.limits,
                            clock, progress, on_ready)
    report = run_canary(bp, kube, http, candidate, options, fabric)
    progress(report.summary())
    if not report.ok:
        raise StackFailure(f"{bp.name} {candidate}: the canary failed: " + "; ".join(report.problems), "Canary",
                           report.summary())
    return Deployed(bp.name, candidate, live, colour_namespace(bp, candidate), stable_namespace(bp),
                    router_name(candidate), phases, round(clock.monotonic() - started, 3), report.summary())


def check_not_kept(bp: Blueprint, kube: KubeObjects, candidate: str) -> None:
    """Refuse to deploy into the colour a promotion replaced while it is kept for a switch-back."""
    ns = kube.get("v1", "Namespace", colour_namespace(bp, candidate)) or {}
    until = ((ns.get("metadata") or {}).get("annotations") or {}).get(KEPT_ANNOTATION)
    if until:
        raise StackFailure(
            f"{bp.name}: {candidate} is the colour the last promotion replaced, kept until {until} "
            f"(promotion.keep_previous_colour_s) as the switch-back target; deploy after it is retired, or free it "
            f"now with: pdlift rollback BLUEPRINT {candidate}. Nothing was applied", "KeptColour",
            applied_nothing=True)


def wait_namespace_gone(kube: KubeObjects, ns: str, wait_s: float, clock: Clock,
                        terminating_only: bool = False) -> None:
    """Bounded wait until ``ns`` no longer exists (with ``terminating_only``: only if it is being deleted)."""

    def gone() -> bool:
        obj = kube.get("v1", "Namespace", ns)
        return obj is None or (terminating_only and not (obj.get("metadata") or {}).get("deletionTimestamp"))

    try:
        poll_until(gone, bound_s=wait_s, clock=clock)
    except NotReadyYet:
        raise StageFailed(f"namespace {ns} is still terminating after {wait_s:.0f}s; check its finalizers "
                          f"(kubectl get namespace {ns} -o yaml)") from None


def check_room(bp: Blueprint, kube: KubeObjects, candidate: str, live: str, objects: list[dict],
               fleet_run: str = "") -> None:
    """Refuse, before applying anything, a candidate the fleet (``fleet_run``'s, when pinned to
    it) cannot hold beside the live colour."""
    nodes, pods = kube.fleet_gpus({common.DEPLOYMENT_LABEL: bp.name, **({common.RUN_LABEL: fleet_run}
                                                                         if fleet_run else {})})
    short = room.shortfalls(room.needs(objects), nodes, pods, colour_namespace(bp, candidate))
    if short:
        raise StackFailure(
            f"{bp.name}: no room for the candidate {candidate} beside the live {live}: " + "; ".join(short)
            + ". A blue/green rollout needs free nodes for a second colour (`pdlift plan` says how many); "
              "nothing was applied and the live colour is untouched", "NoRoom", applied_nothing=True)


def pod_groups(bp: Blueprint, colour: str, objects: list[dict]) -> list[PodGroup]:
    """What must run, read from the rendered objects (replicas x group size)."""
    out = []
    for obj in objects:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        if obj["kind"] == "LeaderWorkerSet":
            count = spec.get("replicas", 1) * spec["leaderWorkerTemplate"].get("size", 1)
            out.append(PodGroup(meta["name"], meta["namespace"],
                                {common.COLOUR_LABEL: colour, common.LWS_NAME_LABEL: meta["name"]}, count))
        elif obj["kind"] == "Deployment":
            out.append(PodGroup(common.ROUTER, meta["namespace"], router_selector(bp, colour), spec.get("replicas", 1)))
    return out


def router_gaps(http: Engines, bp: Blueprint, objects: list[dict], pods: list[PodInfo]) -> list[str]:
    """The workers each router pod does not list as healthy (docs/sources.md#phased-readiness)."""
    view = routers(objects)[0]
    wanted = [u for flag in ("--prefill", "--decode") for u in _urls(view.argv, flag)]
    gaps = []
    for p in pods:
        url = f"http://{p.pod_ip}:{p.ports.get('http', bp.engine.router_port)}/workers"
        try:
            workers = http.get_json(url).get("workers") or []
        except (RemoteUnavailable, StackNotReady) as e:  # still starting: keep waiting
            gaps.append(f"{p.namespace}/{p.name} does not answer /workers yet ({e})")
            continue
        listed = {w.get("url"): bool(w.get("is_healthy", w.get("healthy"))) for w in workers}
        gaps += [f"{p.namespace}/{p.name} lists {u} as {'unhealthy' if u in listed else 'missing'}"
                 for u in wanted if not listed.get(u)]
    return gaps


def _urls(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def run_canary(bp: Blueprint, kube: KubeObjects, http: Engines, colour: str,
               options: DeployOptions, fabric: FabricCounters | None = None) -> canary.CanaryReport:
    """One unique long prompt through the candidate's router, with each role's evidence read just
    before and just after it: the leaders' metrics, the EFA counters of every node the role runs
    on (``fabric``; without it an efa canary cannot pass), and each role's first leader's log."""
    engines_ns = colour_namespace(bp, colour)
    pods = {role: kube.pods(engines_ns, {common.COLOUR_LABEL: colour, common.LWS_NAME_LABEL: role})
            for role in (common.PREFILL, common.DECODE)}
    leaders = {role: [p for p in group if p.labels.get(common.LWS_WORKER_INDEX_LABEL) == "0"]
               for role, group in pods.items()}
    router = next((p for p in kube.pods(stable_namespace(bp), router_selector(bp, colour)) if p.ready), None)
    if router is None or not all(leaders.values()):
        raise StackFailure(f"{bp.name} {colour}: no ready router or engine leader left for the canary", "Canary")

    ports = {common.PREFILL: bp.engine.prefill_port, common.DECODE: bp.engine.decode_port}
    efa = bp.kv_transfer.protocol == "efa"

    def scrape() -> dict[str, list]:
        return {role: [s for p in group for s in http.metrics(f"http://{p.pod_ip}:{p.ports.get('http', ports[role])}"
                                                              "/metrics")]
                for role, group in leaders.items()}

    def counters() -> dict[str, tuple[int | None, str]]:
        if not efa:
            return {}
        if fabric is None:
            return {role: (None, "no SSH access to the nodes was given") for role in pods}
        return {role: fabric.total(sorted({p.node for p in group})) for role, group in pods.items()}

    tokens = canary.canary_tokens(bp.model.max_context, options.canary_tokens)
    bound = options.ttft_bound_s or ((bp.gate.slo.ttft_ms / 1000.0) if bp.gate.slo.ttft_ms else 30.0)
    fabric_before, before = counters(), scrape()
    url = f"http://{router.pod_ip}:{router.ports.get('http', bp.engine.router_port)}/v1/completions"
    try:
        ttft_s, error = http.stream_completion(url, bp.model.name, canary.canary_prompt(tokens),
                                               options.canary_max_tokens, options.canary_timeout_s).ttft_s, ""
    except (StackNotReady, RemoteUnavailable) as e:  # judged with the rest: the counters say why
        ttft_s, error = 0.0, str(e)
    after, fabric_after = scrape(), counters()
    evidence = {}
    for role, group in leaders.items():
        (b, why_b), (a, why_a) = fabric_before.get(role, (None, "")), fabric_after.get(role, (None, ""))
        log = kube.log_head(group[0].namespace, group[0].name, _engine_container(group[0])) if efa else ""
        evidence[role] = canary.RoleEvidence(before[role], after[role], log, b, a, why_b or why_a)
    spec = canary.CanarySpec(bp.engine.name, bp.kv_transfer.connector, bp.kv_transfer.protocol, tokens,
                             tokens * kv_bytes_per_token(bp.model, bp.engine.kv_cache_dtype), bp.engine.block_size,
                             bound)
    return canary.judge(spec, ttft_s, evidence, error)


def _engine_container(pod: PodInfo) -> str | None:
    names = [cs.name for cs in pod.containers]
    return "engine" if "engine" in names else (names[0] if names else None)


def rollback(bp: Blueprint, kube: KubeObjects, colour: str, wait_s: float = 300.0,
             clock: Clock = Clock()) -> RolledBack:
    """Delete ``colour``'s router (Deployment, Service) and its engines' namespace: a candidate
    after a failure or a FAIL, or a replaced colour being retired. Deleting what is already gone,
    or still going, is a no-op. Refuses the live colour. With ``wait_s``, waits (bounded) until
    the namespace is gone, so its GPUs are free for the next candidate."""
    common.check_colour(colour)
    ns, stable = colour_namespace(bp, colour), stable_namespace(bp)
    if live_colour(bp, kube) == colour:
        raise StageFailed(f"refusing to roll back {colour} of {bp.name}: it is the live colour (the production "
                          f"Service {stable}/{bp.name} selects it); promote the other colour first")
    deleted = []
    for api_version, kind, name, namespace in (("apps/v1", "Deployment", router_name(colour), stable),
                                               ("v1", "Service", router_name(colour), stable),
                                               ("v1", "Namespace", ns, None)):
        obj = kube.get(api_version, kind, name, namespace)
        # An object being deleted answers a second DELETE with 409: leave it to finish.
        if obj and not obj["metadata"].get("deletionTimestamp") and kube.delete(api_version, kind, name, namespace):
            deleted.append(f"{kind} {namespace + '/' if namespace else ''}{name}")
    if wait_s:
        wait_namespace_gone(kube, ns, wait_s, clock)
    return RolledBack(colour, tuple(deleted))
