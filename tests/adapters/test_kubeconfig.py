"""A kubeconfig's exec credential plugin runs once per process and kubeconfig, not once per client
(a flow's every task opens one), and again when the kubeconfig changes or its credential nears its
expiry. Against the Kubernetes stand-in, whose API server verifies the EKS token like EKS."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tasks.adapters.kube_apply import KubeApply
from tasks.adapters.kubeconfig import api_client_from_kubeconfig
from tasks.errors import ConfigError


def _counted_kubeconfig(kube_sandbox, tmp_path: Path, expires_in_s: int | None = None) -> tuple[Path, Path]:
    """(a copy of the sandbox's kubeconfig whose exec plugin notes each run in a file, that file).
    With ``expires_in_s`` the plugin's credential says it expires that soon."""
    runs = tmp_path / "plugin-runs"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(textwrap.dedent(f"""\
        import contextlib, datetime as dt, io, json, sys
        from tasks.adapters import eks_token
        with open({str(runs)!r}, "a") as f:
            f.write("run\\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = eks_token.main(sys.argv[1:])
        credential = json.loads(out.getvalue())
        if {expires_in_s!r} is not None:
            soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds={expires_in_s!r})
            credential["status"]["expirationTimestamp"] = soon.strftime("%Y-%m-%dT%H:%M:%SZ")
        print(json.dumps(credential))
        sys.exit(code)
        """))
    doc = yaml.safe_load(kube_sandbox.kubeconfig.read_text())
    user = doc["users"][0]["user"]["exec"]
    assert user["args"][:2] == ["-m", "tasks.adapters.eks_token"]
    user["command"], user["args"] = sys.executable, [str(plugin), *user["args"][2:]]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path, runs


def _runs(runs: Path) -> int:
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def _namespace(api) -> str:
    return KubeApply(api).get("v1", "Namespace", "default")["metadata"]["name"]


def test_clients_of_one_kubeconfig_share_one_plugin_run_until_the_kubeconfig_changes(kube_sandbox, tmp_path):
    path, runs = _counted_kubeconfig(kube_sandbox, tmp_path)
    first = api_client_from_kubeconfig(str(path), kube_sandbox.cluster_name)
    assert _namespace(first) == "default" and _runs(runs) == 1
    first.close()  # one client closed does not take the others' credential with it
    with api_client_from_kubeconfig(str(path), kube_sandbox.cluster_name) as second:
        assert _namespace(second) == "default" and _namespace(second) == "default"
    assert _runs(runs) == 1
    # An edited kubeconfig (here only touched: a context switch or `update-kubeconfig` rewrites it)
    # is loaded again, with a credential of its own.
    later = os.stat(path).st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(later, later))
    with api_client_from_kubeconfig(str(path), kube_sandbox.cluster_name) as third:
        assert _namespace(third) == "default"
    assert _runs(runs) == 2
    # A kubeconfig that now points at another cluster is refused, not served from what was loaded.
    doc = yaml.safe_load(path.read_text())
    doc["clusters"][0]["name"] = doc["contexts"][0]["context"]["cluster"] = "another-cluster"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="points at cluster"):
        api_client_from_kubeconfig(str(path), kube_sandbox.cluster_name)


def test_a_credential_near_its_expiry_is_made_again_before_a_request(kube_sandbox, tmp_path):
    # Four minutes left: inside the kubernetes client's 5-minute margin, so every request renews it.
    path, runs = _counted_kubeconfig(kube_sandbox, tmp_path, expires_in_s=240)
    with api_client_from_kubeconfig(str(path), kube_sandbox.cluster_name) as api:
        assert _namespace(api) == "default"
        loaded = _runs(runs)
        assert _namespace(api) == "default"
        assert _runs(runs) > loaded
    # A credential with time left (the plugin's own 14 minutes) is not renewed per request.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    path, runs = _counted_kubeconfig(kube_sandbox, fresh)
    with api_client_from_kubeconfig(str(path), kube_sandbox.cluster_name) as api:
        for _ in range(3):
            assert _namespace(api) == "default"
    assert _runs(runs) == 1
