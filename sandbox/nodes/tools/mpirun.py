#!/usr/bin/env python3
"""Sandbox `mpirun` (Open MPI command line) for the nccl-tests binaries.

It maps processes onto hosts as Open MPI does (`--host a,b` / `-H a:8,b:8`, `--hostfile`, `-np`,
`-N` / `--npernode` / `--map-by ppr:N:node`, `--oversubscribe`), resolves each host to a sandbox
node (address, instance id or hostname) and fails as mpirun does when a host cannot be reached
(unknown, terminated, sshd down or `unreachable`). It launches no daemons: the nccl-test runs in
this process on behalf of all ranks, with every participant's faults (see nccl_tests.py), so a
kill of this process leaves nothing behind on any node. `-x VAR[=value]` exports to the job;
`--tag-output` prefixes lines with `[1,rank]<stdout>:`; --mca, --bind-to etc. are accepted.
Programs other than the nccl-tests binaries are refused (the sandbox has no MPI runtime).
"""

from __future__ import annotations

import ipaddress
import os
import sys

import nccl_model
import nccl_tests
import toolkit

WITH_VALUE = {"-np", "-n", "--np", "-c", "-N", "--npernode", "-npernode", "--host", "-host", "-H",
              "--hostfile", "-hostfile", "--machinefile", "-machinefile", "-x", "--map-by", "-map-by",
              "--bind-to", "-bind-to", "--rank-by", "-rank-by", "--prefix", "--wdir", "-wdir",
              "--output-filename", "--timeout", "--rankfile", "-rf", "--launch-agent", "--display"}
WITH_TWO = {"--mca", "-mca", "-gmca", "--gmca"}
BAR = "-" * 74


class MpiError(Exception):
    pass


def parse(argv: list[str]) -> tuple[dict, list[str]]:
    opts: dict = {"hosts": [], "np": None, "ppn": None, "env": {}, "tag": False, "oversubscribe": False}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-"):
            return opts, argv[i:]
        if arg in WITH_TWO:
            i += 3
            continue
        if arg in WITH_VALUE:
            if i + 1 >= len(argv):
                raise MpiError(f"mpirun: option {arg} needs a value")
            value = argv[i + 1]
            if arg in ("-np", "-n", "--np", "-c"):
                opts["np"] = int(value)
            elif arg in ("-N", "--npernode", "-npernode"):
                opts["ppn"] = int(value)
            elif arg in ("--map-by", "-map-by") and value.startswith("ppr:") and value.endswith(":node"):
                opts["ppn"] = int(value.split(":")[1])
            elif arg in ("--host", "-host", "-H"):
                for item in value.split(","):
                    name, _, slots = item.partition(":")
                    opts["hosts"].append((name, int(slots) if slots else 1))
            elif arg in ("--hostfile", "-hostfile", "--machinefile", "-machinefile"):
                opts["hosts"] += read_hostfile(value)
            elif arg == "-x":
                name, eq, val = value.partition("=")
                opts["env"][name] = val if eq else os.environ.get(name, "")
            i += 2
            continue
        if arg in ("--tag-output", "-tag-output"):
            opts["tag"] = True
        elif arg in ("--oversubscribe", "-oversubscribe"):
            opts["oversubscribe"] = True
        i += 1
    return opts, []


def read_hostfile(path: str) -> list[tuple[str, int]]:
    hosts = []
    with open(path) as fh:
        for line in fh:
            words = line.split("#")[0].split()
            if not words:
                continue
            slots = 1
            for word in words[1:]:
                if word.startswith(("slots=", "max_slots=")):
                    slots = int(word.split("=")[1])
            hosts.append((words[0], slots))
    return hosts


def layout(opts: dict, me: toolkit.Node) -> list[str]:
    """Host name of each process, in rank order (Open MPI's by-slot / ppr mapping)."""
    hosts = opts["hosts"] or [("localhost", me.gpu_count() or 1)]
    if opts["ppn"]:
        names = [name for name, _ in hosts for _ in range(opts["ppn"])]
        np = opts["np"] or len(names)
        if np > len(names):
            raise MpiError(f"There are not enough slots available in the system to satisfy the {np}\n"
                           "slots that were requested by the application.")
        return names[:np]
    slots = [name for name, count in hosts for _ in range(count)]
    np = opts["np"] or len(slots)
    if np > len(slots) and not opts["oversubscribe"]:
        raise MpiError(f"There are not enough slots available in the system to satisfy the {np}\n"
                       "slots that were requested by the application.")
    return [slots[i % len(slots)] for i in range(np)]


def unreachable(name: str, reason: str) -> MpiError:
    return MpiError(f"{reason}\n{BAR}\nORTE was unable to reliably start one or more daemons.\n"
                    "This usually is caused by:\n\n* not finding the required libraries and/or binaries on\n"
                    "  one or more nodes.\n\n* the inability to write startup files into /tmp\n\n"
                    "* compilation of the orted with dynamic libraries when static are required\n\n"
                    f"  Host: {name}\n{BAR}")


def resolve(names: list[str], me: toolkit.Node) -> list[toolkit.Node]:
    found: dict[str, toolkit.Node] = {}
    for name in dict.fromkeys(names):
        node = toolkit.find_node(me, name)
        if node is None:
            try:
                ipaddress.ip_address(name)
                raise unreachable(name, f"ssh: connect to host {name} port 22: Connection refused")
            except ValueError:
                raise unreachable(name, f"ssh: Could not resolve hostname {name}: Name or service not known") from None
        if node is not me and not node.is_up():
            raise unreachable(name, f"ssh: connect to host {node.address} port 22: Connection refused")
        found[name] = node
    return [found[name] for name in names]


def main(argv: list[str]) -> int:
    me = toolkit.this_node()
    try:
        opts, program = parse(argv)
        if not program:
            raise MpiError("mpirun could not find anything to do.")
        binary = os.path.basename(program[0])
        if binary not in nccl_model.COLLECTIVES:
            raise MpiError(f"mpirun was unable to launch the specified application as it could not access\n"
                           f"or execute an executable:\n\nExecutable: {program[0]}\n\n"
                           f"(the sandbox mpirun runs only {', '.join(nccl_model.COLLECTIVES)})")
        procs = resolve(layout(opts, me), me)
    except (MpiError, ValueError, OSError) as exc:
        print(f"{BAR}\n{exc}\n{BAR}" if not str(exc).startswith(("ssh:", BAR)) else str(exc), file=sys.stderr)
        return 1
    os.environ.update(opts["env"])
    code = nccl_tests.main(program[1:], binary, nccl_tests.Job(procs, opts["tag"]))
    if code:
        sys.stdout.flush()
        print(f"{BAR}\nPrimary job  terminated normally, but 1 process returned\na non-zero exit code. "
              f"Per user-direction, the job has been aborted.\n{BAR}\n{BAR}\nmpirun detected that one or more "
              f"processes exited with non-zero status, thus causing\nthe job to be terminated. The first process "
              f"to do so was:\n\n  Process name: [[4242,1],0]\n  Exit code:    {code}\n{BAR}", file=sys.stderr)
    return code


if __name__ == "__main__":
    toolkit.run_tool(main, sys.argv[1:])
