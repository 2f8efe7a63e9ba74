#!/usr/bin/env python3
"""Sandbox `nvidia-smi`: the GPUs of the node's instance type (8 x NVIDIA H200 on p5en) in the
real output formats: `--query-gpu=... --format=csv[,noheader][,nounits]` (with `-i`), `-L`, and the
plain summary table. A `gpus: N` node fault hides GPUs from the end, as a lost GPU does."""

from __future__ import annotations

import getopt
import hashlib
import sys
import time

import toolkit

# field -> (header unit, value function(gpu dict) -> (value, unit suffix))
FIELDS = {
    "index": ("", lambda g: (str(g["index"]), "")),
    "name": ("", lambda g: (g["name"], "")),
    "gpu_name": ("", lambda g: (g["name"], "")),
    "uuid": ("", lambda g: (g["uuid"], "")),
    "gpu_uuid": ("", lambda g: (g["uuid"], "")),
    "serial": ("", lambda g: (g["serial"], "")),
    "driver_version": ("", lambda g: (g["driver"], "")),
    "vbios_version": ("", lambda g: ("96.00.A5.00.01", "")),
    "pci.bus_id": ("", lambda g: (g["bus_id"], "")),
    "gpu_bus_id": ("", lambda g: (g["bus_id"], "")),
    "count": ("", lambda g: (str(g["count"]), "")),
    "memory.total": (" [MiB]", lambda g: (str(g["memory_mib"]), " MiB")),
    "memory.used": (" [MiB]", lambda g: ("0", " MiB")),
    "memory.free": (" [MiB]", lambda g: (str(g["memory_mib"] - 536), " MiB")),
    "temperature.gpu": ("", lambda g: (str(30 + g["index"] % 4), "")),
    "utilization.gpu": (" [%]", lambda g: ("0", " %")),
    "power.draw": (" [W]", lambda g: ("75.62", " W")),
    "power.limit": (" [W]", lambda g: ("700.00", " W")),
    "persistence_mode": ("", lambda g: ("Enabled", "")),
    "compute_cap": ("", lambda g: ("9.0", "")),
    "ecc.errors.uncorrected.volatile.total": ("", lambda g: ("0", "")),
    "clocks.max.sm": (" [MHz]", lambda g: ("1980", " MHz")),
}


def gpus(node: toolkit.Node) -> list[dict]:
    prof = node.profile
    count = node.gpu_count()
    out = []
    for i in range(count):
        digest = hashlib.sha256(f"{node.instance_id}/gpu{i}".encode()).hexdigest()
        uuid = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        out.append(
            {
                "index": i,
                "count": count,
                "name": prof["gpu_name"],
                "uuid": uuid,
                "serial": str(int(digest[:12], 16))[:13],
                "driver": prof["driver_version"],
                "bus_id": f"00000000:{prof['gpu_bus'][i]:02X}:00.0",
                "memory_mib": prof["gpu_memory_mib"],
            }
        )
    return out


def query(rows: list[dict], fields: list[str], fmt: set[str]) -> int:
    for name in fields:
        if name not in FIELDS:
            print(f'Field "{name}" is not a valid field to query.', file=sys.stderr)
            return 2
    if "csv" not in fmt:
        print('"--format=csv" is required with --query-gpu.', file=sys.stderr)
        return 2
    if "noheader" not in fmt:
        print(", ".join(name + FIELDS[name][0] for name in fields))
    for gpu in rows:
        cells = []
        for name in fields:
            value, unit = FIELDS[name][1](gpu)
            cells.append(value if "nounits" in fmt else value + unit)
        print(", ".join(cells))
    return 0


def summary(node: toolkit.Node, rows: list[dict]) -> None:
    prof = node.profile
    bar = "+" + "-" * 89 + "+"
    mid = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    print(time.strftime("%a %b %e %H:%M:%S %Y"))
    print(bar)
    head = f"NVIDIA-SMI {prof['driver_version']:<23}Driver Version: {prof['driver_version']:<15}CUDA Version: {prof['cuda_version']}"
    print(f"| {head:<88}|")
    print("|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+")
    print("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |")
    print("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |")
    print("|                                         |                        |               MIG M. |")
    print("|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|")
    for g in rows:
        cells = [
            (f" {g['index']:>3}  {g['name']:<29}{'On':>4}  ", f" {g['bus_id']:>18} Off ", f" {0:>20} "),
            (f" N/A   {30 + g['index'] % 4}C    P0 {'76W /  700W':>23} ", f" {'0MiB / ' + str(g['memory_mib']) + 'MiB':>22} ",
             f" {'0%      Default':>20} "),
            (" " * 41, " " * 24, f" {'Disabled':>20} "),
        ]
        for a, b, c in cells:
            print(f"|{a:<41}|{b:<24}|{c:<22}|")
        print(mid)
    print()
    print(bar)
    print(f"| {'Processes:':<87} |")
    print(f"| {' GPU   GI   CI              PID   Type   Process name                        GPU Memory':<87} |")
    print(f"| {'       ID   ID                                                               Usage':<87} |")
    print("|" + "=" * 89 + "|")
    print(f"| {' No running processes found':<87} |")
    print(bar)


def main(argv: list[str]) -> int:
    node = toolkit.this_node()
    try:
        opts, _ = getopt.gnu_getopt(argv, "Li:q", ["query-gpu=", "format=", "id=", "list-gpus"])
    except getopt.GetoptError:
        print("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.", file=sys.stderr)
        return 2
    rows = gpus(node)
    fields: list[str] | None = None
    fmt: set[str] = set()
    for opt, val in opts:
        if opt in ("-i", "--id"):
            wanted = {int(v) for v in val.split(",") if v.strip().isdigit()}
            rows = [g for g in rows if g["index"] in wanted]
            if not rows:
                print("No devices were found", file=sys.stderr)
                return 6
        elif opt == "--query-gpu":
            fields = [f.strip() for f in val.split(",") if f.strip()]
        elif opt == "--format":
            fmt = {f.strip() for f in val.split(",")}
        elif opt in ("-L", "--list-gpus"):
            for g in rows:
                print(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
            return 0
    if not rows:
        print("No devices were found", file=sys.stderr)
        return 6
    if fields is not None:
        return query(rows, fields, fmt)
    summary(node, rows)
    return 0


if __name__ == "__main__":
    toolkit.run_tool(main, sys.argv[1:])
