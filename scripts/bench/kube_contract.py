#!/usr/bin/env python3
"""The Kubernetes stand-in (``sandbox/kube``) against a real API server (v1.20.2): the contract bench.

    scripts/setup-kube-apiserver                       # once: builds the control plane (35-60 min)
    .venv/bin/python scripts/bench/kube_contract.py [--state DIR] [--table FILE] [--keep]

Starts, on free loopback ports: etcd (Debian's), kube-apiserver, kube-controller-manager (garbage
collection, namespaces, Deployments) and kube-scheduler from ``$PDLIFT_STATE_DIR/kube-apiserver/bin``
and, beside them, the stand-in (``python -m sandbox.kube --no-system-node``: no nodes on either
side). Installs the LeaderWorkerSet CRD on the real server (``blueprints/crds``, downgraded for
1.20: no ``default: ""``, list-map keys required). Then sends the same requests to both, mostly
through the product's own adapters (``KubeApply``, ``KubeNodes``, ``api_client_from_kubeconfig``):
server-side apply of the four rendered stacks (vllm/sglang x mooncake/nixl), conflicts, deletes
with each propagation policy, watches, ``kubectl create``/``apply``; and compares what came back:
status codes, reasons, causes, and the fields the product reads.

Prints a Markdown table (case | real apiserver | stand-in | same?) and, last, ``contract: N cases,
M same, K differ``. Exit 0 even when answers differ (it is a measurement); 1 when it could not run.
Not in CI: the control plane takes 35-60 minutes to build. Loopback only; every process it starts
is stopped at exit; every wait is bounded.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
for key, value in {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                   "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_DEFAULT_REGION": "us-east-2", "KUBECTL_TELEMETRY": "false",
                   "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}.items():
    os.environ.setdefault(key, value)
os.environ.pop("AWS_PROFILE", None)
for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
    os.environ.pop(proxy, None)

import yaml  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from blueprints.loader import load_blueprint  # noqa: E402
from sandbox.ports import free_port  # noqa: E402
from tasks.adapters.kube_apply import FIELD_MANAGER, KubeApply  # noqa: E402
from tasks.adapters.kubeconfig import api_client_from_kubeconfig  # noqa: E402
from tasks.adapters.kube_errors import HttpStatus, translate  # noqa: E402
from tasks.adapters.kube_nodes import KubeNodes  # noqa: E402
from tasks.planning.manifests import render_stack, to_yaml  # noqa: E402

CLUSTER = "pdlift-contract"
KUBECTL = Path(sys.executable).parent / "kubectl"
STATE = Path(os.environ.get("PDLIFT_STATE_DIR") or REPO / ".pdlift")
BIN = STATE / "kube-apiserver" / "bin"
CRD = REPO / "blueprints" / "crds" / "leaderworkerset-v1.yaml"
COMBOS = [(e, c) for e in ("vllm", "sglang") for c in ("mooncake", "nixl")]
IMAGE = "registry.example/tool@sha256:" + "ab" * 32


def log(msg: str) -> None:
    print(f"kube_contract: {msg}", file=sys.stderr, flush=True)


def wait_for(pred, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except Exception as e:  # noqa: BLE001 (a server still starting answers oddly)
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


def poll(pred, timeout: float, interval: float = 0.25):
    """``pred()`` until truthy or ``timeout``; returns the last value (no raise)."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


# --- processes ------------------------------------------------------------------------------------

class Procs:
    def __init__(self, logs: Path):
        self.logs, self.items = logs, []

    def start(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        out = open(self.logs / f"{name}.log", "wb")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env or os.environ.copy(),
                             cwd=REPO, start_new_session=True)
        self.items.append((name, p, out))
        return p

    def alive(self, name: str) -> bool:
        return any(n == name and p.poll() is None for n, p, _ in self.items)

    def stop_all(self) -> None:
        for name, p, out in reversed(self.items):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    p.wait(timeout=5)
            out.close()
        self.items.clear()


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
            "-days", "2", "-subj", "/CN=pdlift-contract-ca", cwd=d)
    for name, subj, ext in (
            ("apiserver", "/CN=kube-apiserver",
             "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
            ("admin", "/O=system:masters/CN=pdlift-contract-admin", "extendedKeyUsage=clientAuth\n")):
        (d / f"{name}.ext").write_text(ext)
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", subj, cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def admin_kubeconfig(pki: Path, server: str, path: Path) -> None:
    b64 = lambda f: base64.b64encode((pki / f).read_bytes()).decode()  # noqa: E731
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": CLUSTER, "cluster": {"server": server, "certificate-authority-data": b64("ca.crt")}}],
        "users": [{"name": "admin", "user": {"client-certificate-data": b64("admin.crt"),
                                             "client-key-data": b64("admin.key")}}],
        "contexts": [{"name": CLUSTER, "context": {"cluster": CLUSTER, "user": "admin"}}],
        "current-context": CLUSTER}, sort_keys=False))
    path.chmod(0o600)


