"""Per-deployment latency and fault settings, and name resolution without DNS.

Sources, later ones win, read at use time (so a test can change the file while engines run):

1. defaults (``LatencyModel()``, ``Faults()``);
2. env ``PDLIFT_SANDBOX_LATENCY`` and ``PDLIFT_SANDBOX_FAULTS``: JSON objects (the pod's env);
3. ``$PDLIFT_STATE_DIR/sandbox/engines.json``::

       {"rules": [{"match": {"namespace": "pdlift-green", "role": "prefill"},
                   "latency": {"tpot_scale": 1.2}, "faults": {"tcp_fallback": true}}]}

   Every rule whose ``match`` keys all equal the engine's identity applies, in order. Identity
   keys: ``engine`` (vllm, sglang, vllm-router, sglang-router, mooncake-master), ``role``
   (prefill, decode, both, mixed, router, master), ``namespace`` (env POD_NAMESPACE or
   PDLIFT_SANDBOX_NAMESPACE), ``pod`` (env POD_NAME or HOSTNAME), ``port`` (as a string). A match
   value may be a list (any of). ``args_contain`` matches a substring of the engine's command line
   (a candidate told apart from the version it replaces in the same pods by a flag it adds). This
   is a test's aim for a fault, not a behaviour of any engine: it changes nothing an engine says.

Faults (all off by default):
    crash_at_start: str | bool   exit 1 at start with this message
    slow_start_s: float          /health (and the API) answer 503 for this long after they begin to listen
    exit_after_requests: int     the process exits (code 1) after serving this many requests
    exit_once: bool              ... only the first time for this pod (a marker in the state dir)
    tcp_fallback: bool           the engine cannot use EFA (no devices in the pod, or a transfer
                                 engine built without it): Mooncake falls back to TCP silently
                                 (the generic wheels, kvcache-ai/Mooncake#2070), NIXL's LIBFABRIC
                                 picks libfabric's tcp provider, or with FI_PROVIDER=efa fails to
                                 start (kv-path-proof.md, finding 1); the EFA counters stay flat
    error_rate: float            this fraction of requests fail (deterministic: every 1/rate-th)
    error_mode: "http" | "stream"  HTTP 500 before streaming, or an error event after token 1
    recompute: bool              decode recomputes the prefill instead of loading the KV (a
                                 decode started without the connector): local_compute grows by
                                 the prompt, no KV moves, the answer is the same, only slower
    kv_transfer_fail: bool       every KV transfer to this decode engine fails (counted by the
                                 engine's failure counters; with kv_load_failure_policy "fail"
                                 or on SGLang the request gets HTTP 500)
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from sandbox.engines.latency import LatencyModel

REPO_ROOT = Path(__file__).resolve().parents[2]


def state_dir() -> Path:
    return Path(os.environ.get("PDLIFT_STATE_DIR") or REPO_ROOT / ".pdlift")


def sandbox_dir() -> Path:
    return state_dir() / "sandbox"


@dataclass(frozen=True)
class Faults:
    crash_at_start: str | bool = False
    slow_start_s: float = 0.0
    exit_after_requests: int = 0
    exit_once: bool = False
    tcp_fallback: bool = False
    error_rate: float = 0.0
    error_mode: str = "http"
    recompute: bool = False
    kv_transfer_fail: bool = False

    @classmethod
    def from_dict(cls, data: dict) -> "Faults":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown fault(s) {unknown}; known: {sorted(known)}")
        if data.get("error_mode", "http") not in ("http", "stream"):
            raise ValueError("error_mode must be 'http' or 'stream'")
        return cls(**data)


def identity(engine: str, role: str, port: int | None) -> dict[str, str]:
    return {
        "engine": engine,
        "role": role,
        "namespace": os.environ.get("POD_NAMESPACE") or os.environ.get("PDLIFT_SANDBOX_NAMESPACE", ""),
        "pod": os.environ.get("POD_NAME") or os.environ.get("HOSTNAME", ""),
        "port": "" if port is None else str(port),
        "args": " ".join(sys.argv[1:]),
    }


def _env_json(name: str) -> dict:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return {}
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object")
    return value


def _matches(match: dict, ident: dict[str, str]) -> bool:
    for key, want in match.items():
        if key == "args_contain":
            if str(want) not in ident.get("args", ""):
                return False
            continue
        wanted = [str(w) for w in want] if isinstance(want, list) else [str(want)]
        if ident.get(key, "") not in wanted:
            return False
    return True


class Settings:
    """The current latency model and faults for one engine identity, re-read when the file changes."""

    def __init__(self, ident: dict[str, str]):
        self.ident = ident
        self._stamp: tuple | None = None
        self._latency = LatencyModel()
        self._faults = Faults()
        self.reload()

    def _file(self) -> Path:
        return sandbox_dir() / "engines.json"

    def _file_stamp(self) -> tuple | None:
        try:
            st = self._file().stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def reload(self) -> None:
        latency = dict(_env_json("PDLIFT_SANDBOX_LATENCY"))
        faults = dict(_env_json("PDLIFT_SANDBOX_FAULTS"))
        stamp = self._file_stamp()
        if stamp is not None:
            try:
                rules = json.loads(self._file().read_text()).get("rules", [])
            except (OSError, ValueError):
                rules = []  # a half-written file: keep env settings, retry on the next change
            for rule in rules:
                if _matches(rule.get("match", {}), self.ident):
                    latency.update(rule.get("latency", {}))
                    faults.update(rule.get("faults", {}))
        self._latency = LatencyModel.from_dict(latency)
        self._faults = Faults.from_dict(faults)
        self._stamp = stamp

    def _fresh(self) -> None:
        if self._file_stamp() != self._stamp:
            self.reload()

    @property
    def latency(self) -> LatencyModel:
        self._fresh()
        return self._latency

    @property
    def faults(self) -> Faults:
        self._fresh()
        return self._faults


def resolve_host(name: str) -> str:
    """An address for ``name`` without DNS: IP literals, localhost, or the sandbox hosts map.

    The map is env ``PDLIFT_SANDBOX_HOSTS`` (JSON {name: ip or [ips]}) merged with
    ``$PDLIFT_STATE_DIR/sandbox/hosts.json`` (written by the Kubernetes stand-in for pod and
    Service names). Cluster-domain suffixes are tried shorter as well, and a short name as
    ``<name>.<pod namespace>``.
    """
    name = name.strip().rstrip(".").lower()
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    if name == "localhost":
        return "127.0.0.1"
    table: dict[str, str] = {}
    path = sandbox_dir() / "hosts.json"
    if path.exists():
        try:
            table.update(json.loads(path.read_text()))
        except ValueError:
            pass
    table.update(_env_json("PDLIFT_SANDBOX_HOSTS"))
    candidates = [name]
    for suffix in (".cluster.local", ".svc"):
        if candidates[-1].endswith(suffix):
            candidates.append(candidates[-1][: -len(suffix)])
    namespace = os.environ.get("POD_NAMESPACE") or os.environ.get("PDLIFT_SANDBOX_NAMESPACE")
    if namespace and "." not in name:  # a short Service name means one in the pod's namespace
        candidates.append(f"{name}.{namespace}")
    for candidate in candidates:
        if candidate in table:
            value = table[candidate]  # a Service may list several endpoints: take the first
            return value[0] if isinstance(value, list) else value
    raise LookupError(f"cannot resolve {name!r}: the sandbox does no DNS (add it to hosts.json)")


def bind_address() -> str:
    """The node address this engine listens on; loopback only, whatever --host says."""
    address = os.environ.get("PDLIFT_SANDBOX_BIND", "127.0.0.1")
    if not ipaddress.ip_address(address).is_loopback:
        raise SystemExit(f"PDLIFT_SANDBOX_BIND={address} is not a loopback address")
    return address


def advertised_address() -> str:
    """The address peers should use for this pod (POD_IP when it is loopback, else the bind)."""
    pod_ip = os.environ.get("POD_IP", "")
    try:
        if pod_ip and ipaddress.ip_address(pod_ip).is_loopback:
            return pod_ip
    except ValueError:
        pass
    return bind_address()
