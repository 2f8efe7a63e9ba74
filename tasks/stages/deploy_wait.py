"""Wait for a candidate colour in phases, each with its own deadline, failing fast on what won't heal.

    scheduled  every pod exists and is bound to a node
    started    every container runs and passed its startup probe (the model is loaded)
    ready      every pod is Ready
    router     every router pod lists every worker it was given, healthy

Phases per docs/sources.md#phased-readiness: all pods scheduled (Pending caught quickly), then the
startup probes, readiness, and the router's own view, because router health alone lies
(sglang#33740). A crash loop, an image that cannot be pulled or a pod the scheduler cannot
place for longer than a short grace fail at once, with the reason, the events and the last
log lines; a deadline passing fails the same way, naming the phase and what was missing.

Progress: whenever the pods Ready per role change, ``on_ready`` gets the counts (the task makes
them progress artifacts) and ``progress`` a line ("pods Ready: prefill 1/2, ...").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tasks.adapters.kube_apply import PodInfo
from tasks.planning.progress import Count, ready_counts
from tasks.stages.ports import KubeObjects
from tasks.errors import StackFailure
from tasks.stages.clock import Clock

PHASES = ("scheduled", "started", "ready", "router")
# Waiting reasons that no amount of waiting fixes; ErrImagePull is left out on purpose: a
# registry hiccup retries once before the kubelet calls it ImagePullBackOff.
FATAL_WAITING = ("CrashLoopBackOff", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                 "CreateContainerConfigError", "CreateContainerError")
LOG_LINES = 30


@dataclass(frozen=True)
class PodGroup:
    what: str  # prefill | decode | router
    namespace: str
    selector: dict[str, str]
    count: int


@dataclass(frozen=True)
class WaitLimits:
    """Seconds per phase. GLM-class loads take 10-45 min (the startup probe allows 45)."""

    scheduled_s: float = 300.0
    started_s: float = 50 * 60.0  # image pull (tens of GB) + weight load
    ready_s: float = 600.0
    router_s: float = 300.0
    unschedulable_grace_s: float = 60.0  # a gang's pods may be placed one poll apart
    # Crashes (non-zero exits) seen in one group before it counts as crash-looping. LWS
    # recreates a whole group when a pod restarts (RecreateGroupOnPodRestart), so restart
    # counts reset and CrashLoopBackOff may never show: count crashes across pods instead.
    crash_limit: int = 3
    poll_s: float = 5.0  # the longest gap between polls; they start at 0.5 s and back off to it


RouterCheck = Callable[[list[PodInfo]], list[str]]  # router pods -> workers not listed healthy


ReadyListener = Callable[[list[Count]], None]  # pods Ready per role, of those the colour runs


def ready_line(counts: list[Count]) -> str:
    return "pods Ready: " + ", ".join(f"{c.name} {c.done}/{c.planned}" for c in counts)


def _ready(groups: list[PodGroup], pods: dict[str, list[PodInfo]]) -> list[Count]:
    return ready_counts({g.what: g.count for g in groups}, {g.what: sum(p.ready for p in pods[g.what]) for g in groups})


def wait_for_stack(kube: KubeObjects, groups: list[PodGroup], router_check: RouterCheck, limits: WaitLimits,
                   clock: Clock = Clock(), progress: Callable[[str], None] = lambda _: None,
                   on_ready: ReadyListener = lambda _: None) -> dict[str, float]:
    """Seconds each phase took. Raises StackFailure."""
    took: dict[str, float] = {}
    unschedulable_since: dict[str, float] = {}
    crashes: dict[str, set] = {g.what: set() for g in groups}
    phase_index, phase_start = 0, clock.monotonic()
    deadline = phase_start + _limit(limits, PHASES[0])
    interval = min(0.5, limits.poll_s)
    ready: list[Count] = []
    while True:
        now = clock.monotonic()
        pods = {g.what: [p for p in kube.pods(g.namespace, g.selector) if not p.deleting] for g in groups}
        counts = _ready(groups, pods)
        if counts != ready:
            ready = counts
            on_ready(ready)
            progress(ready_line(ready))
        _fail_fast(kube, pods, unschedulable_since, now, limits)
        _count_crashes(kube, pods, crashes, limits.crash_limit)
        while True:
            phase = PHASES[phase_index]
            missing = _missing(phase, groups, pods, router_check)
            if missing:
                break
            took[phase] = round(now - phase_start, 3)
            progress(f"phase {phase}: done in {took[phase]:.1f}s")
            phase_index += 1
            if phase_index == len(PHASES):
                return took
            phase_start, deadline = now, now + _limit(limits, PHASES[phase_index])
        if now >= deadline:
            _timeout(kube, phase, missing, pods, _limit(limits, phase), sorted({g.namespace for g in groups}))
        clock.sleep(interval)
        interval = min(interval * 1.5, limits.poll_s)


def _limit(limits: WaitLimits, phase: str) -> float:
    return getattr(limits, f"{phase}_s")


def _missing(phase: str, groups: list[PodGroup], pods: dict[str, list[PodInfo]],
             router_check: RouterCheck) -> list[str]:
    out = []
    for g in groups:
        have = pods[g.what]
        if len(have) < g.count:
            out.append(f"{g.what}: {len(have)} of {g.count} pods exist")
        for p in have:
            if phase == "scheduled" and not p.node:
                out.append(f"{p.namespace}/{p.name} not scheduled")
            elif phase == "started" and not (p.containers and all(c.started for c in p.containers)):
                out.append(f"{p.namespace}/{p.name} not started")
            elif phase in ("ready", "router") and not p.ready:
                out.append(f"{p.namespace}/{p.name} not ready")
    if not out and phase == "router":
        routers = [p for g in groups if g.what == "router" for p in pods[g.what]]
        out = router_check(routers)
    return out


def _fail_fast(kube: KubeObjects, pods: dict[str, list[PodInfo]], since: dict[str, float], now: float,
               limits: WaitLimits) -> None:
    for group in pods.values():
        for p in group:
            key = f"{p.namespace}/{p.name}"
            for c in p.containers:
                if c.waiting_reason in FATAL_WAITING:
                    exit_note = f" (last exit code {c.exit_code}: {c.terminated_reason})" if c.exit_code else ""
                    detail = f"{c.waiting_message}" if c.waiting_message else ""
                    raise _failure(kube, [p], c.waiting_reason,
                                   f"pod {key} container {c.name} is in {c.waiting_reason}{exit_note}"
                                   + (f": {detail}" if detail else ""))
            if p.phase == "Failed":
                raise _failure(kube, [p], "PodFailed", f"pod {key} failed")
            if p.unschedulable:
                first = since.setdefault(key, now)
                if now - first >= limits.unschedulable_grace_s:
                    raise _failure(kube, [p], "FailedScheduling",
                                   f"pod {key} cannot be scheduled (FailedScheduling): {p.unschedulable}")
            else:
                since.pop(key, None)


def _count_crashes(kube: KubeObjects, pods: dict[str, list[PodInfo]], crashes: dict[str, set], limit: int) -> None:
    for what, group in pods.items():
        for p in group:
            for c in p.containers:
                if c.exit_code:  # the current or the last run ended with a non-zero code
                    crashes[what].add((p.uid, c.name, c.finished_at or c.restarts))
                    if len(crashes[what]) >= limit:
                        raise _failure(kube, [p], "CrashLoopBackOff",
                                       f"the {what} pods are crash-looping (CrashLoopBackOff: {len(crashes[what])} crashes); pod "
                                       f"{p.namespace}/{p.name} container {c.name} has last exit code "
                                       f"{c.exit_code} ({c.terminated_reason or 'Error'})")


def _timeout(kube: KubeObjects, phase: str, missing: list[str], pods: dict[str, list[PodInfo]],
             limit: float, namespaces: list[str]) -> None:
    names = {m.split(" ", 1)[0] for m in missing}
    stuck = [p for group in pods.values() for p in group if f"{p.namespace}/{p.name}" in names]
    summary = "; ".join(missing[:6]) + (f"; and {len(missing) - 6} more" if len(missing) > 6 else "")
    raise _failure(kube, stuck, f"Timeout:{phase}",
                   f"phase '{phase}' did not finish within {limit:.0f}s: {summary}", namespaces)


def _failure(kube: KubeObjects, pods: list[PodInfo], reason: str, headline: str,
             namespaces: list[str] | None = None) -> StackFailure:
    """The message carries the headline, the events and the log tail of the first pod; the
    diagnostics carry them for every pod named (or, with no pod to name, the namespaces' events:
    a pod that was never created is explained by its controller's events)."""
    sections = [_diagnose(kube, p) for p in pods[:6]]
    if not sections:
        for ns in namespaces or []:
            events = kube.events(ns)[-12:]
            sections.append(f"events in {ns}:\n" + "\n".join(f"  {e.line()}" for e in events) if events
                            else f"events in {ns}: none")
    message = headline + ("\n" + sections[0] if sections else "")
    return StackFailure(message, reason, "\n\n".join([headline] + sections))


def _diagnose(kube: KubeObjects, p: PodInfo) -> str:
    events = kube.events(p.namespace, p.name)[-12:]
    lines = [f"pod {p.namespace}/{p.name} on {p.node or '(no node)'}: phase {p.phase}"]
    lines += ["events:"] + [f"  {e.line()}" for e in events] if events else ["events: none"]
    log = kube.log_tail(p.namespace, p.name, p.containers[0].name if p.containers else None, LOG_LINES) \
        if p.containers else ""
    lines += ["last log lines:"] + [f"  {line}" for line in log.rstrip().splitlines()] if log else \
        ["last log lines: none"]
    return "\n".join(lines)
