"""The one wiring point: one rule for which cluster, built from the blueprint and the environment only."""

from __future__ import annotations

import pytest
import yaml

from tasks.errors import ConfigError
from tasks.wiring import Wiring


def _kubeconfig(path, cluster: str, server: str) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": cluster, "cluster": {"server": server}}],
        "contexts": [{"name": "ctx", "context": {"cluster": cluster, "user": "me"}}],
        "users": [{"name": "me", "user": {"token": "not-a-secret"}}]}))
    return str(path)


def test_an_explicit_kubeconfig_wins_and_must_name_the_blueprints_cluster(bp, tmp_path):
    right = _kubeconfig(tmp_path / "right", bp.aws.eks.cluster, "https://127.0.0.1:6443")
    with Wiring(bp, environ={"KUBECONFIG": right}) as wiring:
        assert wiring.kube_client.configuration.host == "https://127.0.0.1:6443"
    wrong = _kubeconfig(tmp_path / "wrong", "someone-elses-cluster", "https://127.0.0.1:6444")
    with Wiring(bp, environ={"KUBECONFIG": wrong}) as wiring, pytest.raises(ConfigError, match="someone-elses-cluster"):
        wiring.kube_client


def test_without_one_the_cluster_comes_from_eks_describe_cluster_with_a_presigned_token(aws_env, bp):
    with Wiring(bp, environ={}) as wiring:
        api = wiring.kube_client
        assert api.configuration.host == wiring.cluster.endpoint
        assert api.configuration.api_key["authorization"].startswith("k8s-aws-v1.")
    made = {f"{r['service']}:{r['action']}" for r in aws_env.admin.requests()}
    assert "eks:DescribeCluster" in made


def test_teardown_gets_no_cluster_adapter_when_the_cluster_cannot_be_reached_and_is_told_why(bp, tmp_path):
    dead = _kubeconfig(tmp_path / "dead", bp.aws.eks.cluster, "http://127.0.0.1:9")
    with Wiring(bp, environ={"KUBECONFIG": dead}) as wiring:
        nodes, why = wiring.kube_nodes_for_cleanup()
    assert nodes is None and why.startswith("RemoteUnavailable") and "cannot reach the Kubernetes API" in why
    wrong = _kubeconfig(tmp_path / "wrong", "someone-elses-cluster", "http://127.0.0.1:9")
    with Wiring(bp, environ={"KUBECONFIG": wrong}) as wiring:
        nodes, why = wiring.kube_nodes_for_cleanup()
    assert nodes is None and why.startswith("ConfigError") and "someone-elses-cluster" in why