def start_real(procs: Procs, work: Path) -> tuple[Path, dict]:
    """etcd + kube-apiserver (+ controller-manager, scheduler); returns (kubeconfig, timings)."""
    for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        if not (BIN / b).is_file():
            raise SystemExit(f"kube_contract: {BIN / b} is missing: run scripts/setup-kube-apiserver first")
    etcd = shutil.which("etcd") or "/usr/bin/etcd"
    if not Path(etcd).is_file():
        raise SystemExit("kube_contract: etcd is missing: run scripts/setup-kube-apiserver first")
    pki = work / "pki"
    make_pki(pki)
    client_port, peer_port = free_port(), free_port()
    t0 = time.monotonic()
    procs.start("etcd", ["nice", "-n", "19", etcd, "--name", "contract", "--data-dir", str(work / "etcd"),
                         "--listen-client-urls", f"http://127.0.0.1:{client_port}",
                         "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
                         "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                         "--initial-cluster", f"contract=http://127.0.0.1:{peer_port}",
                         "--logger", "zap", "--log-outputs", "stderr"])

    def etcd_ok():
        with urllib.request.urlopen(f"http://127.0.0.1:{client_port}/health", timeout=2) as r:
            return json.loads(r.read()).get("health") == "true"
    wait_for(etcd_ok, 30, "etcd /health")
    timings = {"etcd_s": round(time.monotonic() - t0, 1)}
    port = free_port()
    t1 = time.monotonic()
    procs.start("kube-apiserver", [
        "nice", "-n", "19", str(BIN / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{client_port}", "--storage-backend=etcd3",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}", "--insecure-port=0",
        f"--tls-cert-file={pki}/apiserver.crt", f"--tls-private-key-file={pki}/apiserver.key",
        f"--client-ca-file={pki}/ca.crt",
        f"--service-account-key-file={pki}/sa.pub", f"--service-account-signing-key-file={pki}/sa.key",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=Node,RBAC", "--allow-privileged=true",
        "--enable-priority-and-fairness=false", f"--cert-dir={work}/certs", "--profiling=false"])
    server = f"https://127.0.0.1:{port}"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))

    def ready():
        if not procs.alive("kube-apiserver"):
            raise SystemExit(f"kube_contract: kube-apiserver exited; see {procs.logs}/kube-apiserver.log")
        with opener.open(server + "/readyz", timeout=3) as r:
            return r.status == 200
    wait_for(ready, 180, "kube-apiserver /readyz", interval=0.5)
    timings["apiserver_ready_s"] = round(time.monotonic() - t1, 1)
    kubeconfig = work / "real.kubeconfig"
    admin_kubeconfig(pki, server, kubeconfig)
    procs.start("kube-controller-manager", [
        "nice", "-n", "19", str(BIN / "kube-controller-manager"), f"--kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", "--port=0", "--secure-port=0", "--leader-elect=false",
        f"--service-account-private-key-file={pki}/sa.key", f"--root-ca-file={pki}/ca.crt",
        "--use-service-account-credentials=false", "--profiling=false",
        "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service,-route,-csrsigning"])
    procs.start("kube-scheduler", [
        "nice", "-n", "19", str(BIN / "kube-scheduler"), f"--kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", "--port=0", "--secure-port=0", "--leader-elect=false", "--profiling=false"])
    return kubeconfig, timings


def start_standin(procs: Procs, work: Path) -> tuple[Path, dict]:
    state = work / "standin"
    kube_dir = state / "sandbox" / "kube"
    kube_dir.mkdir(parents=True, exist_ok=True)
    sts = f"http://127.0.0.1:{free_port()}"  # nothing listens: the stand-in checks signatures itself
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.monotonic()
    procs.start("standin", [sys.executable, "-m", "sandbox.kube", "--state-dir", str(state), "--host", "127.0.0.1",
                            "--port", str(free_port()), "--sts-endpoint", sts, "--cluster-name", CLUSTER,
                            "--no-system-node"], env=env)
    wait_for(lambda: (kube_dir / "server.pid").exists() and (kube_dir / "kubeconfig").exists(), 60,
             "the stand-in to start")
    return kube_dir / "kubeconfig", {"standin_ready_s": round(time.monotonic() - t0, 1)}


# --- the LWS CRD for 1.20 ---------------------------------------------------------------------------

def downgrade_crd(schema):
    """A CRD generated for >= 1.30 made acceptable to 1.20: drop
    ``default: ""`` and make list-map keys required (1.20 wants them required or defaulted)."""
    if isinstance(schema, dict):
        if schema.get("default") == "":
            del schema["default"]
        if schema.get("x-kubernetes-list-type") == "map" and isinstance(schema.get("items"), dict):
            items = schema["items"]
            required = set(items.get("required", []))
            for k in schema.get("x-kubernetes-list-map-keys", []):
                prop = items.get("properties", {}).get(k, {})
                if "default" not in prop or prop.get("default") == "":
                    required.add(k)
            items["required"] = sorted(required)
        for v in schema.values():
            downgrade_crd(v)
    elif isinstance(schema, list):
        for v in schema:
            downgrade_crd(v)
    return schema


def crd_for_120(docs: list[dict]) -> list[dict]:
    """The repository's CRD, downgraded for 1.20 (its root ``metadata`` schema is already the
    ``{type: object}`` every API server insists on: apiextensions-apiserver
    pkg/apiserver/schema/validation.go validateStructuralMetadataInvariants)."""
    for d in docs:
        downgrade_crd(d)
    return docs


# --- one side ---------------------------------------------------------------------------------------

class Side:
    def __init__(self, name: str, kubeconfig: Path):
        self.name, self.kubeconfig = name, kubeconfig
        self.api = api_client_from_kubeconfig(str(kubeconfig), CLUSTER)  # the product's own entry point
        self.kube = KubeApply(self.api)
        self.nodes = KubeNodes(self.api)

    def req(self, method: str, path: str, query: list | None = None, body=None, ctype: str | None = None,
            timeout: float = 30, raw: bool = False):
        """(status, parsed body) of one request with the product's ApiClient (its credentials)."""
        headers = {"Accept": "application/json"}
        if ctype:
            headers["Content-Type"] = ctype
        try:
            r = self.api.param_serialize(method, path, query_params=query or [], header_params=headers,
                                         body=body, auth_settings=["BearerToken"])
            resp = self.api.call_api(*r, _request_timeout=timeout)
            status, data = resp.status, resp.read()
        except ApiException as e:
            status, data = e.status, e.body or b""
        if isinstance(data, str):
            data = data.encode()
        if raw:
            return status, data.decode(errors="replace")
        try:
            return status, json.loads(data or b"{}")
        except ValueError:
            return status, data.decode(errors="replace")[:200]

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 60) -> dict:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        try:
            p = subprocess.run([str(KUBECTL), *args], env=env, capture_output=True, text=True, input=stdin,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"rc": "timeout"}
        return {"rc": p.returncode, "out": norm_text(p.stdout), "err": norm_text(p.stderr)}


