"""Verdicts for each validation layer, from the blueprint's absolute floors plus robust outliers.

Hard failures ISOLATE whatever the bandwidth: ``#wrong > 0``, out-of-bounds FAILED, a fatal
nccl-tests line, a timeout, a non-zero exit, or (for tests that cross nodes) an NCCL log that
does not prove EFA carried the traffic. Bandwidth is judged at ``fabric.judge_size_bytes``,
never by the sweep-wide average. Outliers (median/MAD across nodes, NICs or pairs) MONITOR.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from blueprints.schema import FabricSpec
from tasks.parsing.fi_info import FiInfoResult
from tasks.parsing.nccl_model import busbw_at
from tasks.parsing.nvidia_smi import GpuInventory
from tasks.planning.fabric.outliers import median, outliers
from tasks.planning.fabric.pairing import Pair, pair_name
from tasks.planning.fabric.records import (
    Check, NcclRun, PairRuns, PingpongRun, Verdict, VerdictRecord, human_size, record, with_checks,
)

ISOLATE, MONITOR, PASS = Verdict.ISOLATE, Verdict.MONITOR, Verdict.PASS


def pair_floors(spec: FabricSpec) -> dict[str, float]:
    return {"all_reduce": spec.pair_allreduce_busbw_gbs, "alltoall": spec.pair_alltoall_busbw_gbs,
            "sendrecv": spec.pair_sendrecv_busbw_gbs}


def _busbw_name(run: NcclRun, spec: FabricSpec) -> str:
    return f"{run.name} busbw @ {human_size(spec.judge_size_bytes)}"


def nccl_checks(run: NcclRun, spec: FabricSpec, *, floor_gbs: float | None,
                require_efa: bool) -> list[Check]:
    """Hard-fail conditions, EFA evidence and the floor at the judging size for one run."""
    name = run.name
    checks: list[Check] = []
    if run.timed_out:
        checks.append(Check(f"{name} finished", ISOLATE, "timeout", spec.test_timeout_s, "s",
                            f"{name} hung: killed at its {spec.test_timeout_s} s timeout"))
    if run.exit_code not in (None, 0):
        checks.append(Check(f"{name} exit code", ISOLATE, run.exit_code, 0, "",
                            f"{name} exited with code {run.exit_code}"))
    result = run.result
    if result is None:
        checks.append(Check(f"{name} output", ISOLATE, None, None, "",
                            f"{name} left no readable output: {run.error or 'nothing came back'}"))
        return checks
    checks += [Check(f"{name} result", ISOLATE, None, None, "", f"{name}: {reason}")
               for reason in result.hard_failures()]
    if require_efa:
        checks += _efa_checks(run)
    value = busbw_at(result, spec.judge_size_bytes)
    label = _busbw_name(run, spec)
    if value is None:
        if result.rows:
            checks.append(Check(label, ISOLATE, None, floor_gbs, "GB/s",
                                f"{name} sweep never reached {human_size(spec.judge_size_bytes)}"))
    elif floor_gbs is not None and not value >= floor_gbs:  # NaN fails too
        checks.append(Check(label, ISOLATE, value, floor_gbs, "GB/s",
                            f"{name} busbw {value:.2f} GB/s at {human_size(spec.judge_size_bytes)} "
                            f"is below the {floor_gbs:g} GB/s floor"))
    else:
        checks.append(Check(label, PASS, value, floor_gbs, "GB/s"))
    return checks


def _efa_checks(run: NcclRun) -> list[Check]:
    ev = run.result.evidence  # type: ignore[union-attr]
    name = run.name
    checks = []
    providers = ", ".join(ev.providers) or "none"
    if not ev.efa_provider:
        checks.append(Check(f"{name} EFA provider", ISOLATE, providers, "efa", "",
                            f"{name}: NCCL log lacks 'NET/OFI Selected provider is efa' "
                            f"(providers seen: {providers})"))
    else:
        checks.append(Check(f"{name} EFA provider", PASS, providers, "efa"))
    networks = ", ".join(ev.networks) or "none"
    if ev.socket:
        checks.append(Check(f"{name} network", ISOLATE, "Socket", "Libfabric", "",
                            f"{name}: NCCL fell back to TCP sockets (NET/Socket)"))
    elif not (ev.libfabric_network or ev.libfabric_channels):
        checks.append(Check(f"{name} network", ISOLATE, networks, "Libfabric", "",
                            f"{name}: NCCL log lacks 'Using network Libfabric' (networks: {networks})"))
    if not ev.gdrdma:
        checks.append(Check(f"{name} GPUDirect RDMA", MONITOR, "no", "GDRDMA", "",
                            f"{name}: no NET/Libfabric/N/GDRDMA channel: GPUDirect RDMA not shown in use"))
    return checks


def pingpong_checks(run: PingpongRun, spec: FabricSpec, *, label: str = "fi_pingpong") -> list[Check]:
    checks: list[Check] = []
    if run.timed_out:
        checks.append(Check(f"{label} finished", ISOLATE, "timeout", None, "",
                            f"{label} hung and was stopped at its timeout"))
    if run.exit_code not in (None, 0):
        checks.append(Check(f"{label} exit code", ISOLATE, run.exit_code, 0, "",
                            f"{label} exited with code {run.exit_code}"))
    if run.result is None:
        checks.append(Check(f"{label} output", ISOLATE, None, None, "",
                            f"{label} left no readable output: {run.error or 'nothing came back'}"))
        return checks
    for reason in run.result.failures(include_exit_code=run.exit_code is None):
        lost = reason.endswith("never acknowledged")
        checks.append(Check(f"{label} result", MONITOR if lost else ISOLATE, None, None, "",
                            f"{label}: {reason}"))
    latency = run.result.latency_us()
    if latency is not None:
        limit = spec.max_pingpong_latency_us
        ok = latency <= limit
        checks.append(Check(f"{label} latency", PASS if ok else ISOLATE, latency, limit, "us",
                            "" if ok else f"{label} latency {latency:.2f} us exceeds {limit:g} us"))
    return checks


def judge_inventory(node: str, gpus: GpuInventory | None, fi_info: FiInfoResult | None,
                    spec: FabricSpec, *, provider: str = "efa", error: str | None = None) -> VerdictRecord:
    """Layer 1: the right number of GPUs (one model, one driver) and of EFA devices."""
    checks = []
    if gpus is None:
        checks.append(Check("GPUs", ISOLATE, None, spec.gpus, "", f"no GPU inventory: {error or 'nvidia-smi failed'}"))
    else:
        n = len(gpus.gpus)
        detail = f"{n} GPUs found, {spec.gpus} expected" + (f" ({gpus.error})" if gpus.error else "")
        checks.append(Check("GPUs", PASS if n == spec.gpus else ISOLATE, n, spec.gpus, "",
                            "" if n == spec.gpus else detail))
        for what, values in (("GPU model", gpus.models), ("driver version", gpus.driver_versions)):
            if len(values) > 1:
                checks.append(Check(what, MONITOR, ", ".join(values), "one", "",
                                    f"mixed {what}s on one node: {', '.join(values)}"))
    if fi_info is None:
        checks.append(Check("EFA devices", ISOLATE, None, spec.efa_devices, "",
                            f"no fi_info listing: {error or 'fi_info failed'}"))
    else:
        n = fi_info.device_count(provider)
        verdict = PASS if n == spec.efa_devices else (ISOLATE if n < spec.efa_devices else MONITOR)
        detail = "" if verdict is PASS else (
            f"{n} {provider} devices found, {spec.efa_devices} expected"
            + (f" ({fi_info.error})" if fi_info.error else ""))
        checks.append(Check("EFA devices", verdict, n, spec.efa_devices, "", detail))
    return record("node", node, (node,), checks)


def judge_nics(runs: Mapping[tuple[str, str], PingpongRun], spec: FabricSpec) -> tuple[VerdictRecord, ...]:
    """Layer 2: each NIC's pinned loopback, plus latency outliers across every NIC of the fleet."""
    recs = {key: record("nic", f"{key[0]}/{key[1]}", (key[0],), pingpong_checks(run, spec, label="loopback"))
            for key, run in runs.items()}
    latencies = {f"{k[0]}/{k[1]}": run.result.latency_us() for k, run in runs.items()
                 if run.result is not None and run.result.latency_us() is not None}
    flagged = outliers(latencies, spec.outlier_mad_threshold, "high")  # type: ignore[arg-type]
    mid = median(latencies)  # type: ignore[arg-type]
    out = []
    for key, rec in recs.items():
        subject = rec.subject
        if subject in flagged:
            rec = with_checks(rec, [Check("loopback latency outlier", MONITOR, latencies[subject], mid, "us",
                                          f"latency {latencies[subject]:.2f} us vs fleet median {mid:.2f} us "
                                          f"(robust score {flagged[subject]:+.1f})")])
        out.append(rec)
    return tuple(out)


