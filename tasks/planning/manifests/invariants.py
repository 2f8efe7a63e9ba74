"""What must hold across the rendered objects before anything is applied. Pure.

Each rule reads the manifests as the engines will (``views``) and returns violations naming
the object, the reason and what to do. Source: docs/sources.md#pd-invariants (what must match
between P and D, and what breaks when it does not).
"""

from __future__ import annotations

from dataclasses import dataclass

from blueprints.schema import Blueprint
from tasks.planning.manifests.common import DECODE, EFA, PREFILL, identify
from tasks.planning.manifests.views import EngineView, RouterView, engines, lws_selected, routers, service_for

_DIGEST = "@sha256:"


@dataclass(frozen=True)
class Violation:
    rule: str
    where: str
    reason: str
    hint: str = ""

    def __str__(self) -> str:
        return f"{self.rule}: {self.where}: {self.reason}" + (f" (hint: {self.hint})" if self.hint else "")


def check_invariants(manifests: list[dict], bp: Blueprint) -> list[Violation]:
    views = engines(manifests)
    out: list[Violation] = []
    for rule in (_same_settings, _connector, _decode_tp, _group, _efa):
        out += rule(views, bp)
    out += _ports(views, routers(manifests), manifests)
    out += _digests(manifests)
    return out


def _same(views: list[EngineView], rule: str, what: str, value, hint: str) -> list[Violation]:
    """One violation per template whose value differs from the first prefill leader's."""
    if not views:
        return []
    ref = views[0]
    return [Violation(rule, v.where, f"{what} {value(v)!r} differs from {value(ref)!r} on {ref.where}", hint)
            for v in views[1:] if value(v) != value(ref)]


def _same_settings(views: list[EngineView], bp: Blueprint) -> list[Violation]:
    out = []
    for v in views:
        if v.engine == "unknown":
            out.append(Violation("engine", v.where, f"not a vLLM or SGLang command: {' '.join(v.argv[:3])!r}"))
        elif v.served_name != bp.model.name:
            out.append(Violation("same-model", v.where, f"serves {v.served_name!r}, the blueprint's model "
                                 f"is {bp.model.name!r}", "re-render from the blueprint"))
    views = [v for v in views if v.engine != "unknown"]
    weights = lambda v: next((vol.get("hostPath", {}).get("path") for vol in  # noqa: E731
                              v.template["spec"].get("volumes") or [] if vol.get("name") == "weights"), None)
    out += _same(views, "same-model", "model", lambda v: (v.engine, v.model, v.served_name),
                 "prefill and decode must load the same model (vLLM's compatibility hash refuses the pair)")
    out += _same(views, "same-model", "weights hostPath", weights, "mount the same staged weights everywhere")
    out += _same(views, "same-dtype", "--dtype", lambda v: v.flag("--dtype"), "use one dtype on P and D")
    out += _same(views, "same-kv-cache-dtype", "KV-cache dtype", lambda v: v.kv_cache_dtype,
                 "the KV bytes decode receives must be in its own cache dtype; set one engine.kv_cache_dtype")
    out += _same(views, "same-block-size", "KV block/page size", lambda v: v.block_size,
                 "transfers map blocks one to one; use one engine.block_size")
    return out


def _connector(views: list[EngineView], bp: Blueprint) -> list[Violation]:
    out = []
    out += _same(views, "same-connector", "KV transfer library", lambda v: v.kv_library,
                 "prefill and decode must use the same KV connector")
    pp = max((v.pp for v in views if v.role == PREFILL), default=1)
    for v in views:
        if v.engine == "vllm":
            cfg = v.kv_config()
            want = {PREFILL: ("kv_producer", "kv_both"), DECODE: ("kv_consumer", "kv_both")}.get(v.role, ())
            if cfg.get("kv_role") not in want:
                out.append(Violation("kv-role", v.where, f"kv_role {cfg.get('kv_role')!r} on a {v.role} engine",
                                     f"use {want[0] if want else 'kv_producer/kv_consumer'}"))
            if v.role == PREFILL and pp > 1 and cfg.get("kv_connector") == "NixlConnector":
                out.append(Violation("connector-pp", v.where, f"vLLM's pull NixlConnector rejects pipeline "
                                     f"parallel prefill (pp={pp}, vllm#52913)",
                                     "use kv_transfer.nixl_mode: push (NixlPushConnector) or connector: mooncake"))
        elif v.engine == "sglang":
            if v.flag("--disaggregation-mode") != v.role:
                out.append(Violation("kv-role", v.where, f"--disaggregation-mode "
                                     f"{v.flag('--disaggregation-mode')!r} on a {v.role} engine"))
            if v.role == DECODE and int(v.flag("--disaggregation-prefill-pp")) != pp:
                out.append(Violation("connector-pp", v.where, f"decode expects prefill pp "
                                     f"{v.flag('--disaggregation-prefill-pp')}, the prefill runs pp={pp}",
                                     f"pass --disaggregation-prefill-pp {pp} to decode"))
    return out


