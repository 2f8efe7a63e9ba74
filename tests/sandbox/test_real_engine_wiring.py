"""The plain-suite side of the real-engine tier: what `scripts/sandbox up --real-engines` and the
Kubernetes stand-in decide without running an engine (the engines themselves: tests marked
real_engines, `scripts/test --real-engines`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox.kube import containers
from sandbox.model import directory_files
from sandbox.orchestrator.__main__ import main as sandbox_main


def _pod(volumes: list[dict]) -> dict:
    return {"metadata": {"name": "decode-0", "namespace": "ns"}, "spec": {"volumes": volumes}}


def test_a_hostpath_on_the_nodes_nvme_is_that_nodes_directory_here_at_its_container_path(tmp_path):
    pod = _pod([{"name": "weights", "hostPath": {"path": "/mnt/k8s-disks/0/models/m", "type": "Directory"}},
                {"name": "whole", "hostPath": {"path": "/mnt/k8s-disks/0"}},
                {"name": "elsewhere", "hostPath": {"path": "/mnt/k8s-disks/01/x"}},
                {"name": "dshm", "emptyDir": {"medium": "Memory"}}])
    container = {"volumeMounts": [{"name": "weights", "mountPath": "/models/m", "readOnly": True},
                                  {"name": "whole", "mountPath": "/scratch", "subPath": "cache/"},
                                  {"name": "elsewhere", "mountPath": "/x"}, {"name": "dshm", "mountPath": "/dev/shm"}]}
    assert containers.host_mounts(pod, container, tmp_path / "i-1") == {
        "/models/m": str(tmp_path / "i-1" / "nvme" / "models" / "m"),
        "/scratch": str(tmp_path / "i-1" / "nvme" / "cache")}
    assert containers.host_mounts(pod, container, None) == {}  # not a sandbox node: nothing to map
    env = containers.process_env(pod | {"spec": {**pod["spec"], "nodeName": "n"}}, {}, "127.0.0.5", tmp_path,
                                 container, {"/models/m": "/here"})
    assert json.loads(env["PDLIFT_SANDBOX_MOUNTS"]) == {"/models/m": "/here"}


def test_the_stand_ins_real_engine_settings_reach_its_containers_and_nothing_else_of_its_env(monkeypatch, tmp_path):
    monkeypatch.setenv("PDLIFT_SANDBOX_REAL_ENGINES", "/venv")
    monkeypatch.setenv("PDLIFT_SANDBOX_REAL_NETNS", "/proc/1/ns/net")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "canary-secret")
    env = containers.process_env(_pod([]) | {"spec": {"nodeName": "n"}}, {}, "127.0.0.5", tmp_path)
    assert env["PDLIFT_SANDBOX_REAL_ENGINES"] == "/venv" and env["PDLIFT_SANDBOX_REAL_NETNS"] == "/proc/1/ns/net"
    assert "AWS_SECRET_ACCESS_KEY" not in env


def test_a_real_checkpoint_directory_uploads_weights_first_and_config_last_without_hidden_files(tmp_path):
    for name, data in [("config.json", b"{}"), ("model.safetensors", b"w" * 10), ("tokenizer.json", b"t"),
                       (".pdlift-converted", b"")]:
        (tmp_path / name).write_bytes(data)
    files, seed = directory_files(tmp_path)
    assert [f.name for f in files] == ["model.safetensors", "tokenizer.json", "config.json"]
    assert [f.size for f in files] == [10, 1, 2] and files[0].open(seed).read() == b"w" * 10
    (tmp_path / "tokenizer.json").write_bytes(b"T")
    assert directory_files(tmp_path)[1] != seed  # new bytes, new seed: the upload does not skip them
    (tmp_path / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        directory_files(tmp_path)


def test_up_with_real_engines_before_they_are_installed_says_how_and_starts_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PDLIFT_REAL_ENGINES_HOME", str(tmp_path / "nothing-here"))
    assert sandbox_main(["--state-dir", str(tmp_path / "state"), "up", "--real-engines"]) == 1
    err = capsys.readouterr().err
    assert "sandbox up --real-engines:" in err and "run scripts/setup --real-engines" in err
    assert not (tmp_path / "state" / "sandbox" / "pids").exists() or not any((tmp_path / "state" / "sandbox" / "pids").iterdir())
    assert not Path(tmp_path / "state" / "sandbox" / "real-engines" / "netns.pid").exists()