def negative_control(node: str, run: PingpongRun) -> VerdictRecord:
    """The run pinned to a NIC that does not exist must fail, or NIC pinning proves nothing.

    A pass here is a configuration fault (the pinning variable is ignored, as the made-up
    FI_EFA_DEVICE_NAME once was), not a bad node: the stage should stop, not replace.
    """
    failed = run.timed_out or run.exit_code not in (None, 0) or run.result is None or not run.result.ok
    check = Check("negative control", PASS if failed else ISOLATE, "failed" if failed else "passed",
                  "must fail", "", "" if failed else
                  "a loopback pinned to a nonexistent NIC passed: NIC pinning is not in effect")
    return record("node", node, (node,), [check])


def _with_outliers(recs: dict[str, VerdictRecord], values: dict[str, float], spec: FabricSpec,
                   what: str) -> None:
    flagged = outliers(values, spec.outlier_mad_threshold, "low")
    mid = median(values)
    for subject, score in flagged.items():
        recs[subject] = with_checks(recs[subject], [Check(
            f"{what} outlier", MONITOR, values[subject], mid, "GB/s",
            f"{what} {values[subject]:.2f} GB/s vs median {mid:.2f} GB/s (robust score {score:+.1f}, "
            f"threshold -{spec.outlier_mad_threshold:g})")])


