"""Engine command lines are parsed and refused the way the real engines do it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sandbox.engines import cli_sglang, cli_vllm
from sandbox.engines.harness import REPO_ROOT, engine_env


def run_engine(command: list[str], state_dir, **env: str) -> subprocess.CompletedProcess:
    """Run a command that is expected to exit at start; a server that keeps running times out."""
    return subprocess.run([sys.executable, "-m", "sandbox.engines", "--", *command], cwd=REPO_ROOT,
                          env=engine_env(state_dir, **env), capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("command", [
    ["vllm", "serve", "m", "--port", "1", "--foo"],
    ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--foo"],
    ["vllm-router", "--vllm-pd-disaggregation", "--foo"],
    ["python", "-m", "sglang_router.launch_router", "--foo"],
], ids=["vllm", "sglang", "vllm-router", "sglang-router"])
def test_an_unknown_flag_exits_2_with_the_argparse_error(command, tmp_path):
    done = run_engine(command, tmp_path)
    assert done.returncode == 2
    assert "error: unrecognized arguments: --foo" in done.stderr


def test_the_mooncake_master_refuses_an_unknown_flag_like_gflags(tmp_path):
    done = run_engine(["mooncake_master", "--port=1", "--bogus_flag=1"], tmp_path)
    assert done.returncode == 1
    assert "ERROR: unknown command line flag 'bogus_flag'" in done.stderr


def test_a_vllm_kv_role_without_a_kv_connector_is_refused_at_start(tmp_path):
    done = run_engine(["vllm", "serve", "m", "--kv-transfer-config", json.dumps({"kv_role": "kv_producer"})],
                      tmp_path)
    assert done.returncode == 1
    assert "kv_role=kv_producer is set but kv_connector is not" in done.stderr


def test_an_sglang_pd_mode_without_a_transfer_backend_is_refused_at_start(tmp_path):
    done = run_engine(["python3", "-m", "sglang.launch_server", "--model-path", "m",
                       "--disaggregation-mode", "decode"], tmp_path)
    assert done.returncode == 1
    assert "--disaggregation-mode decode needs --disaggregation-transfer-backend" in done.stderr


def test_vllm_refuses_the_nixl_pull_connector_with_pipeline_parallel_prefill(tmp_path):
    config = {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    done = run_engine(["vllm", "serve", "m", "--pipeline-parallel-size", "2",
                       "--kv-transfer-config", json.dumps(config)], tmp_path)
    assert done.returncode == 1
    assert "NixlConnector does not support pipeline parallelism" in done.stderr


def test_sglang_refuses_a_bare_fp8_kv_cache_dtype_as_its_argparse_does(tmp_path):
    done = run_engine(["python3", "-m", "sglang.launch_server", "--model-path", "m", "--kv-cache-dtype", "fp8"],
                      tmp_path)
    assert done.returncode == 2
    assert "invalid choice: 'fp8'" in done.stderr


def test_the_crash_at_start_fault_exits_1_with_its_message(tmp_path):
    done = run_engine(["vllm", "serve", "m"], tmp_path,
                      PDLIFT_SANDBOX_FAULTS=json.dumps({"crash_at_start": "CUDA error: out of memory"}))
    assert done.returncode == 1
    assert "CUDA error: out of memory" in done.stderr


def test_a_command_that_is_not_an_engine_exits_127(tmp_path):
    done = run_engine(["ray", "start", "--head"], tmp_path)
    assert done.returncode == 127
    assert "not a recognised engine command" in done.stderr


MOONCAKE_EFA = {"kv_connector": "MooncakeConnector", "kv_role": "kv_producer",
                "kv_connector_extra_config": {"mooncake_protocol": "efa"}}
NIXL_LIBFABRIC = {"kv_connector": "NixlPushConnector", "kv_role": "kv_producer",
                  "kv_connector_extra_config": {"backends": ["LIBFABRIC"]}}
NIXL_DEFAULT = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


@pytest.mark.parametrize("config, env, protocol", [
    (MOONCAKE_EFA, {"FI_PROVIDER": "efa"}, "efa"),
    # Mooncake's EFA transport asks libfabric for the efa provider itself: FI_PROVIDER is not needed.
    (MOONCAKE_EFA, {}, "efa"),
    (NIXL_LIBFABRIC, {"FI_PROVIDER": "tcp"}, "tcp"),  # NIXL's libfabric told to use another provider
    ({**MOONCAKE_EFA, "kv_connector_extra_config": {}}, {"FI_PROVIDER": "efa"}, "tcp"),  # default rdma
    ({**MOONCAKE_EFA, "kv_connector_extra_config": {}}, {"FI_PROVIDER": "efa", "MOONCAKE_PROTOCOL": "efa"}, "efa"),
    (NIXL_LIBFABRIC, {"FI_PROVIDER": "efa"}, "efa"),
    (NIXL_DEFAULT, {"FI_PROVIDER": "efa"}, "tcp"),  # UCX, the default backend, falls back silently
])
def test_the_vllm_kv_protocol_is_efa_only_when_the_config_and_the_env_both_ask_for_it(config, env, protocol):
    cfg = cli_vllm.parse(["m", "--kv-transfer-config", json.dumps(config)], env=env)
    assert cfg.kv.resolve(cfg.env, tcp_fallback=False) == protocol
    assert cfg.kv.resolve(cfg.env, tcp_fallback=True) == "tcp"


@pytest.mark.parametrize("backend, env, protocol", [
    ("nixl", {"FI_PROVIDER": "efa", "SGLANG_DISAGGREGATION_NIXL_BACKEND": "LIBFABRIC"}, "efa"),
    ("nixl", {"FI_PROVIDER": "efa"}, "tcp"),
    ("mooncake", {"FI_PROVIDER": "efa", "MOONCAKE_PROTOCOL": "efa"}, "efa"),
    ("mooncake_tcp", {"FI_PROVIDER": "efa", "MOONCAKE_PROTOCOL": "efa"}, "tcp"),
])
def test_the_sglang_kv_protocol_follows_the_transfer_backend_and_env(backend, env, protocol):
    cfg = cli_sglang.parse(["--model-path", "m", "--disaggregation-mode", "prefill",
                            "--disaggregation-transfer-backend", backend], env=env)
    assert cfg.kv.resolve(cfg.env, tcp_fallback=False) == protocol


def test_vllm_accepts_the_reference_decode_command_line():
    cfg = cli_vllm.parse(
        ["zai-org/GLM-5.1-FP8", "--port", "8200", "--trust-remote-code", "--kv-cache-dtype", "fp8",
         "--enable-expert-parallel", "--tensor-parallel-size", "1", "--data-parallel-size", "16",
         "--data-parallel-size-local", "8", "--data-parallel-start-rank", "8", "--data-parallel-address", "10.0.0.1",
         "--data-parallel-rpc-port", "5555", "--data-parallel-multi-port-external-lb",
         "--data-parallel-supervisor-port", "8208", "--all2all-backend", "deepep_low_latency",
         "--moe-backend", "deep_gemm", "--kv-transfer-config",
         json.dumps({**MOONCAKE_EFA, "kv_role": "kv_consumer"})], env={})
    assert (cfg.role, cfg.group_size, cfg.group_rank, cfg.rendezvous_port) == ("decode", 2, 1, 5555)
    assert cfg.api_ports == list(range(8200, 8208))
