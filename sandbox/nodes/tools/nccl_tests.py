#!/usr/bin/env python3
"""Sandbox nccl-tests (`all_reduce_perf`, `alltoall_perf`, `sendrecv_perf`): NVIDIA/nccl-tests'
command line and its text and `-J` JSON output formats (columns as in src/util.cu), with numbers
from nccl_model. Run alone it is one process on this node; under the sandbox `mpirun` the job's
processes sit on the named sandbox nodes, and every participant's faults count:
`gpus` (too few GPUs -> "Invalid number of GPUs"), `nccl_wrong` (#wrong > 0, FAILED, exit 1),
`hang` (blocks until killed, or until `-T` seconds then "Test timeout"), `no_efa_evidence`
(NCCL_DEBUG=INFO shows NET/Socket), `slow_link` (lower bandwidth across nodes).
Usage: nccl_tests.py BINARY [nccl-tests options]  (the node's wrappers pass BINARY)."""

from __future__ import annotations

import getopt
import os
import sys
import time

import faults as fault_file
import nccl_model
import nccl_report
import toolkit

SHORT = "t:g:b:e:i:f:n:m:w:p:c:o:d:r:z:y:T:hG:C:a:R:x:D:J:S:I:M:N:"
LONG = [
    "nthreads=", "ngpus=", "minbytes=", "maxbytes=", "stepbytes=", "stepfactor=", "iters=",
    "agg_iters=", "warmup_iters=", "parallel_init=", "check=", "op=", "datatype=", "root=",
    "blocking=", "stream_null=", "timeout=", "cudagraph=", "report_cputime=", "average=",
    "local_register=", "output_file=", "report_timestamps=", "per_iter_timing=", "help",
]
ALIASES = {"-t": "nthreads", "-g": "ngpus", "-b": "minbytes", "-e": "maxbytes", "-i": "stepbytes",
           "-f": "stepfactor", "-n": "iters", "-m": "agg_iters", "-w": "warmup_iters", "-c": "check",
           "-o": "op", "-d": "datatype", "-r": "root", "-T": "timeout", "-G": "cudagraph",
           "-J": "output_file", "-I": "per_iter_timing", "-C": "report_cputime"}
TYPES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
         "int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8, "uint64": 8}
OPS = ("sum", "prod", "max", "min", "avg")
MAX_ROWS = 4096


class Job:
    """The processes of one run, in rank order: the sandbox node each one runs on."""

    def __init__(self, procs: list[toolkit.Node], tag_output: bool = False):
        self.procs = procs
        self.tag_output = tag_output


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip()
    if text and text[-1].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def parse_args(argv: list[str]) -> dict:
    cfg = {"nthreads": 1, "ngpus": 1, "minbytes": 32 << 20, "maxbytes": 32 << 20, "stepbytes": 1 << 20,
           "stepfactor": 1, "iters": 20, "agg_iters": 1, "warmup_iters": 1, "check": 1, "op": "sum",
           "datatype": "float", "root": 0, "timeout": 0, "cudagraph": 0, "output_file": None,
           "per_iter_timing": 0, "report_cputime": 0}
    opts, _ = getopt.gnu_getopt(argv, SHORT, LONG)
    for opt, val in opts:
        key = ALIASES.get(opt, opt.lstrip("-"))
        if key == "help" or opt == "-h":
            raise getopt.GetoptError("help requested")
        if key not in cfg:
            continue  # accepted and ignored, as the sandbox has nothing to tune
        if key in ("minbytes", "maxbytes", "stepbytes"):
            cfg[key] = parse_size(val)
        elif key in ("op", "datatype", "output_file"):
            cfg[key] = val
        else:
            cfg[key] = int(val)
    if cfg["datatype"] not in TYPES or cfg["op"] not in OPS:
        raise getopt.GetoptError(f"invalid type/op: {cfg['datatype']}/{cfg['op']}")
    return cfg