def norm_text(s: str) -> str:
    lines = []
    for line in s.splitlines():
        if re.match(r"^(Warning|WARNING): version difference", line):
            continue
        line = re.sub(r"\b\d+(\.\d+)?(s|m|h|d)\b", "<age>", line)
        line = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uid>", line)
        line = re.sub(r"\s+", " ", line).strip()
        if line:
            lines.append(line)
    return " / ".join(lines)


def status_of(code: int, doc) -> dict:
    """What the product reads of an answer: the code and, for a Status, reason/details/causes."""
    out: dict = {"code": code}
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        out["reason"] = doc.get("reason", "")
        details = doc.get("details") or {}
        causes = details.get("causes") or []
        if causes:
            out["causes"] = sorted({(c.get("reason", "<no 'reason' key>"), c.get("field", ""), c.get("message", ""))
                                    for c in causes})
    return out



def answer_of(code: int, doc, product_error: bool = False) -> dict:
    """``status_of`` plus the answer's message, and (``product_error``) the class the product makes of it."""
    out = status_of(code, doc)
    out["message"] = doc.get("message") if isinstance(doc, dict) else doc
    if product_error:
        out["product_error"] = translate_class(code, doc)
    return out


def pdlift_error(fn) -> str:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the class is the observation)
        return type(e).__name__
    return "ok"


def translate_class(code: int, doc) -> str:
    if 200 <= code <= 299:
        return "ok"
    return type(translate(HttpStatus(code, json.dumps(doc) if isinstance(doc, dict) else str(doc)), "x")).__name__


def managers(obj: dict) -> list:
    return sorted({(m.get("manager", ""), m.get("operation", "")) for m in
                   (obj.get("metadata") or {}).get("managedFields") or []})


def path_of(base: str, kind: str, name: str | None, ns: str | None) -> str:
    from tasks.adapters.kube_apply import resource_path
    return resource_path(base, kind, name, ns)


def diff_paths(sent, stored, prefix: str = "") -> list[str]:
    """Paths in what was sent whose stored value is missing or different (pruned, normalised)."""
    out = []
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [prefix or "."]
        for k, v in sent.items():
            if k not in stored:
                out.append(f"{prefix}.{k} (dropped)")
            else:
                out += diff_paths(v, stored[k], f"{prefix}.{k}")
    elif isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [f"{prefix} (list changed)"]
        for i, (a, b) in enumerate(zip(sent, stored)):
            out += diff_paths(a, b, f"{prefix}[{i}]")
    elif sent != stored:
        out.append(f"{prefix} ({sent!r} -> {stored!r})")
    return out


# --- the product's objects ----------------------------------------------------------------------------

def stacks() -> dict[str, list[dict]]:
    bp = load_blueprint(REPO / "blueprints" / "glm51-fp8-2p2d.yaml")
    out = {}
    for engine, connector in COMBOS:
        variant = bp.model_copy(update={
            "name": f"k-{engine}-{connector}",
            "engine": bp.engine.model_copy(update={"name": engine}),
            "kv_transfer": bp.kv_transfer.model_copy(update={"connector": connector})})
        out[f"{engine}-{connector}"] = render_stack(variant, "blue", bp.staging.local_path)
    return out


def find(objs: list[dict], kind: str, name: str | None = None) -> dict:
    return next(o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name))


def meta_of(o: dict) -> tuple[str, str | None]:
    return o["metadata"]["name"], o["metadata"].get("namespace")


# --- the cases ------------------------------------------------------------------------------------------

CASES: list[tuple[str, object]] = []


def case(title: str):
    def register(fn):
        CASES.append((title, fn))
        return fn
    return register


STACKS = stacks()
FIRST = "vllm-mooncake"


def _stack_case(key: str):
    def apply_stack(s: Side):
        rows = []
        for o in STACKS[key]:
            name, ns = meta_of(o)
            try:
                a = s.kube.apply(o)
                rows.append(f"{o['kind']}/{name}: ok rv={'yes' if a.resource_version else 'no'} gen={a.generation}")
            except Exception as e:  # noqa: BLE001
                rows.append(f"{o['kind']}/{name}: {type(e).__name__}: {str(e)[:160]}")
        return rows

    def stored(s: Side):
        out = {}
        for o in STACKS[key]:
            name, ns = meta_of(o)
            got = s.kube.get(o["apiVersion"], o["kind"], name, ns) or {}
            sent = copy.deepcopy(o)
            d = diff_paths(sent, got)
            if d:
                out[f"{o['kind']}/{name}"] = d
        return out or "every rendered field stored as sent"
    case(f"SSA stack {key}: each object applied (rv, generation)")(apply_stack)
    case(f"SSA stack {key}: rendered fields stored unchanged")(stored)


for _key in STACKS:
    _stack_case(_key)


@case("discovery /apis/leaderworkerset.x-k8s.io/v1 (name, namespaced, kind, verbs)")
def c_discovery(s: Side):
    code, doc = s.req("GET", "/apis/leaderworkerset.x-k8s.io/v1")
    return {"code": code, "resources": sorted((r["name"], r["namespaced"], r["kind"], tuple(sorted(r.get("verbs", []))))
                                              for r in doc.get("resources", []))}


@case("managedFields after SSA: ServiceAccount, Service, LWS (manager, operation)")
def c_managers(s: Side):
    objs = STACKS[FIRST]
    out = {}
    for kind, name in (("ServiceAccount", "pdlift-engine"), ("Service", "prefill-leader"),
                       ("LeaderWorkerSet", "prefill")):
        o = find(objs, kind, name)
        out[f"{kind}/{name}"] = managers(s.kube.get(o["apiVersion"], kind, *meta_of(o)) or {})
    return out


