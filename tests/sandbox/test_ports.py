"""The sandbox's free ports lie below the kernel's ephemeral range and skip ports a server holds."""

from __future__ import annotations

import socket

import pytest

from sandbox import ports


class _Sequence:
    """Stands in for the random pick: the given ports in order."""

    def __init__(self, *picks: int):
        self.picks = list(picks)

    def randint(self, low: int, high: int) -> int:
        port = self.picks.pop(0)
        assert low <= port <= high, (low, port, high)
        return port


@pytest.fixture(autouse=True)
def outside_the_suite(request, monkeypatch):
    """One slot, as outside scripts/test, but for the tests of the slots themselves; none of this
    process's earlier ports handed out."""
    if "slots" not in request.node.name:
        monkeypatch.setattr(ports, "suite_slot", lambda: (0, 1))
    monkeypatch.setattr(ports, "_HANDED", {})


def _found(**run) -> int:
    """A port (with its run and offsets) free now, then forgotten as handed out, so that the test can
    have the pick draw it again."""
    port = ports.free_port(**run)
    ports._HANDED.clear()
    return port


@pytest.fixture()
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock.getsockname()[1]
    sock.close()


def test_every_port_chosen_is_below_the_ephemeral_range_with_its_run_and_offset_free():
    low = ports.ephemeral_low()
    for _ in range(30):
        port = ports.free_port(span=3, offsets=(10000,))
        assert ports.LOWEST <= port and port + 10000 < low
        assert not {port, port + 1, port + 2} & set(ports.FABRIC_PORTS)
        assert all(ports.bindable(p) for p in (port, port + 1, port + 2, port + 10000))


def test_the_ephemeral_range_is_read_from_the_kernel(monkeypatch, tmp_path):
    fake = tmp_path / "ip_local_port_range"
    fake.write_text("40000\t60999\n")
    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE", fake)
    assert ports.ephemeral_low() == 40000
    fake.write_text("garbage")
    assert ports.ephemeral_low() == 32768


def test_a_port_whose_run_or_offset_is_held_is_skipped(monkeypatch, listener):
    free = _found(span=2, offsets=(9,))
    monkeypatch.setattr(ports, "ephemeral_low", lambda: 65000)
    # listener - 1: its run of 2 reaches the held port; listener - 9: its offset does.
    monkeypatch.setattr(ports, "_PICK", _Sequence(listener - 1, listener - 9, free))
    assert ports.free_port(span=2, offsets=(9,)) == free


def test_a_held_port_itself_is_never_returned(monkeypatch, listener):
    monkeypatch.setattr(ports, "ephemeral_low", lambda: 65000)
    monkeypatch.setattr(ports, "_PICK", _Sequence(listener, listener))
    with pytest.raises(ports.NoFreePort, match="in 2 tries"):
        ports.free_port(tries=2)


def test_no_room_below_the_range_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_low", lambda: ports.LOWEST + 5)
    with pytest.raises(ports.NoFreePort, match="no room below it"):
        ports.free_port(span=10)


def test_the_fabric_stages_control_ports_are_never_chosen(monkeypatch):
    """A sandbox server and a fabric loopback must not want the same port (tasks/planning/fabric)."""
    from tasks.planning.fabric import commands

    assert ports.FABRIC_PORTS == range(commands.PORT_LOW, commands.PORT_LOW + commands.PORT_SPAN)
    free = _found(span=2)
    # 25000 inside; 19999's run of 2 reaches 20000, the first; 31998's reaches 31999, the last.
    monkeypatch.setattr(ports, "_PICK", _Sequence(25000, 19999, 31998, free))
    assert ports.free_port(span=2) == free


def test_a_port_a_browser_refuses_is_never_chosen_for_a_run_or_an_offset(monkeypatch):
    """The UI of a Prefect server on 10080 cannot be opened (Chromium: ERR_UNSAFE_PORT)."""
    assert 10080 in ports.BROWSER_BAD_PORTS and 10079 not in ports.BROWSER_BAD_PORTS
    free = _found(span=2, offsets=(3,))
    # 10080 itself; 10079's run of 2 reaches it; 10077's offset of 3 does.
    monkeypatch.setattr(ports, "_PICK", _Sequence(10080, 10079, 10077, free))
    assert ports.free_port(span=2, offsets=(3,)) == free


