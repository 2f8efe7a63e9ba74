#!/usr/bin/env python3
"""pdlift's load generator against guidellm, same sandbox engine, same run, concurrency 256.

    .venv/bin/python scripts/bench/loadgen.py [--concurrency 256] [--seconds 20] [--rounds 1]

One sandbox vLLM engine (``sandbox/engines``) with a latency model that says what TTFT the
server injects; each tool then runs a fixed-concurrency load against it for a bounded time
(rounds alternate the order: pdlift, guidellm, guidellm, pdlift, ...). For each tool it prints
the achieved requests/s, as each tool reports it (pdlift: completed requests / first send to
last end, vLLM's definition; guidellm: successful requests per second of its measured window),
and the error of its mean measured TTFT against the injected value (the latency model's
prefill time for the prompt lengths the server reports). Last line:
``ratio_vs_peer=X.XX`` = pdlift requests/s / guidellm requests/s.

The peer: guidellm 0.8.1 (``guidellm run``, concurrent profile, ``/v1/completions``, synthetic
prompts). It is not a pdlift dependency (about 6 GB with torch): the first run installs it into
``$PDLIFT_STATE_DIR/bench-peers/guidellm-0.8.1/`` (``scripts/bench/peers.py``; 3 to 5 minutes
here, once; ``--install-peers`` does only that), later runs use that copy. ``PDLIFT_GUIDELLM=PATH``
runs another guidellm executable instead (its version is then yours to match).
Its prompts are made with a whitespace word-level tokenizer written here, which matches the
sandbox engine's one-token-per-word counting, so both tools send prompts of the same length.
Both share this machine's cores with the engine: a heavier client takes CPU from the server,
which is part of what is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts" / "bench"))

import peers  # noqa: E402  (standard library only)

if __name__ == "__main__":
    peers.run_in_repo_venv(__file__)

from sandbox.engines.harness import Launcher  # noqa: E402
from sandbox.engines.latency import LatencyModel  # noqa: E402
from tasks.adapters.loadgen import LoadSpec, run_load  # noqa: E402

LATENCY = {"prefill_base_s": 1.0}   # TTFT ~1 s: a few ms of scheduling noise stay well under 2%
TOKENIZER_SNIPPET = """
import json, sys
from faker.providers.lorem.en_US import Provider
vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(sorted(set(Provider.word_list)))}}
json.dump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
           "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}},
          open(sys.argv[1] + "/tokenizer.json", "w"))
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 10000000},
          open(sys.argv[1] + "/tokenizer_config.json", "w"))