@case("managedFields after SSA: Deployment router, after its controller ran (manager, operation)")
def c_managers_deploy(s: Side):
    o = find(STACKS[FIRST], "Deployment")
    time.sleep(3)
    return managers(s.kube.get(o["apiVersion"], "Deployment", *meta_of(o)) or {})


@case("fieldsV1 of pdlift's Apply entry (Service prefill-leader), exactly")
def c_fields_v1(s: Side):
    o = find(STACKS[FIRST], "Service", "prefill-leader")
    got = s.kube.get("v1", "Service", *meta_of(o)) or {}
    return [m.get("fieldsV1") for m in got["metadata"].get("managedFields") or [] if m.get("manager") == FIELD_MANAGER]


@case("re-apply the unchanged stack: objects whose resourceVersion changed")
def c_reapply(s: Side):
    changed = []
    for o in STACKS[FIRST]:
        before = (s.kube.get(o["apiVersion"], o["kind"], *meta_of(o)) or {}).get("metadata", {})
        a = s.kube.apply(o)
        if a.resource_version != before.get("resourceVersion"):
            changed.append(f"{o['kind']}/{o['metadata']['name']}")
    return changed or "none"


@case("dry-run apply (replicas 3 on LWS prefill): answer's replicas, stored resourceVersion unchanged")
def c_dry_run(s: Side):
    o = copy.deepcopy(find(STACKS[FIRST], "LeaderWorkerSet", "prefill"))
    before = s.kube.get(o["apiVersion"], o["kind"], *meta_of(o))["metadata"]["resourceVersion"]
    o["spec"]["replicas"] = 3
    name, ns = meta_of(o)
    code, doc = s.req("PATCH", path_of(o["apiVersion"], o["kind"], name, ns),
                      [("fieldManager", FIELD_MANAGER), ("force", "true"), ("dryRun", "All")], o,
                      "application/apply-patch+yaml")
    after = s.kube.get(o["apiVersion"], o["kind"], name, ns)
    return {"code": code, "answer_replicas": (doc.get("spec") or {}).get("replicas"),
            "stored_rv_unchanged": after["metadata"]["resourceVersion"] == before,
            "stored_replicas": after["spec"].get("replicas")}


def _other_apply(s: Side, o: dict, force: bool, manager: str = "hand-edit"):
    name, ns = meta_of(o)
    q = [("fieldManager", manager)] + ([("force", "true")] if force else [])
    return s.req("PATCH", path_of(o["apiVersion"], o["kind"], name, ns), q, o, "application/apply-patch+yaml")


def _replicas_patch(o: dict, n: int) -> dict:
    return {"apiVersion": o["apiVersion"], "kind": o["kind"],
            "metadata": {"name": o["metadata"]["name"], "namespace": o["metadata"]["namespace"]},
            "spec": {"replicas": n}}


@case("SSA conflict: another manager sets Deployment .spec.replicas (no force)")
def c_conflict_deploy(s: Side):
    o = find(STACKS[FIRST], "Deployment")
    code, doc = _other_apply(s, _replicas_patch(o, 5), force=False)
    out = answer_of(code, doc, product_error=True)
    return out


@case("SSA conflict: another manager sets LeaderWorkerSet .spec.replicas (no force)")
def c_conflict_lws(s: Side):
    o = find(STACKS[FIRST], "LeaderWorkerSet", "decode")
    code, doc = _other_apply(s, _replicas_patch(o, 4), force=False)
    out = answer_of(code, doc)
    return out


@case("SSA forced by another manager, then the product re-applies (replicas, managers)")
def c_conflict_forced(s: Side):
    o = find(STACKS[FIRST], "LeaderWorkerSet", "decode")
    code, doc = _other_apply(s, _replicas_patch(o, 4), force=True)
    mid = {"code": code, "replicas": doc["spec"]["replicas"], "managers": managers(doc)}
    a = s.kube.apply(o)
    got = s.kube.get(o["apiVersion"], o["kind"], *meta_of(o))
    return {"forced": mid, "reapplied_replicas": got["spec"]["replicas"], "managers_after": managers(got),
            "rendered_replicas": o["spec"]["replicas"], "rv": bool(a.resource_version)}


@case("SSA with a label dropped from the configuration: label removed")
def c_dropped_field(s: Side):
    o = copy.deepcopy(find(STACKS[FIRST], "Service", "prefill-leader"))
    o["metadata"]["labels"]["pdlift.io/extra"] = "x"
    s.kube.apply(o)
    had = "pdlift.io/extra" in s.kube.get("v1", "Service", *meta_of(o))["metadata"]["labels"]
    s.kube.apply(find(STACKS[FIRST], "Service", "prefill-leader"))
    has = "pdlift.io/extra" in s.kube.get("v1", "Service", *meta_of(o))["metadata"]["labels"]
    return {"after_first": had, "after_second": has}


@case("annotate (merge patch, manager pdlift-promotion), then remove the annotation")
def c_annotate(s: Side):
    o = find(STACKS[FIRST], "LeaderWorkerSet", "prefill")
    name, ns = meta_of(o)
    s.kube.annotate(o["apiVersion"], o["kind"], name, ns, {"pdlift.io/promoted": "yes"})
    got = s.kube.get(o["apiVersion"], o["kind"], name, ns)
    set_ = (got["metadata"].get("annotations") or {}).get("pdlift.io/promoted")
    managers_set = managers(got)
    s.kube.annotate(o["apiVersion"], o["kind"], name, ns, {"pdlift.io/promoted": None})
    got2 = s.kube.get(o["apiVersion"], o["kind"], name, ns)
    return {"set": set_, "managers_after_set": managers_set,
            "removed": "pdlift.io/promoted" not in (got2["metadata"].get("annotations") or {}),
            "managers_after_removal": managers(got2)}


