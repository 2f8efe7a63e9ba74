"""The control loop: node sync, controllers, scheduler, kubelet, endpoints, garbage collection.

One thread runs every step in turn (every ``TICK`` seconds), level-triggered from the store,
so there are no cross-thread races between controllers, and every container process is
started from this one long-lived thread (its parent-death signal is tied to that thread).
"""

from __future__ import annotations

import threading
import time
import traceback

from sandbox.kube import dns, resources
from sandbox.kube.kubelet import Kubelet
from sandbox.kube.lws import LeaderWorkerSets
from sandbox.kube.nodes import NodeSync
from sandbox.kube.scheduler import Scheduler
from sandbox.kube.workloads import Workloads

TICK = 0.2
PODS = resources.lookup("", "v1", "pods")
NODES = resources.lookup("", "v1", "nodes")
SERVICES = resources.lookup("", "v1", "services")


class Runtime:
    def __init__(self, app):
        self.app = app
        self.nodes = NodeSync(app)
        self.scheduler = Scheduler(app)
        self.workloads = Workloads(app)
        self.lws = LeaderWorkerSets(app)
        self.kubelet = Kubelet(app)
        self.hosts_file = dns.HostsFile(app.settings.state_dir / "sandbox" / "hosts.json")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kube-runtime", daemon=True)
        self._last_nodes = 0.0
        self._last_gc = 0.0

    def start(self) -> None:
        self.nodes.sync()  # nodes from existing join records are there before the first client
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        try:
            while not self._stop.wait(TICK):
                self.tick()
        finally:
            self.kubelet.shutdown()  # same thread that started the processes

    def _step(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:  # one broken object must not stop the cluster
            traceback.print_exc()

    def tick(self) -> None:
        now = time.monotonic()
        store = self.app.api.store
        if now - self._last_nodes >= self.app.settings.join_poll_seconds:
            self._last_nodes = now
            self._step(self.nodes.sync)
        # Every pass reads the stored objects themselves (Store.view: no copies) and writes
        # through the API (create, mutate, write_status), which takes a fresh copy to change.
        pods = store.view(PODS)
        self._step(self.workloads.sync, pods)
        self._step(self.lws.sync, pods)
        self._step(self.scheduler.sync)
        nodes = {n["metadata"]["name"]: n for n in store.view(NODES)}
        pods = store.view(PODS)
        self.kubelet.hosts = dns.hosts_table(pods, store.view(SERVICES), nodes)
        self._step(self.hosts_file.write, self.kubelet.hosts)
        self._step(self.kubelet.sync, pods, nodes)
        self._step(self.workloads.sync_endpoints, store.view(PODS))
        if now - self._last_gc >= 1.0:
            self._last_gc = now
            self._step(self.workloads.collect_garbage)