def test_in_the_suite_each_slot_draws_its_own_slice_of_the_ports_below_the_fabrics(monkeypatch):
    """A port checked free by one test process is not drawn by another before its server binds it
    (the moto endpoint of one worker lost its port so)."""
    drawn = {}
    for index in range(4):
        monkeypatch.setattr(ports, "suite_slot", lambda index=index: (index, 4))
        drawn[index] = {ports.free_port(span=2, offsets=(10000,)) for _ in range(40)}
    width = (ports.FABRIC_PORTS.start - 2 - ports.LOWEST + 1) // 4
    for index, chosen in drawn.items():
        start = ports.LOWEST + index * width
        assert all(start <= port <= start + width - 1 for port in chosen), (index, sorted(chosen))
    # the last slot's run of 2 and the next slice's first port, the fabric's first, stay apart
    assert max(drawn[3]) + 1 < ports.FABRIC_PORTS.start


def test_the_slots_come_from_the_lane_and_the_xdist_worker(monkeypatch):
    monkeypatch.setenv("PDLIFT_TEST_SLOTS", "1,4")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    assert ports.suite_slot() == (3, 4)
    monkeypatch.delenv("PDLIFT_TEST_SLOTS")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    assert ports.suite_slot() == (2, 3)
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert ports.suite_slot() == (0, 1)


class _Again:
    """Stands in for the random pick: the first two ports of the range, then the same two again and
    the ones after them, as a random draw may."""

    def __init__(self):
        self.offsets = [1, 2, *range(1, 100)]

    def randint(self, low: int, high: int) -> int:
        return low + self.offsets.pop(0)


def test_a_sandbox_start_gives_seaweedfs_none_of_the_ports_it_chose_for_aws_and_kube(monkeypatch, tmp_path):
    """Each server binds its port only once it starts (kube first, then SeaweedFS, then the AWS
    endpoint): SeaweedFS drawn without the others' ports took one of them, and the second server to
    start found its port in use (seen twice in suite runs)."""
    from sandbox import s3 as sandbox_s3
    from sandbox.orchestrator.stack import Sandbox

    monkeypatch.setattr(ports, "_PICK", _Again())
    sandbox = Sandbox(tmp_path)
    sandbox._choose_ports({}, {"aws", "kube", "s3"})
    chosen = [sandbox.settings["aws_port"], sandbox.settings["kube_port"], *sandbox.settings["s3_ports"].values()]
    assert len(set(chosen)) == len(chosen) == 2 + len(sandbox_s3.SERVERS), chosen


def _unbound_ports(count: int) -> list[int]:
    """``count`` ports free now, each a run of 1, none a port the pick may not return."""
    found: list[int] = []
    while len(found) < count:
        port = ports._PICK.randint(ports.LOWEST, ports.FABRIC_PORTS.start - 1)
        if port not in found and port not in ports.BROWSER_BAD_PORTS and ports.bindable(port, "127.0.0.1"):
            found.append(port)
    return found


def test_a_port_handed_out_and_not_yet_bound_is_not_handed_out_again_until_its_time_is_up(monkeypatch):
    """An engine stack draws four ports, then starts its servers: two equal draws gave two servers
    one port ("[Errno 98] address already in use", seen in a suite run)."""
    first, second, third = _unbound_ports(3)
    clock = [1000.0]
    monkeypatch.setattr(ports, "_now", lambda: clock[0])
    monkeypatch.setattr(ports, "_PICK", _Sequence(first, first, second, first, third, first))
    assert ports.free_port() == first
    assert ports.free_port() == second  # the repeated draw skipped, though nothing listens on it
    clock[0] += ports.HANDED_FOR_S - 0.01
    assert ports.free_port() == third  # still within its time
    clock[0] += 0.01
    assert ports.free_port() == first  # its time up: free again, so handed out again


def test_every_port_of_a_run_and_its_offsets_counts_as_handed_out(monkeypatch):
    base, other = _unbound_ports(2)
    monkeypatch.setattr(ports, "_PICK", _Sequence(base, base + 1, other))
    assert ports.free_port(span=2) == base
    assert ports.free_port() == other  # base + 1 is the first run's second port