@case("PUT with a stale resourceVersion (Service)")
def c_stale_put(s: Side):
    o = find(STACKS[FIRST], "Service", "decode-leader")
    name, ns = meta_of(o)
    cur = s.kube.get("v1", "Service", name, ns)
    stale = copy.deepcopy(cur)
    s.kube.annotate("v1", "Service", name, ns, {"pdlift.io/bump": str(time.time())})
    stale["metadata"]["annotations"] = {**(stale["metadata"].get("annotations") or {}), "x": "y"}
    code, doc = s.req("PUT", path_of("v1", "Service", name, ns), None, stale, "application/json")
    out = status_of(code, doc)
    out["message"] = re.sub(name, "<name>", doc.get("message", "")) if isinstance(doc, dict) else doc
    out["product_error"] = translate_class(code, doc)
    return out


@case("POST an existing Namespace")
def c_create_existing(s: Side):
    ns = STACKS[FIRST][0]["metadata"]["name"]
    code, doc = s.req("POST", "/api/v1/namespaces", None, {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": ns}}, "application/json")
    out = answer_of(code, doc)
    out["details"] = {k: v for k, v in (doc.get("details") or {}).items() if k in ("name", "kind", "group")}
    return out


@case("GET a missing LeaderWorkerSet (raw; KubeApply.get)")
def c_get_missing(s: Side):
    ns = STACKS[FIRST][0]["metadata"]["name"]
    code, doc = s.req("GET", path_of("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "nope", ns))
    out = answer_of(code, doc)
    out["details"] = {k: v for k, v in (doc.get("details") or {}).items() if k in ("name", "kind", "group")}
    out["KubeApply.get"] = s.kube.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "nope", ns)
    return out


def _not_served(s: Side, path: str, obj: dict | None = None):
    if obj is None:
        code, doc = s.req("GET", path)
    else:
        code, doc = s.req("PATCH", path, [("fieldManager", FIELD_MANAGER), ("force", "true")], obj,
                          "application/apply-patch+yaml")
    out = answer_of(code, doc, product_error=True)
    return out


@case("not served: a version of the CRD's group that is not served (leaderworkerset.x-k8s.io/v9)")
def c_not_served(s: Side):
    ns = STACKS[FIRST][0]["metadata"]["name"]
    return _not_served(s, f"/apis/leaderworkerset.x-k8s.io/v9/namespaces/{ns}/leaderworkersets/x")


@case("not served: SSA into a group no CRD provides (the LWS CRD not installed)")
def c_not_served_group(s: Side):
    ns = STACKS[FIRST][0]["metadata"]["name"]
    obj = {"apiVersion": "leaderworkerset.example/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "x", "namespace": ns}, "spec": {}}
    return _not_served(s, f"/apis/leaderworkerset.example/v1/namespaces/{ns}/leaderworkersets/x", obj)


@case("not served: an unknown resource of a served group/version (apps/v1 widgets)")
def c_not_served_resource(s: Side):
    ns = STACKS[FIRST][0]["metadata"]["name"]
    return _not_served(s, f"/apis/apps/v1/namespaces/{ns}/widgets/x")


@case("SSA of a Service with an invalid name")
def c_invalid_name(s: Side):
    o = copy.deepcopy(find(STACKS[FIRST], "Service", "prefill-leader"))
    o["metadata"]["name"] = "Bad_Name"
    code, doc = s.req("PATCH", path_of("v1", "Service", "Bad_Name", o["metadata"]["namespace"]),
                      [("fieldManager", FIELD_MANAGER), ("force", "true")], o, "application/apply-patch+yaml")
    out = status_of(code, doc)
    out["product_error"] = translate_class(code, doc)
    return out


@case("SSA of a Deployment whose selector does not match its template")
def c_invalid_selector(s: Side):
    o = copy.deepcopy(find(STACKS[FIRST], "Deployment"))
    o["metadata"]["name"] = "router-bad"
    o["spec"]["selector"] = {"matchLabels": {"app": "something-else"}}
    code, doc = s.req("PATCH", path_of("apps/v1", "Deployment", "router-bad", o["metadata"]["namespace"]),
                      [("fieldManager", FIELD_MANAGER), ("force", "true")], o, "application/apply-patch+yaml")
    return status_of(code, doc)


@case("SSA of a LeaderWorkerSet with a wrongly typed field (size: \"two\")")
def c_invalid_lws(s: Side):
    o = copy.deepcopy(find(STACKS[FIRST], "LeaderWorkerSet", "prefill"))
    o["metadata"]["name"] = "prefill-bad"
    o["spec"]["leaderWorkerTemplate"]["size"] = "two"
    name, ns = meta_of(o)
    code, doc = s.req("PATCH", path_of(o["apiVersion"], o["kind"], name, ns),
                      [("fieldManager", FIELD_MANAGER), ("force", "true")], o, "application/apply-patch+yaml")
    return status_of(code, doc)


def _pods(s: Side, ns: str, selector: dict) -> list:
    return s.kube.pods(ns, selector)


def _router(key: str) -> dict:
    return find(STACKS[key], "Deployment")


@case("router Deployment: its pods appear (count), Pending, PodScheduled message (no nodes)")
def c_router_pods(s: Side):
    o = _router(FIRST)
    ns = o["metadata"]["namespace"]
    sel = o["spec"]["selector"]["matchLabels"]
    pods = poll(lambda: [p for p in _pods(s, ns, sel) if p.unschedulable], 30) or _pods(s, ns, sel)
    return {"pods": len(pods), "phases": sorted({p.phase for p in pods}),
            "unschedulable": sorted({p.unschedulable for p in pods})}


@case("events of the router pod (KubeApply.events: reasons)")
def c_events(s: Side):
    o = _router(FIRST)
    ns = o["metadata"]["namespace"]
    pods = _pods(s, ns, o["spec"]["selector"]["matchLabels"])
    if not pods:
        return "no pod"
    ev = poll(lambda: s.kube.events(ns, pods[0].name), 10)
    return sorted({(e.type, e.reason, e.object.split("/")[0]) for e in ev})


@case("log of a pod that never started (raw status; KubeApply.log_tail)")
def c_log_pending(s: Side):
    o = _router(FIRST)
    ns = o["metadata"]["namespace"]
    pods = _pods(s, ns, o["spec"]["selector"]["matchLabels"])
    if not pods:
        return "no pod"
    code, doc = s.req("GET", path_of("v1", "Pod", pods[0].name, ns) + "/log")
    out = status_of(code, doc)
    out["message"] = re.sub(re.escape(pods[0].name), "<pod>", doc.get("message", "")) if isinstance(doc, dict) else doc
    out["log_tail"] = s.kube.log_tail(ns, pods[0].name)
    return out


@case("fleet_gpus (nodes by label; pods by field selector status.phase!=...)")
def c_fleet(s: Side):
    nodes, pods = s.kube.fleet_gpus({"pdlift.io/role": "gpu"})
    return {"nodes": len(nodes), "gpu_pods": len(pods)}


def _delete_case(key: str, policy: str):
    def run(s: Side):
        o = _router(key)
        name, ns = meta_of(o)
        sel = o["spec"]["selector"]["matchLabels"]
        before = len(poll(lambda: _pods(s, ns, sel), 30))
        if policy == "Background":
            result = s.kube.delete("apps/v1", "Deployment", name, ns)  # the product's own call
            code = 200 if result else 404
        else:
            code, _ = s.req("DELETE", path_of("apps/v1", "Deployment", name, ns), None,
                            {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": policy},
                            "application/json")
        at_once = s.kube.get("apps/v1", "Deployment", name, ns)
        state = "gone" if at_once is None else {
            "deletionTimestamp": bool(at_once["metadata"].get("deletionTimestamp")),
            "finalizers": at_once["metadata"].get("finalizers") or []}
        gone = poll(lambda: s.kube.get("apps/v1", "Deployment", name, ns) is None, 30)
        if policy == "Orphan":
            time.sleep(3)
            left = _pods(s, ns, sel)
            code_rs, rs = s.req("GET", f"/apis/apps/v1/namespaces/{ns}/replicasets")
            dependents = [p for p in (rs.get("items") or [])] if code_rs == 200 else []
            owned = any(r.get("name") == name for d in dependents for r in d["metadata"].get("ownerReferences") or [])
            code_p, pl = s.req("GET", f"/api/v1/namespaces/{ns}/pods")
            owned = owned or any(r.get("name") == name and r.get("kind") == "Deployment"
                                 for p in pl.get("items") or [] for r in p["metadata"].get("ownerReferences") or [])
            return {"code": code, "pods_before": before, "right_after": state, "deployment_gone": bool(gone),
                    "pods_left": len(left), "a_dependent_still_owned_by_it": owned}
        left = poll(lambda: not _pods(s, ns, sel), 30)
        return {"code": code, "pods_before": before, "right_after": state, "deployment_gone": bool(gone),
                "pods_gone_within_30s": bool(left)}
    return run


case("delete router Deployment, Background (KubeApply.delete)")(_delete_case(FIRST, "Background"))
case("delete router Deployment, Foreground")(_delete_case("vllm-nixl", "Foreground"))
case("delete router Deployment, Orphan")(_delete_case("sglang-mooncake", "Orphan"))


@case("delete a LeaderWorkerSet (KubeApply.delete) and one that is gone")
def c_delete_lws(s: Side):
    o = find(STACKS[FIRST], "LeaderWorkerSet", "decode")
    name, ns = meta_of(o)
    first = s.kube.delete(o["apiVersion"], o["kind"], name, ns)
    gone = poll(lambda: s.kube.get(o["apiVersion"], o["kind"], name, ns) is None, 20)
    second = s.kube.delete(o["apiVersion"], o["kind"], name, ns)
    return {"first": first, "gone": bool(gone), "second": second}


@case("delete a namespace (KubeNodes): Terminating, hidden from namespaces(), apply refused, then gone")
def c_delete_ns(s: Side):
    objs = STACKS["sglang-nixl"]
    ns = objs[0]["metadata"]["name"]
    s.nodes.delete_namespace(ns)
    code, doc = s.req("GET", f"/api/v1/namespaces/{ns}")
    phase = (doc.get("status") or {}).get("phase") if code == 200 else code
    listed = ns in s.nodes.namespaces("pdlift.io/deployment")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late", "namespace": ns}}
    code2, doc2 = s.req("PATCH", path_of("v1", "ConfigMap", "late", ns),
                        [("fieldManager", FIELD_MANAGER), ("force", "true")], cm, "application/apply-patch+yaml")
    refused = status_of(code2, doc2)
    refused["product_error"] = translate_class(code2, doc2)
    gone = poll(lambda: s.req("GET", f"/api/v1/namespaces/{ns}")[0] == 404, 60, interval=0.5)
    again = pdlift_error(lambda: s.nodes.delete_namespace(ns))
    return {"phase_at_once": phase, "listed_by_namespaces()": listed, "apply_into_it": refused,
            "gone_within_60s": bool(gone), "delete_again": again}


# --- watches ----------------------------------------------------------------------------------------------

WATCH_NS = "k-watch"


def _events(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"type": "UNPARSEABLE", "object": {}})
    return out


def _cm(s: Side, name: str, labels: dict | None = None) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": WATCH_NS,
                                                                 "labels": labels or {}}, "data": {"k": "v"}}
    s.req("POST", f"/api/v1/namespaces/{WATCH_NS}/configmaps", None, body, "application/json")


def _watch_setup(s: Side) -> str:
    code, _ = s.req("GET", f"/api/v1/namespaces/{WATCH_NS}")
    if code == 404:
        s.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WATCH_NS}})
    code, doc = s.req("GET", f"/api/v1/namespaces/{WATCH_NS}/configmaps")
    return doc["metadata"]["resourceVersion"]


