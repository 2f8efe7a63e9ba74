"""The rendered scripts, expanded by a real shell with the LWS environment, are command lines the
engines accept (checked with the sandbox engines' parsers, which mirror vLLM's and SGLang's flags
and refuse what they refuse), with the roles, ranks and KV protocol pdlift meant."""

from __future__ import annotations

import subprocess

import pytest

from sandbox.engines import cli_router, cli_sglang, cli_vllm
from tasks.planning.manifests import cmdline
from tasks.planning.manifests.views import engines, routers
from tests.unit.manifests.helpers import COMBOS, combo, render


def _expanded(container: dict, worker_index: int) -> tuple[list[str], dict[str, str]]:
    env = {e["name"]: e.get("value", "10.1.2.3") for e in container["env"]}
    env.update(LWS_LEADER_ADDRESS="prefill-0.prefill.ns", LWS_WORKER_INDEX=str(worker_index), PATH="/usr/bin:/bin")
    script = container["args"][0]
    assert script.startswith("exec ")
    printed = subprocess.run(["/bin/sh", "-c", "printf '%s\\n' " + script[len("exec "):]], env=env,
                             capture_output=True, text=True, timeout=10, check=True).stdout
    return printed.splitlines(), env


@pytest.mark.parametrize("engine,connector", COMBOS)
def test_every_engine_template_parses_as_its_engine_with_the_intended_role_and_rank(engine, connector):
    for view in engines(render(combo(engine, connector))):
        argv, env = _expanded(view.container, 0 if view.leader else 1)
        if engine == "vllm":
            assert argv[:2] == ["vllm", "serve"]
            cfg = cli_vllm.parse(argv[2:], env=env)
        else:
            assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
            cfg = cli_sglang.parse(argv[3:], env=env)
        assert cfg.role == view.role
        assert (cfg.group_size, cfg.group_rank) == (2, 0 if view.leader else 1)
        assert cfg.kv.resolve(env, tcp_fallback=False) == "efa"
        assert cfg.serves_api == view.leader


@pytest.mark.parametrize("engine,connector", COMBOS)
def test_the_router_command_parses_as_a_pd_router(engine, connector):
    argv = routers(render(combo(engine, connector)))[0].argv
    cfg = cli_router.parse(argv[1:] if engine == "vllm" else argv[3:], engine)
    assert cfg.pd and len(cfg.prefill) == 1 and len(cfg.decode) == 1
    assert cfg.prefill[0][1] == (None if (engine, connector) == ("vllm", "nixl") else 8998)


def test_the_kv_transfer_json_survives_shell_quoting():
    view = engines(render())[0]
    argv, _ = _expanded(view.container, 0)
    assert cmdline.flags(argv)["--kv-transfer-config"] == view.flags["--kv-transfer-config"]
