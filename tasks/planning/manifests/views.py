"""Read rendered manifests back into what the engines and the router will actually be told.

The invariants compare these views, not the blueprint: a hand edit or a rendering bug in one
template shows up here exactly as the engine would see it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlsplit

from tasks.planning.manifests import cmdline
from tasks.planning.manifests.common import ENGINE_CONTAINER, LWS_NAME_LABEL, identify
from tasks.planning.topology import ROLE_LABEL

# The engines' own defaults, for flags a manifest leaves out.
VLLM_DEFAULTS = {"--dtype": "auto", "--kv-cache-dtype": "auto", "--block-size": "16", "--port": "8000",
                 "--tensor-parallel-size": "1", "--pipeline-parallel-size": "1", "--nnodes": "1",
                 "--data-parallel-size": "1"}
SGLANG_DEFAULTS = {"--dtype": "auto", "--kv-cache-dtype": "auto", "--page-size": "1", "--port": "30000",
                   "--tp-size": "1", "--pp-size": "1", "--dp-size": "1", "--nnodes": "1",
                   "--disaggregation-bootstrap-port": "8998", "--disaggregation-prefill-pp": "1"}
_CACHE_DTYPE_ALIASES = {"fp8": "fp8_e4m3", "bfloat16": "bf16", "float16": "fp16"}


@dataclass
class EngineView:
    where: str
    role: str  # the pdlift.io/role label of the LWS: prefill | decode
    leader: bool
    lws: dict
    template: dict
    container: dict
    engine: str  # vllm | sglang | unknown
    argv: list[str]
    flags: dict[str, list[str]]

    def flag(self, name: str) -> str:
        values = self.flags.get(name)
        if values is not None:
            return values[0] if values else "true"
        defaults = VLLM_DEFAULTS if self.engine == "vllm" else SGLANG_DEFAULTS
        return defaults.get(name, "")

    @property
    def env(self) -> dict[str, str]:
        out = {}
        for e in self.container.get("env") or []:
            if "value" in e:
                out[e["name"]] = str(e["value"])
            elif (e.get("valueFrom") or {}).get("fieldRef"):
                out[e["name"]] = "fieldRef:" + e["valueFrom"]["fieldRef"].get("fieldPath", "")
        return out

    @property
    def model(self) -> str:
        if self.engine == "vllm":
            pos = cmdline.positionals(self.argv)
            return pos[2] if len(pos) > 2 else self.flag("--model")
        return self.flag("--model-path")

    @property
    def served_name(self) -> str:
        return self.flag("--served-model-name") or self.model

    @property
    def kv_cache_dtype(self) -> str:
        value = self.flag("--kv-cache-dtype")
        return _CACHE_DTYPE_ALIASES.get(value, value)

    @property
    def block_size(self) -> str:
        return self.flag("--block-size" if self.engine == "vllm" else "--page-size")

    @property
    def port(self) -> int:
        return int(self.flag("--port") or 0)

    @property
    def attention_tp(self) -> int:
        """The TP that shards the KV heads (SGLang DP attention splits --tp-size over --dp-size)."""
        if self.engine == "vllm":
            return int(self.flag("--tensor-parallel-size"))
        tp = int(self.flag("--tp-size"))
        return tp // int(self.flag("--dp-size")) if "--enable-dp-attention" in self.flags else tp

    @property
    def pp(self) -> int:
        return int(self.flag("--pipeline-parallel-size" if self.engine == "vllm" else "--pp-size"))

    def kv_config(self) -> dict:
        """vLLM's --kv-transfer-config (empty when missing or not JSON)."""
        try:
            value = json.loads(self.flag("--kv-transfer-config") or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    @property
    def kv_library(self) -> str:
        if self.engine == "vllm":
            connector = str(self.kv_config().get("kv_connector", ""))
            return "mooncake" if connector.startswith("Mooncake") else "nixl" if "Nixl" in connector else connector
        return self.flag("--disaggregation-transfer-backend")

    @property
    def bootstrap_port(self) -> int:
        if self.engine == "sglang":
            return int(self.flag("--disaggregation-bootstrap-port"))
        if self.kv_library == "mooncake":
            return int(self.env.get("VLLM_MOONCAKE_BOOTSTRAP_PORT", "8998"))
        return int(self.env.get("VLLM_NIXL_SIDE_CHANNEL_PORT", "5600"))


def _engine_of(argv: list[str]) -> str:
    if argv[:2] == ["vllm", "serve"]:
        return "vllm"
    if "sglang.launch_server" in argv[:4]:
        return "sglang"
    return "unknown"


def engines(manifests: list[dict]) -> list[EngineView]:
    out = []
    for obj in manifests:
        if obj.get("kind") != "LeaderWorkerSet":
            continue
        role = ((obj.get("metadata") or {}).get("labels") or {}).get(ROLE_LABEL, "")
        lwt = (obj.get("spec") or {}).get("leaderWorkerTemplate") or {}
        for leader, key in ((True, "leaderTemplate"), (False, "workerTemplate")):
            template = lwt.get(key) or (lwt.get("workerTemplate") if leader else None)
            if not template:
                continue
            containers = (template.get("spec") or {}).get("containers") or []
            container = next((x for x in containers if x.get("name") == ENGINE_CONTAINER),
                             containers[0] if containers else {})
            argv = cmdline.argv(container)
            out.append(EngineView(f"{identify(obj)} ({'leader' if leader else 'worker'})", role, leader, obj,
                                  template, container, _engine_of(argv), argv, cmdline.flags(argv)))
    return out


@dataclass
class RouterView:
    where: str
    deployment: dict
    container: dict
    argv: list[str]

    @property
    def port(self) -> int:
        return int(cmdline.flags(self.argv).get("--port", ["0"])[0])

    def workers(self, flag: str) -> list[tuple[str, int | None, int | None]]:
        """(host, port, bootstrap port) per ``--prefill``/``--decode`` occurrence."""
        out = []
        for values in cmdline.repeated(self.argv, flag):
            url = urlsplit(values[0]) if values else urlsplit("")
            boot = int(values[1]) if len(values) > 1 and values[1].isdigit() else None
            out.append((url.hostname or "", url.port, boot))
        return out


def routers(manifests: list[dict]) -> list[RouterView]:
    out = []
    for obj in manifests:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if obj.get("kind") == "Deployment" and labels.get("app.kubernetes.io/component") == "router":
            containers = obj["spec"]["template"]["spec"].get("containers") or [{}]
            out.append(RouterView(identify(obj), obj, containers[0], cmdline.argv(containers[0])))
    return out


def service_for(manifests: list[dict], host: str) -> dict | None:
    """The rendered Service a cluster DNS name ``svc.ns[.svc.cluster.local]`` points at."""
    parts = host.split(".")
    if len(parts) < 2:
        return None
    for obj in manifests:
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "Service" and meta.get("name") == parts[0] and meta.get("namespace") == parts[1]:
            return obj
    return None


def lws_selected(service: dict, manifests: list[dict]) -> dict | None:
    """The LeaderWorkerSet whose pods the Service selects (by the LWS name label)."""
    name = ((service.get("spec") or {}).get("selector") or {}).get(LWS_NAME_LABEL)
    ns = (service.get("metadata") or {}).get("namespace")
    for obj in manifests:
        if obj.get("kind") == "LeaderWorkerSet" and obj["metadata"].get("name") == name \
                and obj["metadata"].get("namespace") == ns:
            return obj
    return None
