"""`pdlift fabric validate BLUEPRINT` (stage 3) and `pdlift fabric parse KIND FILE` (log analysis).

`validate` shows the stage's progress (layers, pair rounds) on stderr (``cli.progress``).
`parse` reads what an operator saved from a node (nccl-tests text or -J JSON, fi_pingpong,
fi_info, nvidia-smi) with the same parsers the stage uses; `--json` prints the parsed record.
"""

from __future__ import annotations

import argparse
import json
import sys

from cli.common import add_run_id, print_record, resolve_run_id
from cli.progress import progress_bar
from cli.server import ensure_api
from tasks.errors import ConfigError

KINDS = ("nccl", "pingpong", "fi_info", "nvidia_smi")


def _cmd_validate(args: argparse.Namespace) -> int:
    from flows.fabric import fabric_flow

    run_id = resolve_run_id(args.blueprint, args.run_id)
    ensure_api()
    with progress_bar():
        verdict = fabric_flow(args.blueprint, run_id)
    print_record(run_id, verdict)
    return 0


def _read(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from e


def _summary(kind: str, parsed) -> list[str]:
    if kind == "nccl":
        lines = [f"{parsed.collective or 'nccl-tests'} ({parsed.source_format}): {len(parsed.rows)} rows, "
                 f"hosts {', '.join(parsed.hosts) or '-'}, EFA evidence: {'yes' if parsed.evidence.efa else 'no'}"]
        lines += [f"  {r.size_bytes:>14} B {r.dtype:<9} busbw out-of-place "
                  f"{r.out_of_place.busbw_gbs if r.out_of_place else float('nan'):9.2f} GB/s"
                  f"  #wrong {r.wrong_total}" for r in parsed.rows]
        lines += [f"  FAIL: {reason}" for reason in parsed.hard_failures()]
        return lines
    if kind == "pingpong":
        lines = [f"fi_pingpong: {len(parsed.rows)} rows, latency {parsed.latency_us()} us, "
                 f"{'ok' if parsed.ok else 'FAILED'}"]
        return lines + [f"  FAIL: {reason}" for reason in parsed.failures()]
    if kind == "fi_info":
        devices = parsed.devices("efa")
        return [f"fi_info: {len(devices)} efa device(s): {', '.join(devices) or '-'}"
                + (f" ({parsed.error})" if parsed.error else "")]
    return [f"nvidia-smi: {len(parsed.gpus)} GPU(s), models {', '.join(parsed.models) or '-'}, drivers "
            f"{', '.join(parsed.driver_versions) or '-'}" + (f" ({parsed.error})" if parsed.error else "")]


def _cmd_parse(args: argparse.Namespace) -> int:
    from tasks.parsing import fi_info, nccl_tests, nvidia_smi, pingpong

    modules = {"nccl": (nccl_tests.parse_nccl_tests, nccl_tests.to_json),
               "pingpong": (pingpong.parse_pingpong, pingpong.to_json),
               "fi_info": (fi_info.parse_fi_info, fi_info.to_json),
               "nvidia_smi": (nvidia_smi.parse_nvidia_smi, nvidia_smi.to_json)}
    parse, to_json = modules[args.kind]
    parsed = parse(_read(args.file))  # ParseError -> exit 1 with its message (cli/main.py)
    if args.json:
        print(json.dumps(to_json(parsed), indent=2, sort_keys=True))
    else:
        print("\n".join(_summary(args.kind, parsed)))
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("fabric", help="stage 3: validate the EFA fabric; parse fabric tool output")
    fsub = p.add_subparsers(dest="fabric_command", metavar="SUBCOMMAND", required=True)
    v = fsub.add_parser("validate", help="inventory, NIC loopbacks, single node, pairwise, whole set; "
                                         "replace ISOLATE nodes")
    v.add_argument("blueprint")
    add_run_id(v, "the run whose launched fleet to validate")
    v.set_defaults(fabric_handler=_cmd_validate)
    r = fsub.add_parser("parse", help="parse saved tool output (nccl-tests, fi_pingpong, fi_info, nvidia-smi)")
    r.add_argument("kind", choices=KINDS)
    r.add_argument("file", help="the saved output ('-' for stdin)")
    r.add_argument("--json", action="store_true", help="print the parsed record as JSON")
    r.set_defaults(fabric_handler=_cmd_parse)
    handlers["fabric"] = lambda args: args.fabric_handler(args)