@case("watch from a resourceVersion: create, patch, delete (event types, rv order)")
def c_watch_rv(s: Side):
    rv = _watch_setup(s)
    _cm(s, "w1")
    s.req("PATCH", f"/api/v1/namespaces/{WATCH_NS}/configmaps/w1", None, {"data": {"k": "v2"}},
          "application/merge-patch+json")
    s.req("DELETE", f"/api/v1/namespaces/{WATCH_NS}/configmaps/w1")
    t0 = time.monotonic()
    code, text = s.req("GET", f"/api/v1/namespaces/{WATCH_NS}/configmaps",
                       [("watch", "1"), ("resourceVersion", rv), ("timeoutSeconds", "2")], raw=True, timeout=20)
    took = time.monotonic() - t0
    ev = [e for e in _events(text) if e.get("type") != "BOOKMARK"]
    rvs = [int((e["object"].get("metadata") or {}).get("resourceVersion", 0)) for e in ev]
    return {"code": code, "types": [(e["type"], e["object"].get("metadata", {}).get("name")) for e in ev],
            "rv_increasing": rvs == sorted(rvs) and len(set(rvs)) == len(rvs),
            "closed_after_timeoutSeconds": 1.5 <= took <= 6}


@case("watch without resourceVersion: existing objects as ADDED")
def c_watch_initial(s: Side):
    _watch_setup(s)
    _cm(s, "w2")
    _cm(s, "w3")
    code, text = s.req("GET", f"/api/v1/namespaces/{WATCH_NS}/configmaps",
                       [("watch", "1"), ("timeoutSeconds", "2")], raw=True, timeout=20)
    names = sorted((e["type"], e["object"]["metadata"]["name"]) for e in _events(text)
                   if e.get("type") != "BOOKMARK" and e["object"]["metadata"]["name"].startswith("w"))
    return {"code": code, "events": names}


