"""`pdlift status` reading the store (a real local state store) and systems that answer, or do not."""

import datetime as dt
import json

import pytest

from blueprints.loader import load_blueprint
from tasks.adapters.ec2_capacity import Reservation
from tasks.adapters.kube_apply import ContainerState, PodInfo
from tasks.adapters.ledger_store import LedgerStore
from tasks.adapters.run_lease import RunLeases
from tasks.adapters.state_store import LocalStore
from tasks.errors import RemoteUnavailable
from tasks.planning.lease import Holder
from tasks.planning.ledger import Ledger, LedgerEntry
from tasks.planning.manifests.common import COLOUR_LABEL, DEPLOYMENT_LABEL, ROLE_LABEL
from tasks.planning.records import Deployed, Reserved
from tasks.stages import status as stage

BP_PATH = "blueprints/sandbox-2p2d.yaml"
NOW = dt.datetime.now(dt.timezone.utc)


@pytest.fixture
def bp():
    return load_blueprint(BP_PATH)


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path)


def _ledger(bp, store, run_id: str, deployed: bool = True) -> None:
    ledger = Ledger(bp.name, run_id, "2026-12-04T09:00:00Z").with_entry(
        LedgerEntry("capacity-reservation", f"cr-{run_id}", "reserve", "az1", 50.0, 0, "2026-12-04T09:00:00Z"))
    ledger = ledger.with_record(Reserved(f"cr-{run_id}", "az1", None, False, (), False))
    if deployed:
        ledger = ledger.with_record(Deployed(bp.name, "blue", None, "ns", "ns", "svc", {}, 1.0, "ok"))
    LedgerStore(store).update(bp.name, run_id, lambda _: ledger)


class Answering:
    """EC2 and Kubernetes that answer as the sandbox does, or raise what an unreachable one raises."""

    def __init__(self, bp, down: bool = False):
        self.bp, self.down = bp, down

    def _check(self):
        if self.down:
            raise RemoteUnavailable("connection refused")

    def reservations(self, filters=None, ids=None):
        self._check()
        return [Reservation(i, "az1", "p5en.48xlarge", "active", 4, 0, "default", "default", "",
                            dt.datetime(2026, 12, 5, tzinfo=dt.timezone.utc), {}) for i in ids or []]

    def placement_groups(self, filters):
        self._check()
        return []

    def describe(self, ids=None, filters=None):
        self._check()
        return []

    def launch_templates(self, filters):
        self._check()
        return []

    def get(self, api_version, kind, name, namespace=None):
        self._check()
        return {"spec": {"selector": {COLOUR_LABEL: "blue"}}}

    def pods(self, namespace, selector):
        self._check()
        labels = {DEPLOYMENT_LABEL: self.bp.name, COLOUR_LABEL: "blue"}
        engine = ContainerState("engine", True, True, 0, image="vllm:x", image_id="vllm@sha256:aa")
        return [PodInfo(namespace, f"{role}-0", "n", "Running", "10.0.0.1", True, {**labels, ROLE_LABEL: role}, {},
                        (engine,)) for role in ("prefill", "decode", "router")]


def _gather(bp, store, ec2, kube, leases=None, ended=lambda _id: None):
    return stage.gather(bp, BP_PATH, store, LedgerStore(store), leases or RunLeases(store), lambda: ec2,
                        lambda: ec2, lambda: kube, NOW, "http://127.0.0.1:4200", ended)


def test_a_deployed_run_shows_its_reservation_its_engines_and_its_gate(bp, store):
    _ledger(bp, store, "r1")
    store.put(f"runs/{bp.name}/r1/bench/gate.json", json.dumps(
        {"outcome": "PASS", "reasons": ["all within bounds"], "judged_at": "2026-12-04T10:00:00Z",
         "flow_run_id": "fr-1"}).encode())
    s = _gather(bp, store, Answering(bp), Answering(bp))
    (fleet,) = s.fleets
    assert (fleet.reservation_state, fleet.reservation_ends_at) == ("active", "2026-12-05T00:00:00Z")
    assert s.live_colour == "blue" and s.images == (("vllm:x", "vllm@sha256:aa"),)
    assert s.engines_ready == "2/2 engine pods ready"  # the routers are not engines
    assert s.gate.outcome == "PASS" and s.gate_link.endswith("/runs/flow-run/fr-1")
    assert s.unreachable == () and s.releases == ()


def test_systems_that_do_not_answer_are_named_and_the_store_is_still_shown(bp, store):
    _ledger(bp, store, "r1")
    s = _gather(bp, store, Answering(bp, down=True), Answering(bp, down=True))
    assert [f.run_id for f in s.fleets] == ["r1"] and s.usd_per_hour == 50.0
    assert s.releases is None and not s.kube_answered and not s.empty
    assert [u.split(":")[0] for u in s.unreachable] == ["EC2 (DescribeCapacityReservations)",
                                                        "EC2 (the deployment's tagged resources)", "Kubernetes"]


def test_kubernetes_is_not_asked_before_anything_was_deployed(bp, store):
    _ledger(bp, store, "r1", deployed=False)
    s = _gather(bp, store, Answering(bp), Answering(bp, down=True))
    assert s.unreachable == () and s.kube_answered and s.live_colour is None


def test_one_unreadable_ledger_or_lease_does_not_hide_the_others(bp, store):
    _ledger(bp, store, "r1")
    store.put(f"runs/{bp.name}/r0.json", b"{not json")
    store.put(RunLeases.key(bp.name, "r1"), b"{not json")
    s = _gather(bp, store, Answering(bp), Answering(bp))
    assert [f.run_id for f in s.fleets] == ["r1"]
    assert any(u.startswith("ledger of run r0:") for u in s.unreachable)
    assert any(u.startswith("lease of run r1:") for u in s.unreachable)


def test_a_held_lease_is_a_run_in_flight(bp, store):
    _ledger(bp, store, "r1", deployed=False)
    leases = RunLeases(store)
    leases.take(bp.name, "r1", Holder("fr-9", "host:42"))
    (flying,) = _gather(bp, store, Answering(bp), Answering(bp), leases).in_flight  # Prefect cannot say
    assert (flying.run_id, flying.stage, flying.flow_run_id) == ("r1", "launch", "fr-9")
    assert _gather(bp, store, Answering(bp), Answering(bp), leases, ended={"fr-9": False}.get).in_flight
    # its flow run failed without giving the lease up: not in flight, though the lease has not expired
    assert _gather(bp, store, Answering(bp), Answering(bp), leases, ended={"fr-9": True}.get).in_flight == ()