def _decode_tp(views: list[EngineView], bp: Blueprint) -> list[Violation]:
    if bp.model.attention.kind == "mla":
        return []  # one latent per token: any TP can read any other TP's cache
    prefill_tp = max((v.attention_tp for v in views if v.role == PREFILL), default=1)
    return [Violation("decode-tp", v.where, f"decode attention TP {v.attention_tp} < prefill TP {prefill_tp}: "
                      "a non-MLA KV layout cannot be re-sharded that way (llm-d: P TP > D TP asserts)",
                      f"set decode tp >= {prefill_tp}")
            for v in views if v.role == DECODE and v.attention_tp < prefill_tp]


def _group(views: list[EngineView], bp: Blueprint) -> list[Violation]:
    out = []
    for v in views:
        spec = v.lws.get("spec") or {}
        size = int((spec.get("leaderWorkerTemplate") or {}).get("size", 1))
        if v.leader and size > 1 and spec.get("startupPolicy") == "LeaderReady":
            out.append(Violation("group-startup", v.where, "startupPolicy LeaderReady creates workers only once "
                                 "the leader is Ready, but this leader is Ready only after its workers joined",
                                 "use startupPolicy: LeaderCreated"))
        if "--data-parallel-size-local" in v.flags:
            nodes = int(v.flag("--data-parallel-size")) // max(1, int(v.flag("--data-parallel-size-local")))
        else:
            nodes = int(v.flag("--nnodes"))
        if nodes != size:
            out.append(Violation("group-size", v.where, f"the engine expects {nodes} node(s), the group has {size}",
                                 "render size from topology.<role>.nodes"))
    return out


def _efa(views: list[EngineView], bp: Blueprint) -> list[Violation]:
    if bp.kv_transfer.protocol != "efa":
        return []
    out = []
    for v in views:
        env, missing = v.env, []
        for name, want in (("FI_PROVIDER", "efa"), ("FI_EFA_USE_DEVICE_RDMA", "1")):
            if env.get(name) != want:
                missing.append(f"{name}={want}")
        res = v.container.get("resources") or {}
        if any(str((res.get(k) or {}).get(EFA, "0")) in ("0", "") for k in ("requests", "limits")):
            missing.append(f"{EFA} in requests and limits")
        lib = v.kv_library
        if v.engine == "vllm" and lib == "mooncake":
            if (v.kv_config().get("kv_connector_extra_config") or {}).get("mooncake_protocol") != "efa":
                missing.append('kv_connector_extra_config.mooncake_protocol "efa"')
        elif v.engine == "vllm" and lib == "nixl":
            if "LIBFABRIC" not in (v.kv_config().get("kv_connector_extra_config") or {}).get("backends", []):
                missing.append('kv_connector_extra_config.backends ["LIBFABRIC"]')
            if "VLLM_NIXL_SIDE_CHANNEL_HOST" not in env:
                missing.append("VLLM_NIXL_SIDE_CHANNEL_HOST (the pod IP)")
        elif v.engine == "sglang" and lib == "mooncake" and env.get("MOONCAKE_PROTOCOL") != "efa":
            missing.append("MOONCAKE_PROTOCOL=efa")
        elif v.engine == "sglang" and lib == "nixl" and env.get("SGLANG_DISAGGREGATION_NIXL_BACKEND") != "LIBFABRIC":
            missing.append("SGLANG_DISAGGREGATION_NIXL_BACKEND=LIBFABRIC")
        if lib == "nixl" and env.get("NIXL_LOG_LEVEL", "").upper() not in ("INFO", "DEBUG", "TRACE"):
            missing.append("NIXL_LOG_LEVEL=INFO (the canary's proof of the efa provider)")
        if lib == "nixl" and not (v.container.get("securityContext") or {}).get("privileged"):
            missing.append("privileged (NIXL registers GPU memory with libfabric)")
        if missing:
            out.append(Violation("efa", v.where, "kv_transfer.protocol is efa but the pod lacks "
                                 + ", ".join(missing) + "; the transfer would fall back to TCP silently",
                                 "re-render; do not edit EFA settings by hand"))
    return out


