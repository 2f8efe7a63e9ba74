"""`pdlift deploy --render-only DIR` writes the checked manifests and touches no cluster."""

from __future__ import annotations

import pytest
import yaml

from blueprints.loader import load_blueprint
from cli.main import main
from tasks.adapters.kube_apply import KubeApply
from tasks.stages import deploy as stage
from tests.sandbox.deploy.conftest import write_blueprint


def test_render_only_writes_the_manifests_and_touches_nothing(kube_sandbox, kube_client, monkeypatch, tmp_path,
                                                              capsys):
    path = write_blueprint(tmp_path, "dp-render-only")
    monkeypatch.setenv("KUBECONFIG", str(kube_sandbox.kubeconfig))  # an operator's shell, cluster at hand
    assert main(["deploy", str(path), "--render-only", str(tmp_path / "out"), "--colour", "green"]) == 0

    written = tmp_path / "out" / "dp-render-only-green.yaml"
    assert str(written) in capsys.readouterr().out
    objects = list(yaml.safe_load_all(written.read_text()))
    assert objects == stage.render(load_blueprint(str(path)), "green")
    assert [o["kind"] for o in objects][-1] == "Deployment"  # the router comes last
    kube = KubeApply(kube_client)
    assert kube.get("v1", "Namespace", "dp-render-only") is None
    assert kube.get("v1", "Namespace", "dp-render-only-green") is None


def test_render_only_refuses_a_stack_that_is_unsafe_to_apply(tmp_path, capsys):
    path = write_blueprint(tmp_path, "dp-render-bad", {"extra_args": ["--block-size=16"]})
    assert main(["deploy", str(path), "--render-only", str(tmp_path / "out")]) == 2
    assert "sets --block-size" in capsys.readouterr().err
    assert not (tmp_path / "out" / "dp-render-bad-blue.yaml").exists()


def _engine_containers(objects: list[dict]) -> list[dict]:
    """Every engine container of the rendered stack, prefill's and decode's."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "image" in node and node.get("name") == "engine":
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(objects)
    return found


SGLANG = {"name": "sglang", "image": "lmsysorg/sglang@sha256:" + "a" * 64, "version": "0.5.9"}


@pytest.mark.parametrize("engine, connector", [("vllm", "mooncake"), ("vllm", "nixl"),
                                               ("sglang", "mooncake"), ("sglang", "nixl")])
def test_render_only_shows_the_kv_transport_environment_the_canary_relies_on(tmp_path, engine, connector):
    """For ``protocol: efa`` the operator sees, before any apply, what makes a fallback to TCP fail
    or show: FI_PROVIDER=efa, the transfer library told to use EFA, NIXL logging its provider, vLLM
    failing a failed load instead of recomputing it, SGLang exporting its metrics."""
    name = f"dp-env-{engine}-{connector}"
    path = write_blueprint(tmp_path, name, SGLANG if engine == "sglang" else None,
                           kv_transfer={"connector": connector, "protocol": "efa"})
    assert main(["deploy", str(path), "--render-only", str(tmp_path / "out")]) == 0
    containers = _engine_containers(list(yaml.safe_load_all((tmp_path / "out" / f"{name}-blue.yaml").read_text())))
    assert len(containers) >= 2  # prefill and decode, at least one pod template each
    for c in containers:
        env = {e["name"]: e.get("value") for e in c.get("env") or []}
        script = " ".join(c.get("command") or []) + " " + " ".join(c.get("args") or [])
        assert env.get("FI_PROVIDER") == "efa"
        if connector == "nixl":
            assert env.get("NIXL_LOG_LEVEL") == "INFO"
        if engine == "vllm":
            assert '"kv_load_failure_policy":"fail"' in script
            if connector == "nixl":
                assert '"backends":["LIBFABRIC"]' in script
            else:
                assert '"mooncake_protocol":"efa"' in script
        else:
            assert "--enable-metrics" in script
            if connector == "nixl":
                assert env.get("SGLANG_DISAGGREGATION_NIXL_BACKEND") == "LIBFABRIC"
            else:
                assert env.get("MOONCAKE_PROTOCOL") == "efa"
