"""Text and `-J` JSON output of the sandbox nccl-tests, laid out as NVIDIA/nccl-tests prints them
(src/util.cu: writeDeviceReport, writeResultHeader, writeBenchmarkLine*, writeResultFooter).

Faithful quirks kept on purpose, because parsers must cope with the real thing: JSON booleans
are the strings "true"/"false", `root` is a 6-wide string, `nwrong` is null when not checked.
The JSON "env" list is the whole environment: NVIDIA/nccl-tests src/util.cu writes ``jsonKey("env")``
then one ``jsonStr`` per entry of ``envp``, with ``JSON_FILE_VERSION 3`` (nccl-tests 2.19.6; recorded
on an H200: tests/fixtures/outputs/nccl_sendrecv_1x_h200_recorded.json). Whoever keeps the document
must leave it out (tests/sandbox/fabric/test_fabric_stage.py holds the product to that)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

NCCL_VERSION = 22707  # NCCL 2.27.7, as pinned by the awsome-distributed-training image
TESTS_VERSION = "2.16.9"
AWS_OFI_NCCL = "1.16.3"


def float_str(value: float, width: int) -> str:
    """getFloatStr(): as many decimals as fit in `width`."""
    power, val = 0, 1
    while value >= val and power < 40:
        power, val = power + 1, val * 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


class Report:
    def __init__(self, binary, cfg, job, me, per_proc, nranks, argv):
        self.binary, self.cfg, self.job, self.me, self.argv = binary, cfg, job, me, list(argv)
        self.per_proc, self.nranks = per_proc, nranks
        self.devices: list[dict] = []
        self.results: list[dict] = []
        self.busbw: list[float] = []
        self.errors = 0
        self.per_iter = bool(cfg["per_iter_timing"])
        self.json_path = self._open_json(cfg["output_file"])
        self.start = time.strftime("%Y-%m-%d %H:%M:%S")

    def out(self, text: str, proc: int = 0) -> None:
        prefix = f"[1,{proc}]<stdout>:" if self.job.tag_output else ""
        sys.stdout.write(prefix + text + "\n")

    def _open_json(self, path):
        if not path:
            return None
        candidate, n = path, 0
        while n < 1000:
            try:
                with open(candidate, "x"):
                    pass
            except FileExistsError:
                candidate, n = f"{path}.{n}", n + 1
                continue
            except OSError:
                self.out(f"# skipping json output; {candidate} not accessible")
                return None
            self.out(f"# Writing JSON output to {candidate}")
            return candidate
        return None

    def pid(self, proc: int) -> int:
        if proc == 0:
            return os.getpid()
        return 1000 + int(hashlib.sha256(f"{self.job.procs[proc].instance_id}/{proc}".encode()).hexdigest()[:6], 16) % 60000

    def add_devices(self, proc: int, node, first_dev: int) -> None:
        for i in range(self.per_proc):
            dev = first_dev + i
            self.devices.append({
                "rank": proc * self.per_proc + i, "group": 0, "pid": self.pid(proc),
                "hostname": node.short_hostname, "device": dev,
                "device_hex": f"0x{node.profile['gpu_bus'][dev]:02x}", "device_info": node.profile["gpu_name"],
            })

    def preamble(self) -> None:
        c = self.cfg
        step = f"{c['stepfactor']}(factor)" if c["stepfactor"] > 1 else f"{c['stepbytes']}(bytes)"
        self.out(f"# nccl-tests version {TESTS_VERSION} nccl-headers={NCCL_VERSION} nccl-library={NCCL_VERSION}")
        self.out(f"# Collective test starting: {self.binary}")
        self.out(f"# nThread {c['nthreads']} nGpus {c['ngpus']} minBytes {c['minbytes']} maxBytes {c['maxbytes']} "
                 f"step: {step} warmup iters: {c['warmup_iters']} iters: {c['iters']} agg iters: {c['agg_iters']} "
                 f"validation: {c['check']} graph: {c['cudagraph']}")
        self.out("#")
        self.out("# Using devices")
        for d in self.devices:
            self.out("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s"
                     % (d["rank"], d["group"], d["pid"], d["hostname"], d["device"], d["device_hex"], d["device_info"]))

    def nccl_info(self, faults: dict, multi_node: bool) -> None:
        """NCCL_DEBUG=INFO lines: the evidence of which network NCCL used, per process."""
        for proc, node in enumerate(self.job.procs):
            f = faults[node.instance_id]
            head = f"{node.short_hostname}:{self.pid(proc)}:{self.pid(proc)} [{proc * self.per_proc % 8}] NCCL INFO"
            lines = [f"{head} Bootstrap : Using lo:{node.address}<0>"]
            if proc == 0:
                lines.append(f"NCCL version {NCCL_VERSION // 10000}.{NCCL_VERSION // 100 % 100}.{NCCL_VERSION % 100}+cuda12.9")
            lines.append(f"{head} NET/OFI Initializing aws-ofi-nccl {AWS_OFI_NCCL}")
            if f.get("no_efa_evidence"):
                lines += [f"{head} NET/OFI aws-ofi-nccl initialization failed",
                          f"{head} NET/IB : No device found.",
                          f"{head} NET/Socket : Using [0]lo:{node.address}<0>",
                          f"{head} Using network Socket"]
                via = "NET/Socket/0"
            else:
                nics = len(node.efa_domains(f))
                lines += [f"{head} NET/OFI Using Libfabric version 1.22",
                          f"{head} NET/OFI Selected Provider is efa (found {nics} nics)",
                          f"{head} Using network Libfabric"]
                via = "NET/Libfabric/0/GDRDMA"
            rank = proc * self.per_proc
            peer = (rank + self.nranks // max(1, len({n.instance_id for n in self.job.procs}))) % self.nranks
            if multi_node:
                lines.append(f"{head} Channel 00/0 : {rank}[{rank % 8}] -> {peer}[{peer % 8}] [send] via {via}")
            else:
                nxt = (rank + 1) % self.nranks
                lines.append(f"{head} Channel 00/0 : {rank}[{rank % 8}] -> {nxt}[{nxt % 8}] via P2P/CUMEM")
            lines.append(f"{head} comm 0x7f00{proc:04x} rank {rank} nranks {self.nranks} cudaDev {rank % 8} "
                         "- Init COMPLETE")
            for line in lines:
                self.out(line, proc)

    def header(self) -> None:
        """writeResultHeader(): a banner and two header lines, wider with -I 1 (per-iteration)."""
        t = "cputime" if self.cfg["report_cputime"] else "time"
        side = [(t, "(us)", 7), ("algbw", "(GB/s)", 6), ("busbw", "(GB/s)", 6), ("#wrong", "", 6)]
        if self.per_iter:
            side += [("i_min", "(us)", 7), ("i_max", "(us)", 7), ("i_p99", "(us)", 7), ("i_cv%", "(%)", 7)]
            banner = "             out-of-place (+ per-iteration)                                in-place (+ per-iteration)"
        else:
            banner = "          out-of-place                       in-place          "
        lead = [("size", "(B)", 10), ("count", "(elements)", 12), ("type", "", 8), ("redop", "", 6), ("root", "", 6)]
        columns = lead + side + side
        self.out("#")
        self.out("# " + "  ".join(" " * width for _, _, width in lead) + " " + banner)
        for index in (0, 1):
            self.out("# " + "  ".join(f"{col[index]:>{col[2]}}" for col in columns) + " ")

    def row(self, nbytes: int, count: int, places: list[tuple]) -> None:
        from nccl_model import COLLECTIVES

        redop = COLLECTIVES[self.binary][0] or self.cfg["op"]
        root = "%6i" % COLLECTIVES[self.binary][1]
        dtype = {"float32": "float", "float16": "half", "float64": "double", "char": "int8", "int": "int32"}.get(
            self.cfg["datatype"], self.cfg["datatype"])
        text = "%12li  %12li  %8s  %6s  %6s" % (nbytes, count, dtype, redop, root)
        entry = {"size": nbytes, "count": count, "type": dtype, "redop": redop, "root": root}
        for (t, alg, bus, wrong), key in zip(places, ("out_of_place", "in_place")):
            cells = (float_str(t, 7), float_str(alg, 6), float_str(bus, 6))
            text += ("  %7s  %6s  %6s  %6g" % (*cells, wrong)) if wrong is not None else ("  %7s  %6s  %6s    N/A" % cells)
            entry[key] = {"time": t, "alg_bw": alg, "bus_bw": bus, "nwrong": None if wrong is None else float(wrong)}
            if self.per_iter:
                stats = {"min_us": t * 0.985, "max_us": t * 1.03, "avg_us": t, "p50_us": t, "p95_us": t * 1.02,
                         "p99_us": t * 1.025, "stdev_us": t * 0.008, "cv_pct": 0.8}
                text += "  %7s  %7s  %7s  %7s" % tuple(float_str(stats[k], 7) for k in ("min_us", "max_us", "p99_us", "cv_pct"))
                entry[key + "_per_iter"] = stats
            self.errors += int(wrong or 0)
            self.busbw.append(bus)
        entry["actual_iterations"] = self.cfg["iters"]
        entry["experiment_name"] = ""
        self.results.append(entry)
        self.out(text)

    def footer(self, min_bw: float) -> bool:
        avg = sum(self.busbw) / len(self.busbw) if self.busbw else 0.0
        verdict = "" if min_bw == -1 else ("FAILED" if avg < min_bw * 0.9 else "OK")
        self.out("# %-20s : %d %s" % ("Out of bounds values", self.errors, "FAILED" if self.errors else "OK"))
        self.out("# %-20s : %g %s" % ("Avg bus bandwidth", avg, verdict))
        self.out("#")
        self.out(f"# Collective test concluded: {self.binary}")
        self.out("")
        self._write_json(avg, verdict)
        sys.stdout.flush()
        return bool(self.errors) or verdict == "FAILED"

    def timeout_failure(self, timeout: int) -> None:
        host = self.me.short_hostname
        self.out(f"{host}: Test timeout ({timeout}s) common.cu:398")
        self.out(f" .. {host} pid {os.getpid()}: Test failure common.cu:1134")
        sys.stdout.flush()

    def _write_json(self, avg: float, verdict: str) -> None:
        if not self.json_path:
            return
        c = self.cfg
        config = {"nthreads": c["nthreads"], "ngpus": c["ngpus"], "minimum_bytes": c["minbytes"],
                  "maximum_bytes": c["maxbytes"]}
        config.update({"step_factor": c["stepfactor"]} if c["stepfactor"] > 1 else {"step_bytes": c["stepbytes"]})
        config.update({"warmup_iters": c["warmup_iters"], "iterations": c["iters"], "aggregated_iterations": c["agg_iters"],
                       "validation": c["check"], "graph": c["cudagraph"], "blocking_collectives": "false",
                       "per_iter_timing": "true" if self.per_iter else "false", "parallel_init": "false",
                       "devices": self.devices})
        doc = {
            "version": 3, "start_time": self.start, "args": [self.binary, *self.argv],
            "env": [f"{k}={v}" for k, v in os.environ.items()],
            "nccl_version": NCCL_VERSION, "config": config, "results": self.results,
            "out_of_bounds": {"count": self.errors, "okay": "false" if self.errors else "true"},
            "average_bus_bandwidth": {"bandwidth": avg, "okay": "unchecked" if not verdict else ("true" if verdict == "OK" else "false")},
            "errors": [], "end_time": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        with open(self.json_path, "w") as fh:
            json.dump(doc, fh)