def _ports(views: list[EngineView], routers_: list[RouterView], manifests: list[dict]) -> list[Violation]:
    out = []
    for v in views:
        declared = {p.get("containerPort") for p in v.container.get("ports") or [] if p.get("name") == "http"}
        probes = {((v.container.get(k) or {}).get("httpGet") or {}).get("port")
                  for k in ("startupProbe", "readinessProbe", "livenessProbe") if v.container.get(k)}
        for port in (declared | probes) - {v.port}:
            out.append(Violation("ports", v.where, f"port {port} (probe or containerPort) but the engine "
                                 f"listens on --port {v.port}"))
    leaders = {v.lws["metadata"]["name"]: v for v in views if v.leader}
    for r in routers_:
        out += _router_ports(r, leaders, manifests)
    return out


def _router_ports(r: RouterView, leaders: dict[str, EngineView], manifests: list[dict]) -> list[Violation]:
    out = []
    declared = {p.get("containerPort") for p in r.container.get("ports") or []}
    probe = ((r.container.get("readinessProbe") or {}).get("httpGet") or {}).get("port")
    for port in (declared | {probe}) - {r.port, None}:
        out.append(Violation("ports", r.where, f"port {port} (probe or containerPort) but the router listens on "
                             f"--port {r.port}"))
    selector = r.deployment["spec"]["selector"].get("matchLabels") or {}
    for svc in manifests:
        if svc.get("kind") == "Service" and svc["spec"].get("selector") == selector:
            for p in svc["spec"].get("ports") or []:
                if p.get("targetPort") != r.port:
                    out.append(Violation("ports", identify(svc), f"targets port {p.get('targetPort')}, the router "
                                         f"listens on {r.port}"))
    for flag, role in (("--prefill", PREFILL), ("--decode", DECODE)):
        workers = r.workers(flag)
        if not workers:
            out.append(Violation("ports", r.where, f"no {flag} worker"))
        for host, port, boot in workers:
            svc = service_for(manifests, host)
            lws = lws_selected(svc, manifests) if svc else None
            leader = leaders.get(lws["metadata"]["name"]) if lws else None
            if leader is None or leader.role != role:
                out.append(Violation("ports", r.where, f"{flag} {host} is not a rendered Service in front of "
                                     f"the {role} leader"))
                continue
            out += _service_hop(r, svc, flag, port, leader.port, "engine --port")
            needs_boot = leader.engine == "sglang" or leader.kv_library == "mooncake"
            if role == PREFILL and needs_boot and boot is None:
                out.append(Violation("ports", r.where, f"{flag} {host} has no bootstrap port; decode would "
                                     "not find the prefill's KV", f"append {leader.bootstrap_port} after the URL"))
            elif role == PREFILL and boot is not None:
                if boot != leader.bootstrap_port:
                    out.append(Violation("ports", r.where, f"bootstrap port {boot} but the prefill serves "
                                         f"{leader.bootstrap_port}"))
                out += _service_hop(r, svc, flag, boot, leader.bootstrap_port, "bootstrap port")
    return out


def _service_hop(r: RouterView, svc: dict, flag: str, port: int | None, target: int, what: str) -> list[Violation]:
    ports = {p.get("port"): p.get("targetPort") for p in svc["spec"].get("ports") or []}
    if port not in ports:
        return [Violation("ports", r.where, f"{flag} uses port {port}, which {identify(svc)} does not expose")]
    if ports[port] != target:
        return [Violation("ports", identify(svc), f"port {port} targets {ports[port]}, the {what} is {target}")]
    return []


def _digests(manifests: list[dict]) -> list[Violation]:
    out = []
    for obj in manifests:
        spec = obj.get("spec") or {}
        templates = [spec.get("template")] + [(spec.get("leaderWorkerTemplate") or {}).get(k)
                                              for k in ("leaderTemplate", "workerTemplate")]
        for t in filter(None, templates):
            for ctr in (t.get("spec") or {}).get("containers") or []:
                if _DIGEST not in str(ctr.get("image", "")):
                    out.append(Violation("image-digest", identify(obj), f"image {ctr.get('image')!r} is not "
                                         "pinned by digest", "use REPO@sha256:..."))
    return out
