"""Run leases over the state store (both stores): a live lease refuses, an expired one or one
whose flow run ended is taken over, the holder's own process re-takes and renews it."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import pytest

from tasks.adapters import run_lease
from tasks.adapters.run_lease import RunLeases, this_worker
from tasks.adapters.state_store import LocalStore
from tasks.errors import ConfigError, RunHeld
from tasks.planning.lease import Holder

T0 = dt.datetime(2026, 12, 2, 10, 0, 0, tzinfo=dt.timezone.utc)
OTHER = Holder("flow-run-other", "worker-b:4242")
ME = Holder("flow-run-mine", "worker-a:1111")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def test_a_live_lease_refuses_a_second_holder_and_names_who_holds_it_until_when(store):
    clock = Clock()
    leases = RunLeases(store, ttl_s=60, now=clock)
    leases.take("d", "r1", OTHER)
    before = store.get(leases.key("d", "r1"))
    clock.now = T0 + dt.timedelta(seconds=59)  # one second before the expiry
    with pytest.raises(RunHeld, match=r"run r1 is held by flow run flow-run-other on worker worker-b:4242 "
                                      r"until 2026-12-02T10:01:00Z"):
        leases.take("d", "r1", ME)
    assert store.get(leases.key("d", "r1")) == before  # refused: nothing written


def test_an_expired_lease_is_taken_over_at_its_expiry(store):
    clock = Clock()
    leases = RunLeases(store, ttl_s=60, now=clock)
    leases.take("d", "r1", OTHER)
    clock.now = T0 + dt.timedelta(seconds=60)  # the expiry itself: expired
    mine = leases.take("d", "r1", ME)
    assert (mine.flow_run_id, mine.worker, mine.expires_at) == ("flow-run-mine", "worker-a:1111",
                                                                 "2026-12-02T10:02:00Z")
    with pytest.raises(RunHeld, match="flow-run-mine"):
        leases.take("d", "r1", OTHER)  # and the old holder, back, is refused in turn


def test_a_live_lease_whose_flow_run_ended_is_taken_over_at_once(store):
    clock = Clock()
    leases = RunLeases(store, ttl_s=600, now=clock)
    leases.take("d", "r1", OTHER)
    asked = []
    mine = leases.take("d", "r1", ME, holder_ended=lambda fr: asked.append(fr) or fr == "flow-run-other")
    assert asked == ["flow-run-other"] and mine.flow_run_id == "flow-run-mine"
    with pytest.raises(RunHeld):
        leases.take("d", "r1", OTHER, holder_ended=lambda fr: False)


def test_the_holders_own_process_takes_it_again_and_keeps_the_first_flow_run_as_holder(store):
    clock = Clock()
    leases = RunLeases(store, ttl_s=60, now=clock)
    leases.take("d", "r1", ME)
    clock.now = T0 + dt.timedelta(seconds=30)
    again = leases.take("d", "r1", Holder("a-subflow-run", ME.worker))  # migrate's stage subflow
    assert again.flow_run_id == "flow-run-mine" and again.expires_at == "2026-12-02T10:01:30Z"
    assert again.taken_at == "2026-12-02T10:00:00Z"


def test_renewal_pushes_the_expiry_forward_and_release_frees_the_run(store):
    clock = Clock()
    leases = RunLeases(store, ttl_s=60, now=clock)
    lease = leases.take("d", "r1", ME)
    clock.now = T0 + dt.timedelta(seconds=50)
    renewed = leases.renew(lease)
    assert renewed is not None and renewed.expires_at == "2026-12-02T10:01:50Z"
    assert not leases.release(lease, "a-subflow-run")  # a subflow's end keeps its parent's lease
    with pytest.raises(RunHeld):
        leases.take("d", "r1", OTHER)
    assert leases.release(lease, "flow-run-mine")
    assert leases.take("d", "r1", OTHER).worker == OTHER.worker
    assert leases.renew(lease) is None  # taken over: this process stops renewing


def test_of_two_workers_racing_for_an_expired_lease_one_wins(store):
    clock = Clock()
    RunLeases(store, ttl_s=60, now=clock).take("d", "r1", Holder("dead", "dead-worker:1"))
    clock.now = T0 + dt.timedelta(seconds=120)
    outcomes: list[str] = []
    start = threading.Barrier(4)

    def contend(i: int) -> None:
        start.wait()
        try:
            RunLeases(store, ttl_s=60, now=clock).take("d", "r1", Holder(f"fr-{i}", f"w{i}:1"))
            outcomes.append("won")
        except RunHeld:
            outcomes.append("held")

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["held", "held", "held", "won"]


def test_a_held_lease_is_renewed_in_the_background_until_let_go(tmp_path):
    store = LocalStore(tmp_path / "state")
    leases = RunLeases(store, ttl_s=1.5)  # the real clock: renewals every 0.5 s
    me = Holder("flow-run-bg", this_worker())
    first = run_lease.hold(leases, "d", "bg", me)
    deadline = time.monotonic() + 10
    while leases.current("d", "bg")[0].expires_at == first.expires_at and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leases.current("d", "bg")[0].expires_at > first.expires_at, "never renewed"
    assert run_lease.let_go(leases, "d", "bg", "flow-run-bg")
    released = leases.current("d", "bg")[0]
    time.sleep(1.2)  # two renewal periods: a stopped renewal does not un-release it
    assert leases.current("d", "bg")[0] == released
    assert leases.take("d", "bg", OTHER).worker == OTHER.worker


def test_the_holders_flow_run_resumed_in_another_process_takes_it_back(store):
    clock = Clock()
    leases = RunLeases(store, ttl_s=600, now=clock)
    leases.take("d", "r1", OTHER)  # suspended: its process exited, the lease is still live
    resumed = leases.take("d", "r1", Holder(OTHER.flow_run_id, "another-pod:7"))
    assert (resumed.flow_run_id, resumed.worker) == (OTHER.flow_run_id, "another-pod:7")
    with pytest.raises(RunHeld):  # any other flow run is still refused
        leases.take("d", "r1", ME)
    with pytest.raises(RunHeld):  # and so is a flow run without an id on another process
        leases.take("d", "r1", Holder("", "cli:9"))


def test_a_run_whose_lease_was_taken_over_stops_writing_its_ledger(tmp_path):
    import datetime as dt

    from blueprints.loader import load_blueprint
    from tasks.adapters.ledger_store import LedgerStore
    from tasks.planning.ledger import LedgerEntry
    from tasks.runs import open_run

    store = LocalStore(tmp_path / "state")
    leases = RunLeases(store, ttl_s=1.5)
    bp = load_blueprint("blueprints/sandbox-2p2d.yaml")
    run_lease.hold(leases, bp.name, "fenced", Holder("flow-run-slow", this_worker()))
    run = open_run(bp, "blueprints/sandbox-2p2d.yaml", "fenced", LedgerStore(store), now=dt.datetime.now(dt.timezone.utc),
                   guard=lambda: run_lease.check(leases, bp.name, "fenced"))
    run.record(LedgerEntry("placement-group", "pg-1", "reserve"))
    # An operator marked this flow run crashed; another run took the lease over: the very next
    # ledger write of this one is refused, before any renewal could notice.
    leases.take(bp.name, "fenced", OTHER, holder_ended=lambda _fr: True)
    with pytest.raises(RunHeld, match="taken over"):
        run.record(LedgerEntry("instance", "i-late", "launch"))
    assert [e.resource_id for e in LedgerStore(store).load(bp.name, "fenced").entries] == ["pg-1"]


def test_after_a_release_the_next_flow_run_of_the_same_process_holds_it_in_its_own_name(store):
    clock = Clock()
    leases = RunLeases(store, ttl_s=60, now=clock)
    first = leases.take("d", "r1", Holder("flow-a", ME.worker))
    assert leases.release(first, "flow-a")
    second = leases.take("d", "r1", Holder("flow-b", ME.worker))
    assert second.flow_run_id == "flow-b" and second.taken_at == "2026-12-02T10:00:00Z"
    assert leases.release(second, "flow-b")  # so flow-b can let it go, and only flow-b
    with pytest.raises(RunHeld, match="flow run flow-c"):
        third = leases.take("d", "r1", Holder("flow-c", ME.worker))
        leases.take("d", "r1", OTHER, holder_ended=lambda fr: fr == "flow-a")  # flow-a ended long ago
    assert leases.current("d", "r1")[0] == third


def test_a_lease_this_pdlift_cannot_read_is_refused_not_overwritten(store):
    store.put(RunLeases.key("d", "r1"), b'{"kind": "something-else"}')
    with pytest.raises(ConfigError, match="cannot read the run lease"):
        RunLeases(store).take("d", "r1", ME)
    assert store.get(RunLeases.key("d", "r1")).data == b'{"kind": "something-else"}'
    newer = {"kind": "pdlift-run-lease", "deployment": "d", "run_id": "r2", "flow_run_id": "f", "worker": "w:1",
             "expires_at": "2999-01-01T00:00:00Z", "taken_at": "2026-12-02T10:00:00Z", "fencing": 7}
    store.put(RunLeases.key("d", "r2"), json.dumps(newer).encode())
    with pytest.raises(RunHeld, match="held by flow run f on worker w:1"):  # a newer pdlift's field: read
        RunLeases(store).take("d", "r2", ME)


def test_a_worker_that_must_share_its_state_refuses_a_local_store(tmp_path):
    from blueprints.loader import load_blueprint
    from tasks.wiring import Wiring

    bp = load_blueprint("blueprints/sandbox-2p2d.yaml")
    with pytest.raises(ConfigError, match="PDLIFT_STATE_URI=s3://bucket/prefix"):
        Wiring(bp, {"PDLIFT_REQUIRE_SHARED_STATE": "1", "PDLIFT_STATE_DIR": str(tmp_path)}).state
    assert isinstance(Wiring(bp, {"PDLIFT_STATE_DIR": str(tmp_path)}).state, LocalStore)