"""


PEERS = (peers.GUIDELLM,)


def find_guidellm() -> str:
    """$PDLIFT_GUIDELLM when set, else the pinned guidellm from the peer cache (installed on first use)."""
    override = os.environ.get("PDLIFT_GUIDELLM")
    if override:
        if not Path(override).is_file():
            raise SystemExit(f"PDLIFT_GUIDELLM={override}: no such file (unset it to use the pinned "
                             f"{peers.GUIDELLM.requirement} from {peers.peer_dir(peers.GUIDELLM)})")
        return override
    return str(peers.ensure_or_exit(peers.GUIDELLM))


def run_pdlift(url: str, args) -> dict:
    result = run_load(LoadSpec(base_url=url, scenario="bench", input_tokens=args.input_tokens,
                               output_tokens=args.output_tokens, concurrency=args.concurrency,
                               duration_s=args.seconds, max_requests=1_000_000, warmup_requests=1,
                               model="m", request_timeout_s=120))
    done = [r for r in result.records if r.completed]
    # pdlift's own definition (planning/metrics.py, as vLLM's): completed / first send to last end.
    return {"tool": "pdlift", "requests_per_s": len(done) / result.duration_s,
            "ttft_ms": [r.ttft_s * 1000 for r in done], "prompt_tokens": [r.prompt_tokens for r in done],
            "errors": sum(1 for r in result.records if not r.completed),
            "note": f"client CPU {result.client_cpu_share:.0%} of a core, loop lag mean "
                    f"{result.loop_lag_mean_s * 1000:.1f} ms" + (" SATURATED" if result.saturated else "")}


def run_guidellm(exe: str, url: str, args, workdir: Path) -> dict:
    tokenizer = workdir / "tokenizer"
    tokenizer.mkdir(exist_ok=True)
    python = str(Path(exe).with_name("python"))
    subprocess.run([python, "-c", TOKENIZER_SNIPPET, str(tokenizer)], check=True, timeout=120,
                   env=peers.peer_env(peers.GUIDELLM))
    out = workdir / "guidellm.json"
    warmup = max(3, int(args.seconds // 4))   # seconds, left out of its metrics (pdlift: one wave)
    command = [exe, "run", "--backend", f"kind=openai_http,target={url},model=m,request_format=/v1/completions",
               "--profile", f"kind=concurrent,streams={args.concurrency},warmup={warmup}",
               "--constraint", f"kind=max_duration,seconds={args.seconds + warmup}",
               "--data", f"kind=synthetic_text,prompt_tokens={args.input_tokens},output_tokens={args.output_tokens}",
               "--tokenizer", f"kind=hf_auto,model={tokenizer}", "--output", f"kind=json,path={out}",
               "--disable-console"]
    env = peers.peer_env(peers.GUIDELLM)
    proc = subprocess.run(command, env=env, cwd=workdir, capture_output=True, text=True,
                          timeout=args.seconds + warmup + 300)
    if proc.returncode != 0:
        raise SystemExit(f"guidellm failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    bench = json.loads(out.read_text())["benchmarks"][0]
    # Its list holds the warm-up's requests too: keep those its own metrics count.
    ok = [r for r in bench["requests"]["successful"]
          if bench["start_time"] <= r["request_start_time"] and r["request_end_time"] <= bench["end_time"]]
    return {"tool": "guidellm", "requests_per_s": bench["metrics"]["requests_per_second"]["successful"]["mean"],
            "ttft_ms": [r["time_to_first_token_ms"] for r in ok], "prompt_tokens": [r["prompt_tokens"] for r in ok],
            "errors": len(bench["requests"]["errored"]),
            "note": f"{bench['config']['strategy']['worker_count']} worker processes, measured "
                    f"{bench['duration']:.0f} s after {bench['warmup_duration']:.0f} s of warm-up"}


def summarise(run: dict, model: LatencyModel) -> dict:
    n = len(run["ttft_ms"])
    measured = sum(run["ttft_ms"]) / n
    injected = sum(model.prefill_s(p) * 1000 for p in run["prompt_tokens"]) / n
    return {**run, "requests": n, "ttft_mean_ms": measured, "ttft_injected_ms": injected,
            "ttft_error": (measured - injected) / injected}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time per tool and round")
    parser.add_argument("--input-tokens", type=int, default=1000)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1, help="each round runs both tools (order alternates)")
    peers.add_arguments(parser, PEERS)
    args = parser.parse_args(argv)
    exe = find_guidellm()
    if args.install_peers:
        return 0
    model = LatencyModel().merged(LATENCY)
    with tempfile.TemporaryDirectory(prefix="pdlift-bench-") as tmp:
        launcher = Launcher(Path(tmp))
        port = launcher.port()
        engine = launcher.start(["vllm", "serve", "pdlift/tiny", "--served-model-name", "m", "--port", str(port),
                                 "--max-num-seqs", str(2 * args.concurrency)], "engine",
                                launcher.env(PDLIFT_SANDBOX_LATENCY=json.dumps(LATENCY)))
        try:
            url = f"http://127.0.0.1:{port}"
            engine.wait_http(url + "/health")
            runs = []
            for i in range(args.rounds):
                order = ("pdlift", "guidellm") if i % 2 == 0 else ("guidellm", "pdlift")
                for tool in order:
                    print(f"round {i + 1}: {tool} ...", file=sys.stderr, flush=True)
                    raw = run_pdlift(url, args) if tool == "pdlift" else run_guidellm(exe, url, args, Path(tmp))
                    runs.append(summarise(raw, model))
        finally:
            launcher.stop_all()
    print(f"target: sandbox vLLM engine, concurrency {args.concurrency}, {args.input_tokens} input / "
          f"{args.output_tokens} output tokens, {args.seconds:g} s measured per run, injected TTFT "
          f"{model.prefill_s(args.input_tokens) * 1000:.1f} ms")
    for r in runs:
        print(f"{r['tool']:<9} {r['requests_per_s']:8.1f} req/s  {r['requests']:6d} requests  {r['errors']} errors  "
              f"TTFT {r['ttft_mean_ms']:8.1f} ms vs injected {r['ttft_injected_ms']:.1f} ms "
              f"(error {r['ttft_error']:+.2%})  [{r['note']}]")
    mean = {tool: sum(r["requests_per_s"] for r in runs if r["tool"] == tool) / args.rounds
            for tool in ("pdlift", "guidellm")}
    print(f"ratio_vs_peer={mean['pdlift'] / mean['guidellm']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
