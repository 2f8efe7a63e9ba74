"""The GPU pod's vLLM command line, mapped for the CPU build: each table row, and what is refused."""

from __future__ import annotations

import json
import shlex

import pytest

from sandbox.engines.real import flags

RENDERED_PREFILL = shlex.split(
    "vllm serve /models/pdlift/smollm2 --served-model-name pdlift/smollm2 --host 0.0.0.0 --port 8000 "
    "--trust-remote-code --dtype bfloat16 --kv-cache-dtype fp8 --block-size 64 --gpu-memory-utilization 0.9 "
    "--max-model-len 202752 --tensor-parallel-size 8 --pipeline-parallel-size 1 "
    """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both",\
"kv_connector_extra_config":{"backends":["LIBFABRIC"]}}' --shutdown-timeout 120""")


def _pairs(args: list[str]) -> dict[str, str | None]:
    return dict(flags.split_flags(args))


def test_a_rendered_prefill_becomes_the_api_server_on_the_pod_address_with_gpu_flags_mapped():
    cmd = flags.to_cpu(RENDERED_PREFILL, bind="127.0.9.11")
    assert cmd.args[:2] == ["-m", "vllm.entrypoints.openai.api_server"]
    got = _pairs(cmd.args[2:])
    assert got["--model"] == "/models/pdlift/smollm2" and got["--served-model-name"] == "pdlift/smollm2"
    assert got["--host"] == "127.0.9.11" and got["--port"] == "8000" and got["--block-size"] == "64"
    assert got["--kv-cache-dtype"] == "auto" and got["--max-model-len"] == str(flags.CPU_MAX_MODEL_LEN)
    assert any("neither AVX-512 nor AMX" in note for note in cmd.notes)
    assert "--trust-remote-code" in got and got["--shutdown-timeout"] == "120"
    for gone in ("--tensor-parallel-size", "--pipeline-parallel-size", "--gpu-memory-utilization"):
        assert gone not in got
    kv = json.loads(got["--kv-transfer-config"])
    assert kv["kv_buffer_device"] == "cpu" and kv["kv_connector_extra_config"]["backends"] == ["UCX"]
    assert kv["kv_role"] == "kv_both"
    assert cmd.env["VLLM_HOST_IP"] == cmd.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.9.11"
    assert cmd.env["UCX_TLS"] == "tcp" and cmd.env["VLLM_NO_USAGE_STATS"] == "1" and cmd.env["HF_HUB_OFFLINE"] == "1"
    assert any("LIBFABRIC" in note for note in cmd.notes)


def test_a_flag_in_no_row_goes_to_vllms_parser_unchanged():
    cmd = flags.to_cpu(["vllm", "serve", "/m", "--no-such-flag", "7", "--enforce-eager"], bind="127.0.0.1")
    assert cmd.args[2:] == ["--model", "/m", "--no-such-flag", "7", "--enforce-eager"]


def test_the_module_form_and_equals_values_are_mapped_the_same():
    cmd = flags.to_cpu(["python3", "-m", "vllm.entrypoints.openai.api_server", "--model=/m",
                        "--max-model-len=4096", "--tensor-parallel-size=8", "--host=0.0.0.0"], bind="127.0.0.5")
    assert cmd.args[2:] == ["--model", "/m", "--max-model-len", "2048", "--host", "127.0.0.5", "--enforce-eager"]


@pytest.mark.parametrize("length, expected", [(2047, "2047"), (2048, "2048"), (2049, "2048")])
def test_the_context_is_capped_at_the_cpu_limit_not_below(length, expected):
    cmd = flags.to_cpu(["vllm", "serve", "/m", "--max-model-len", str(length)], bind="127.0.0.1")
    assert _pairs(cmd.args[2:])["--max-model-len"] == expected


def test_a_decode_leaders_dp_and_ep_flags_are_dropped():
    cmd = flags.to_cpu(shlex.split("vllm serve /m --data-parallel-size 16 --data-parallel-size-local 8 "
                                   "--data-parallel-start-rank 0 --data-parallel-address 127.0.0.3 "
                                   "--data-parallel-rpc-port 5555 --enable-expert-parallel "
                                   "--all2all-backend deepep_low_latency --port 8200"), bind="127.0.0.1")
    assert cmd.args[2:] == ["--model", "/m", "--port", "8200", "--enforce-eager"]


@pytest.mark.parametrize("argv, why", [
    ("vllm serve /m --nnodes 2 --node-rank 0", "--nnodes 2"),
    ("vllm serve /m --nnodes 1 --node-rank 1", "--node-rank 1"),
    ("vllm serve /m --headless", "--headless"),
    ("vllm serve /m --data-parallel-start-rank 8", "--data-parallel-start-rank 8"),
    ("sglang serve /m", "not a vLLM server command"),
    ("""vllm serve /m --kv-transfer-config '{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}'""",
     "MooncakeConnector: vLLM's Mooncake connector needs an accelerator"),
])
def test_what_has_no_cpu_equivalent_is_refused_naming_the_flag(argv, why):
    with pytest.raises(flags.Unmappable, match=why):
        flags.to_cpu(shlex.split(argv), bind="127.0.0.1")


def test_a_one_node_group_and_rank_0_are_accepted():
    cmd = flags.to_cpu(shlex.split("vllm serve /m --nnodes 1 --node-rank 0 --port 1"), bind="127.0.0.1")
    assert cmd.args[2:] == ["--model", "/m", "--port", "1", "--enforce-eager"]


@pytest.mark.parametrize("features, expected", [
    (frozenset({"avx2"}), "auto"), (frozenset({"avx2", "avx512f"}), "fp8"), (frozenset({"amx_tile"}), "fp8")])
def test_an_fp8_kv_cache_stays_where_the_cpu_attention_can_hold_it(features, expected):
    cmd = flags.to_cpu(["vllm", "serve", "/m", "--kv-cache-dtype", "fp8"], bind="127.0.0.1", cpu_features=features)
    assert _pairs(cmd.args[2:])["--kv-cache-dtype"] == expected


def test_the_fleets_interface_names_become_the_namespaces_loopback():
    env = {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0", "TP_SOCKET_IFNAME": "lo", "FI_PROVIDER": "efa"}
    cmd = flags.to_cpu(["vllm", "serve", "/m"], bind="127.0.0.1", env=env)
    assert cmd.env["GLOO_SOCKET_IFNAME"] == cmd.env["NCCL_SOCKET_IFNAME"] == "lo"
    assert "TP_SOCKET_IFNAME" not in cmd.env and "FI_PROVIDER" not in cmd.env
    assert sum("eth0: lo" in note for note in cmd.notes) == 2


def test_uvicorns_keep_alive_outlasts_a_cpu_prefill_hop_unless_the_pod_sets_its_own():
    assert flags.to_cpu(["vllm", "serve", "/m"], bind="127.0.0.1").env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"] == "75"
    own = flags.to_cpu(["vllm", "serve", "/m"], bind="127.0.0.1", env={"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "7"})
    assert "VLLM_HTTP_TIMEOUT_KEEP_ALIVE" not in own.env  # the container's own value reaches vLLM