@case("watch with a label selector: object leaves and re-enters it")
def c_watch_selector(s: Side):
    rv = _watch_setup(s)
    _cm(s, "w4", {"app": "x"})
    p = f"/api/v1/namespaces/{WATCH_NS}/configmaps/w4"
    s.req("PATCH", p, None, {"metadata": {"labels": {"app": "y"}}}, "application/merge-patch+json")
    s.req("PATCH", p, None, {"metadata": {"labels": {"app": "x"}}}, "application/merge-patch+json")
    code, text = s.req("GET", f"/api/v1/namespaces/{WATCH_NS}/configmaps",
                       [("watch", "1"), ("resourceVersion", rv), ("labelSelector", "app=x"), ("timeoutSeconds", "2")],
                       raw=True, timeout=20)
    return {"code": code, "types": [e["type"] for e in _events(text) if e.get("type") != "BOOKMARK"]}


@case("watch from resourceVersion 1 (nothing compacted yet)")
def c_watch_old(s: Side):
    _watch_setup(s)
    code, text = s.req("GET", f"/api/v1/namespaces/{WATCH_NS}/configmaps",
                       [("watch", "1"), ("resourceVersion", "1"), ("timeoutSeconds", "2")], raw=True, timeout=20)
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        return {"http": code, "status": status_of(doc.get("code", code), doc)}
    ev = _events(text)
    return {"http": code, "events": [(e.get("type"), e["object"].get("code"), e["object"].get("reason"))
                                     for e in ev]}


@case("watch with sendInitialEvents=true, allowWatchBookmarks, resourceVersionMatch=NotOlderThan")
def c_watch_send_initial(s: Side):
    _watch_setup(s)
    code, text = s.req("GET", f"/api/v1/namespaces/{WATCH_NS}/configmaps",
                       [("watch", "1"), ("sendInitialEvents", "true"), ("allowWatchBookmarks", "true"),
                        ("resourceVersionMatch", "NotOlderThan"), ("timeoutSeconds", "2")], raw=True, timeout=20)
    if code != 200:
        try:
            return {"http": code, "status": status_of(code, json.loads(text))}
        except ValueError:
            return {"http": code}
    ev = _events(text)
    bookmarks = [e for e in ev if e.get("type") == "BOOKMARK"]
    initial_end = any((e["object"].get("metadata", {}).get("annotations") or {}).get(
        "k8s.io/initial-events-end") == "true" for e in bookmarks)
    return {"http": code, "types": sorted({e.get("type") for e in ev}), "initial-events-end bookmark": initial_end}


# --- kubectl ----------------------------------------------------------------------------------------------

KNS = "k-kubectl"


@case("kubectl create namespace")
def k_create_ns(s: Side):
    return s.kubectl("create", "namespace", KNS)


@case("kubectl create namespace (exists)")
def k_create_ns_again(s: Side):
    return s.kubectl("create", "namespace", KNS)


@case("kubectl create configmap --from-literal")
def k_create_cm(s: Side):
    return s.kubectl("-n", KNS, "create", "configmap", "c1", "--from-literal=a=b")


@case("kubectl create deployment --image --replicas")
def k_create_deploy(s: Side):
    return s.kubectl("-n", KNS, "create", "deployment", "web", f"--image={IMAGE}", "--replicas=1")


def _router_yaml(replicas: int | None = None) -> str:
    objs = [copy.deepcopy(find(STACKS[FIRST], "Service", "router-blue")), copy.deepcopy(_router(FIRST))]
    for o in objs:
        o["metadata"]["namespace"] = KNS
    if replicas is not None:
        objs[1]["spec"]["replicas"] = replicas
    return to_yaml(objs)


@case("kubectl apply -f (router Service+Deployment, new)")
def k_apply_new(s: Side):
    return s.kubectl("apply", "-f", "-", stdin=_router_yaml())


