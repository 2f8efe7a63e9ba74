"""Container commands in the `sh -c` form that LeaderWorkerSet pods use, and multi-node groups."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from sandbox.engines.tokenizer import make_prompt

from .client import completion, fetch, run

KV = json.dumps({"kv_connector": "MooncakeConnector", "kv_role": "kv_producer",
                 "kv_load_failure_policy": "fail", "kv_connector_extra_config": {"mooncake_protocol": "efa"}})
# The reference prefill command (docs/sources.md#vllm-multinode), as the rendered manifest carries it.
PREFILL_SCRIPT = (
    "vllm serve pdlift/tiny --port $ENGINE_PORT --trust-remote-code "
    "--tensor-parallel-size 8 --pipeline-parallel-size 2 "
    "--nnodes $LWS_GROUP_SIZE --node-rank $LWS_WORKER_INDEX --master-addr $LWS_LEADER_ADDRESS "
    "--master-port $MASTER_PORT "
    '$( [ "$LWS_WORKER_INDEX" != 0 ] && echo --headless ) '
    f"--served-model-name m --kv-transfer-config '{KV}'"
)


def health(url: str) -> int:
    return fetch(url)[0]


def test_a_two_pod_prefill_group_started_through_sh_c_is_ready_only_when_both_ranks_are_up(engine_launcher):
    launcher = engine_launcher
    port, master = launcher.port(), launcher.port()
    (launcher.state_dir / "sandbox").mkdir()
    # LWS gives the leader's DNS name; the sandbox resolves it through hosts.json, never DNS.
    hosts = {"prefill-0.prefill.ns": "127.0.0.1"}
    (launcher.state_dir / "sandbox" / "hosts.json").write_text(json.dumps(hosts))
    lws = {"LWS_LEADER_ADDRESS": "prefill-0.prefill.ns", "LWS_GROUP_SIZE": "2", "ENGINE_PORT": str(port),
           "MASTER_PORT": str(master), "FI_PROVIDER": "efa", "VLLM_MOONCAKE_BOOTSTRAP_PORT": str(launcher.port())}
    leader = launcher.start(["/bin/sh", "-c", PREFILL_SCRIPT], "leader",
                            launcher.env(**lws, LWS_WORKER_INDEX="0", POD_IP="127.0.0.1"))
    url = f"http://127.0.0.1:{port}/health"
    deadline = time.monotonic() + 15
    while health(url) != 503 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert health(url) == 503  # serving, but waiting for rank 1
    worker = launcher.start(["/bin/sh", "-c", PREFILL_SCRIPT], "worker", launcher.env(**lws, LWS_WORKER_INDEX="1"))
    leader.wait_http(url)
    [result] = run(f"http://127.0.0.1:{port}/v1/completions", [completion(make_prompt(20), 3)])
    assert result.status == 200 and len(result.texts) == 3
    assert "Running in headless mode: node rank 1 of 2" in worker.log()
    assert "rank 1 joined (2/2)" in leader.log()

    worker.stop()  # a lost rank breaks the communicator: the leader exits for LWS to recreate the group
    assert leader.wait_exit(timeout=10) == 1
    assert "left the group" in leader.log()


def test_python_in_a_shell_command_substitution_still_reaches_the_real_interpreter(engine_launcher):
    port = engine_launcher.port()
    script = 'exec python3 -m sglang.launch_server --model-path m --port "$(python3 -c "print($BASE + 1)")"'
    engine = engine_launcher.start(["/bin/bash", "-c", script], "engine",
                                   engine_launcher.env(BASE=str(port - 1)))
    engine.wait_http(f"http://127.0.0.1:{port}/health")
    assert "server_args: model_path=m" in engine.log()


# The reference decode command (docs/sources.md#vllm-multinode), scaled to 2 DP ranks per pod.
DECODE_SCRIPT = (
    "vllm serve pdlift/tiny --port $ENGINE_PORT --trust-remote-code --kv-cache-dtype fp8 "
    "--enable-expert-parallel --tensor-parallel-size 1 "
    "--data-parallel-size 4 --data-parallel-size-local 2 "
    "--data-parallel-start-rank $((LWS_WORKER_INDEX*2)) "
    "--data-parallel-address $LWS_LEADER_ADDRESS --data-parallel-rpc-port $RPC_PORT "
    "--data-parallel-multi-port-external-lb --data-parallel-supervisor-port $SUPERVISOR_PORT "
    "--all2all-backend deepep_low_latency --moe-backend deep_gemm --served-model-name m "
    "--kv-transfer-config '{\"kv_connector\":\"MooncakeConnector\",\"kv_role\":\"kv_consumer\","
    "\"kv_connector_extra_config\":{\"mooncake_protocol\":\"efa\"}}'"
)


def test_a_dp_decode_group_serves_one_port_per_local_rank_once_both_pods_joined(engine_launcher):
    # Two pods on two node addresses, as the Kubernetes stand-in places them.
    port = engine_launcher.port("127.0.0.1", span=2, also=("127.0.0.2",))
    lws = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": "2", "ENGINE_PORT": str(port),
           "RPC_PORT": str(engine_launcher.port()), "SUPERVISOR_PORT": str(engine_launcher.port()),
           "FI_PROVIDER": "efa"}
    supervisor = f"http://127.0.0.1:{lws['SUPERVISOR_PORT']}/readyz"
    leader = engine_launcher.start(["/bin/sh", "-c", DECODE_SCRIPT], "decode-0",
                                   engine_launcher.env(**lws, LWS_WORKER_INDEX="0"))
    deadline = time.monotonic() + 15
    while health(supervisor) != 503 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert health(supervisor) == 503  # rank 2-3 (the second pod) has not joined
    engine_launcher.start(["/bin/sh", "-c", DECODE_SCRIPT], "decode-1",
                          engine_launcher.env(**lws, LWS_WORKER_INDEX="1", PDLIFT_SANDBOX_BIND="127.0.0.2"))
    leader.wait_http(supervisor)
    for host in ("127.0.0.1", "127.0.0.2"):
        for rank_port in (port, port + 1):
            [result] = run(f"http://{host}:{rank_port}/v1/completions", [completion("a b c", 2)])
            assert result.status == 200 and len(result.texts) == 2


def test_a_stand_in_imports_aiohttp_without_the_ca_bundle_and_leaves_the_environment_as_it_was(tmp_path):
    """sandbox/engines/launch.py: the bundle's variables point nowhere only during the import; the
    stand-in's own environment, and so what it starts, keeps the values it was given (or none)."""
    import subprocess
    import sys

    script = ("import os, sys\n"
              "from sandbox.engines import launch\n"
              "launch._import_aiohttp_without_ca_bundle()\n"
              "import aiohttp.connector\n"
              "print(aiohttp.connector._SSL_CONTEXT_VERIFIED.cert_store_stats()['x509_ca'],\n"
              "      os.environ.get('SSL_CERT_FILE'), os.environ.get('SSL_CERT_DIR'))\n")
    repo = Path(__file__).resolve().parents[3]
    base = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    given = {**base, "PYTHONPATH": str(repo), "SSL_CERT_FILE": str(tmp_path / "ca.pem")}
    out = subprocess.run([sys.executable, "-c", script], env=given, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["0", str(tmp_path / "ca.pem"), "None"], out.stderr
    unset = {**base, "PYTHONPATH": str(repo)}
    out = subprocess.run([sys.executable, "-c", script], env=unset, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["0", "None", "None"], out.stderr