def judge_single_nodes(runs: Mapping[str, NcclRun], spec: FabricSpec) -> tuple[VerdictRecord, ...]:
    """Layer 3: all_reduce on one node's GPUs (NVLink only: no EFA evidence expected)."""
    recs = {node: record("node", node, (node,), nccl_checks(
        run, spec, floor_gbs=spec.single_node_allreduce_busbw_gbs, require_efa=False))
        for node, run in runs.items()}
    values = {node: v for node, run in runs.items() if run.result is not None
              and (v := busbw_at(run.result, spec.judge_size_bytes)) is not None and math.isfinite(v)}
    _with_outliers(recs, values, spec, f"all_reduce busbw @ {human_size(spec.judge_size_bytes)}")
    return tuple(recs.values())


def judge_pairs(runs: Mapping[Pair, PairRuns], spec: FabricSpec) -> tuple[VerdictRecord, ...]:
    """Layer 4: each pair's collectives and fi_pingpong, plus outliers across pairs."""
    floors = pair_floors(spec)
    recs: dict[str, VerdictRecord] = {}
    by_collective: dict[str, dict[str, float]] = {}
    for pair, pr in runs.items():
        subject = pair_name(pair)
        checks: list[Check] = []
        for run in pr.nccl:
            checks += nccl_checks(run, spec, floor_gbs=floors.get(run.name), require_efa=True)
            if run.result is not None:
                v = busbw_at(run.result, spec.judge_size_bytes)
                if v is not None and math.isfinite(v):
                    by_collective.setdefault(run.name, {})[subject] = v
        if pr.pingpong is not None:
            checks += pingpong_checks(pr.pingpong, spec)
        if not checks:
            checks.append(Check("tests run", ISOLATE, 0, None, "", "no test ran across this pair"))
        recs[subject] = record("pair", subject, pair, checks)
    for name, values in by_collective.items():
        _with_outliers(recs, values, spec, f"{name} busbw @ {human_size(spec.judge_size_bytes)}")
    return tuple(recs.values())


def judge_full_set(nodes: Sequence[str], runs: Sequence[NcclRun], spec: FabricSpec,
                   floors: Mapping[str, float] | None = None) -> VerdictRecord:
    """Layer 5: collectives over every node. No published floor fits every fleet size, so
    only the hard conditions and EFA evidence judge unless floors are given."""
    checks: list[Check] = []
    for run in runs:
        checks += nccl_checks(run, spec, floor_gbs=(floors or {}).get(run.name), require_efa=len(nodes) > 1)
    if not checks:
        checks.append(Check("tests run", ISOLATE, 0, None, "", "no collective ran over the whole set"))
    return record("set", "all", nodes, checks)
