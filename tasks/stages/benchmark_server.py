"""Reading the candidate's engines and the cluster's DCGM exporter around each load point.

Which endpoints, found once per benchmark: every pod of the colour's prefill and decode groups
that answers on its engine port (multi-node groups whose workers serve no HTTP keep their
leader), and the DCGM exporter pods (``benchmark.server_metrics.gpu_exporter``) on the nodes
of every pod of the groups (a worker's GPUs compute its leader's batches, so they count too). Around a point: one reading before, one every ``interval_s`` during it
(a background thread, stopped when the point ends), one after; ``tasks.planning.server_figures``
turns them into figures. A pod that cannot be read before *and* after a point is left out of
that point's differences (a difference against a missing reading would be the whole counter);
none of this ever fails the benchmark, it only leaves a figure out and says why.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from blueprints.schema import Blueprint
from tasks.errors import PdliftError
from tasks.parsing.prometheus import Sample
from tasks.planning.manifests import common
from tasks.planning.server_figures import EnginePod, ServerFigures, Snapshot, figures
from tasks.stages.ports import Engines, KubeObjects

T = TypeVar("T")


@dataclass(frozen=True)
class _Target:
    pod: EnginePod
    url: str


@dataclass(frozen=True)
class _Reading:
    engines: dict[str, tuple[Sample, ...]]   # pod name -> samples
    gpus: dict[str, tuple[Sample, ...]]      # node -> samples
    errors: tuple[str, ...]


class ServerMetrics:
    def __init__(self, bp: Blueprint, kube: KubeObjects, http: Engines, colour: str):
        self.bp, self.http = bp, http
        self.spec = bp.benchmark.server_metrics
        self.notes: list[str] = []
        self.pods: list[EnginePod] = []          # every pod of both roles: whose GPUs count
        self.engines = self._engine_targets(kube, colour)
        self.exporters = self._exporter_targets(kube)

    # --- which endpoints -------------------------------------------------------------------------

    def _engine_targets(self, kube: KubeObjects, colour: str) -> list[_Target]:
        ns = common.colour_namespace(self.bp, colour)
        ports = {common.PREFILL: self.bp.engine.prefill_port, common.DECODE: self.bp.engine.decode_port}
        out = []
        for role in (common.PREFILL, common.DECODE):
            pods = kube.pods(ns, {common.COLOUR_LABEL: colour, common.LWS_NAME_LABEL: role})
            for p in sorted(pods, key=lambda p: p.name):
                target = _Target(EnginePod(role, p.namespace, p.name, p.node),
                                 f"http://{p.pod_ip}:{p.ports.get('http', ports[role])}/metrics")
                self.pods.append(target.pod)
                try:
                    self.http.metrics(target.url)
                except PdliftError as e:
                    if p.labels.get(common.LWS_WORKER_INDEX_LABEL, "0") == "0":
                        self.notes.append(f"the {role} leader {p.namespace}/{p.name} serves no metrics ({e})")
                    continue   # a worker rank without an API server of its own
                out.append(target)
            if not any(t.pod.role == role for t in out):
                self.notes.append(f"no {role} engine of {colour} serves metrics in {ns}")
        return out

    def _exporter_targets(self, kube: KubeObjects) -> dict[str, str]:
        gx = self.spec.gpu_exporter
        nodes = {p.node for p in self.pods}
        selector = ",".join(f"{k}={v}" for k, v in gx.selector.items())
        try:
            pods = kube.pods(gx.namespace, dict(gx.selector))
        except PdliftError as e:
            self.notes.append(f"GPU utilisation not measured: cannot list the DCGM exporter ({e})")
            return {}
        found = {p.node: f"http://{p.pod_ip}:{gx.port}/metrics" for p in pods if p.node in nodes and p.ready}
        if not found:
            self.notes.append(f"GPU utilisation not measured: no ready DCGM exporter pod ({gx.namespace}, "
                              f"{selector}) on the candidate's nodes")
        return found

    # --- readings --------------------------------------------------------------------------------

    def _read(self) -> _Reading:
        engines, gpus, errors = {}, {}, []
        for t in self.engines:
            try:
                engines[t.pod.name] = tuple(self.http.metrics(t.url))
            except PdliftError as e:
                errors.append(f"{t.pod.namespace}/{t.pod.name}: {e}")
        for node, url in self.exporters.items():
            try:
                gpus[node] = tuple(self.http.metrics(url))
            except PdliftError as e:
                errors.append(f"DCGM exporter on {node}: {e}")
        return _Reading(engines, gpus, tuple(errors))

    def _snapshot(self, reading: _Reading, pods: set[str]) -> Snapshot:
        by_role: dict[str, list[Sample]] = {common.PREFILL: [], common.DECODE: []}
        for t in self.engines:
            if t.pod.name in pods:
                by_role[t.pod.role].extend(reading.engines[t.pod.name])
        return Snapshot({role: tuple(s) for role, s in by_role.items()}, reading.gpus)

    def around(self, point: Callable[[], T]) -> tuple[T, ServerFigures]:
        """Run the load point with readings before, during and after it."""
        before = self._read()
        during: list[_Reading] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(self.spec.interval_s):   # ends with the point
                during.append(self._read())

        sampler = threading.Thread(target=sample, name="server-metrics", daemon=True)
        sampler.start()
        try:
            result = point()
        finally:
            stop.set()
            sampler.join()
        after = self._read()
        both = set(before.engines) & set(after.engines)
        errors = dict.fromkeys(e for r in (before, *during, after) for e in r.errors)
        notes = [f"not read: {e}" for e in errors] + self.notes
        figs = figures(self.bp.engine.name, self.bp.kv_transfer.connector, self.pods, self._snapshot(before, both),
                       [self._snapshot(r, both & set(r.engines)) for r in during], self._snapshot(after, both))
        return result, ServerFigures(figs.values, tuple(notes) + figs.notes)