@case("kubectl apply -f (same again)")
def k_apply_same(s: Side):
    return s.kubectl("apply", "-f", "-", stdin=_router_yaml())


@case("kubectl apply -f (replicas changed)")
def k_apply_changed(s: Side):
    return s.kubectl("apply", "-f", "-", stdin=_router_yaml(3))


@case("kubectl apply --server-side of objects the product applied (same values)")
def k_ssa_shared(s: Side):
    o = find(STACKS[FIRST], "LeaderWorkerSet", "prefill")
    return s.kubectl("apply", "--server-side", "-f", "-", stdin=to_yaml([o]))


@case("kubectl apply --server-side with a value the product owns (conflict)")
def k_ssa_conflict(s: Side):
    o = copy.deepcopy(find(STACKS[FIRST], "LeaderWorkerSet", "prefill"))
    o["spec"]["replicas"] = 2
    return s.kubectl("apply", "--server-side", "-f", "-", stdin=to_yaml([o]))


@case("kubectl apply --server-side --force-conflicts")
def k_ssa_force(s: Side):
    o = copy.deepcopy(find(STACKS[FIRST], "LeaderWorkerSet", "prefill"))
    o["spec"]["replicas"] = 2
    return s.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=to_yaml([o]))


@case("kubectl get lws (columns)")
def k_get_lws(s: Side):
    ns = find(STACKS[FIRST], "LeaderWorkerSet", "prefill")["metadata"]["namespace"]
    r = s.kubectl("-n", ns, "get", "lws")
    r["out"] = r.get("out", "").split(" / ")[0]
    return r


@case("kubectl get deployments (columns)")
def k_get_deploy(s: Side):
    r = s.kubectl("-n", KNS, "get", "deployments")
    r["out"] = r.get("out", "").split(" / ")[0]
    return r


@case("kubectl delete deployment")
def k_delete(s: Side):
    return s.kubectl("-n", KNS, "delete", "deployment", "web", "--wait=false")


@case("kubectl get of a missing object")
def k_get_missing(s: Side):
    return s.kubectl("-n", KNS, "get", "deployment", "nope")


# --- the run ------------------------------------------------------------------------------------------------

def install_crd(real: Side, work: Path) -> float:
    t0 = time.monotonic()
    docs = crd_for_120([d for d in yaml.safe_load_all(CRD.read_text()) if d])
    path = work / "lws-crd-1.20.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    r = real.kubectl("apply", "--server-side", "-f", str(path), timeout=120)
    if r.get("rc") != 0:
        raise SystemExit(f"kube_contract: installing the LWS CRD failed: {r}")
    wait_for(lambda: real.req("GET", "/apis/leaderworkerset.x-k8s.io/v1")[0] == 200, 60, "the LWS CRD served")
    return round(time.monotonic() - t0, 1)


def short(v, width: int = 110) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str, separators=(",", ":"))
    s = s.replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= width else s[:width - 1] + "…"


def shown(a, b) -> tuple:
    """The parts that differ, for dicts; the whole values otherwise."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
        return {k: a.get(k) for k in keys}, {k: b.get(k) for k in keys}
    return a, b


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--state", type=Path, default=STATE / "kube-contract",
                   help="work directory (emptied first; default $PDLIFT_STATE_DIR/kube-contract)")
    p.add_argument("--table", type=Path, help="also write the table (Markdown) here")
    p.add_argument("--keep", action="store_true", help="leave the work directory (logs, etcd) behind")
    p.add_argument("--only", default="", help="run only the cases whose title contains this")
    p.add_argument("--full", action="store_true", help="show whole values in the table, not only what differs")
    args = p.parse_args(argv)
    work = args.state.resolve()
    if work.exists():
        shutil.rmtree(work)
    (work / "logs").mkdir(parents=True)
    procs = Procs(work / "logs")
    try:
        t0 = time.monotonic()
        real_kc, timings = start_real(procs, work)
        sandbox_kc, t2 = start_standin(procs, work)
        timings.update(t2)
        real, standin = Side("real", real_kc), Side("stand-in", sandbox_kc)
        timings["lws_crd_s"] = install_crd(real, work)
        log(f"up in {time.monotonic() - t0:.1f}s: {timings}")
        rows, same = [], 0
        for title, fn in CASES:
            if args.only and args.only not in title:
                continue
            obs = []
            for side in (real, standin):
                try:
                    obs.append(fn(side))
                except Exception as e:  # noqa: BLE001 (a case that breaks is an answer too)
                    obs.append(f"case failed: {type(e).__name__}: {str(e)[:200]}")
            equal = obs[0] == obs[1]
            same += equal
            a, b = (obs[0], obs[1]) if equal or args.full else shown(obs[0], obs[1])
            rows.append(f"| {title} | {short(a)} | {short(b) if not equal else '(same)'} | "
                        f"{'yes' if equal else 'no'} |")
            log(f"{'same  ' if equal else 'DIFFER'} {title}")
            if not equal:
                (work / "differences.jsonl").open("a").write(
                    json.dumps({"case": title, "real": obs[0], "stand-in": obs[1]}, default=str) + "\n")
        n = len(rows)
        table = "\n".join(["| case | real apiserver (v1.20.2) | stand-in | same? |", "|---|---|---|---|", *rows])
        summary = (f"start: etcd {timings['etcd_s']}s, kube-apiserver ready {timings['apiserver_ready_s']}s, "
                   f"stand-in {timings['standin_ready_s']}s, LWS CRD {timings['lws_crd_s']}s; "
                   f"whole run {time.monotonic() - t0:.0f}s")
        figure = f"contract: {n} cases, {same} same, {n - same} differ"
        if args.table:
            args.table.write_text(table + "\n\n" + summary + "\n\n" + figure + "\n")
        print(table)
        print()
        print(summary)
        print(figure)
        return 0
    finally:
        procs.stop_all()
        if not args.keep:
            shutil.rmtree(work / "etcd", ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