def sizes(cfg: dict) -> list[int]:
    out, size = [], cfg["minbytes"]
    while size <= cfg["maxbytes"] and len(out) < MAX_ROWS:
        out.append(size)
        size = size * cfg["stepfactor"] if cfg["stepfactor"] > 1 else size + max(1, cfg["stepbytes"])
    return out


def main(argv: list[str], binary: str, job: Job | None = None) -> int:
    me = toolkit.this_node()
    job = job or Job([me])
    try:
        cfg = parse_args(argv)
    except (getopt.GetoptError, ValueError) as exc:
        print(f"{binary}: {exc}\nUSAGE: {binary} [-t nthreads] [-g ngpus] [-b minbytes] [-e maxbytes] "
              "[-f stepfactor] [-n iters] [-w warmup] [-c check] [-o op] [-d datatype] [-T timeout] [-J file]",
              file=sys.stderr)
        return 1
    hosts: list[toolkit.Node] = []
    for node in job.procs:
        if node.instance_id not in {h.instance_id for h in hosts}:
            hosts.append(node)
    faults = {h.instance_id: h.faults() for h in hosts}
    per_proc = cfg["nthreads"] * cfg["ngpus"]
    nranks = per_proc * len(job.procs)
    report = nccl_report.Report(binary, cfg, job, me, per_proc, nranks, argv)
    local_rank: dict[str, int] = {}
    for proc, node in enumerate(job.procs):
        lr = local_rank.get(node.instance_id, 0)
        local_rank[node.instance_id] = lr + 1
        have = node.gpu_count(faults[node.instance_id])
        if (lr + 1) * per_proc > have:
            print(f"Invalid number of GPUs: {(lr + 1) * per_proc} requested but only {have} were found.",
                  file=sys.stderr)
            print("Please check the number of processes and GPUs per process.", file=sys.stderr)
            return 1
        report.add_devices(proc, node, lr * per_proc)
    socket = any(f.get("no_efa_evidence") for f in faults.values())
    report.preamble()
    if os.environ.get("NCCL_DEBUG", "").upper() in ("INFO", "TRACE"):
        report.nccl_info(faults, multi_node=len(hosts) > 1)
    report.header()
    if any(fault_file.hangs(f, binary) for f in faults.values()):
        toolkit.hang_until_killed(cfg["timeout"] or None)
        report.timeout_failure(cfg["timeout"])
        return 1
    links = [h.link_gbytes_per_s(faults[h.instance_id]) for h in hosts]
    peak = nccl_model.peak_busbw(binary, links, nranks, socket)
    wrong = max(int(f.get("nccl_wrong", 0) or 0) for f in faults.values()) if cfg["check"] else 0
    word = TYPES[cfg["datatype"]]
    seed_base = f"{binary}/{','.join(h.instance_id for h in hosts)}/{nranks}"
    modeled_s = 0.0
    for size in sizes(cfg):
        align = word * (nranks if binary == "alltoall_perf" else 1)
        nbytes = size // align * align
        places = []
        for place in ("out", "in"):
            t, alg, bus = nccl_model.measure(binary, nbytes, nranks, len(hosts), peak, f"{seed_base}/{nbytes}/{place}")
            checked = cfg["check"] and not (binary == "alltoall_perf" and place == "in")
            places.append((t, alg, bus, wrong if checked else None))
            modeled_s += t * 1e-6 * (cfg["iters"] + cfg["warmup_iters"])
        report.row(nbytes, nbytes // word, places)
    time.sleep(min(modeled_s, float(os.environ.get("PDLIFT_SANDBOX_NCCL_MAX_SLEEP_S", "0.2"))))
    min_bw = float(os.environ.get("NCCL_TESTS_MIN_BW", "-1"))
    failed = report.footer(min_bw)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in nccl_model.COLLECTIVES:
        print(f"usage: nccl_tests.py {{{','.join(nccl_model.COLLECTIVES)}}} [options]", file=sys.stderr)
        sys.exit(2)
    toolkit.run_tool(lambda argv: main(argv, sys.argv[1]), sys.argv[2:])
