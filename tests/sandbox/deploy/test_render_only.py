"""`pdlift deploy --render-only DIR` writes the checked manifests and touches no cluster."""

from __future__ import annotations

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
