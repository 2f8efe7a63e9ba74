"""The state store's contract, held against both stores: a directory, and S3 on the sandbox's
SeaweedFS (4.48 enforces If-None-Match / If-Match on PutObject: 412 PreconditionFailed)."""

from __future__ import annotations

import json
import threading

import pytest

from tasks.adapters.ledger_store import LedgerStore
from tasks.adapters.state_store import CREATE, LocalStore, S3Store, StateConflict, open_store
from tasks.errors import ConfigError
from tasks.planning.ledger import Ledger, LedgerEntry


def test_create_only_once_then_read_what_was_written(store):
    etag = store.put("runs/d/r1.json", b"one", if_match=CREATE)
    got = store.get("runs/d/r1.json")
    assert got is not None and got.data == b"one" and got.etag == etag
    with pytest.raises(StateConflict):
        store.put("runs/d/r1.json", b"two", if_match=CREATE)
    assert store.get("runs/d/r1.json").data == b"one"
    assert store.get("runs/d/absent.json") is None


def test_an_update_with_a_stale_etag_is_refused_and_changes_nothing(store):
    first = store.put("k/doc", b"v1", if_match=CREATE)
    second = store.put("k/doc", b"v2", if_match=first)
    assert second != first and store.get("k/doc").data == b"v2"
    with pytest.raises(StateConflict):
        store.put("k/doc", b"v3-from-a-stale-read", if_match=first)
    assert store.get("k/doc").data == b"v2"
    with pytest.raises(StateConflict):  # an update of a key nobody created
        store.put("k/never", b"x", if_match=second)
    assert store.get("k/never") is None


def test_of_eight_racing_creators_exactly_one_wins(store):
    wins, conflicts = [], []
    start = threading.Barrier(8)

    def create(i: int) -> None:
        start.wait()
        try:
            store.put("leases/d/r.json", f"writer {i}".encode(), if_match=CREATE)
            wins.append(i)
        except StateConflict:
            conflicts.append(i)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(wins) == 1 and len(conflicts) == 7
    assert store.get("leases/d/r.json").data == f"writer {wins[0]}".encode()


def test_concurrent_ledger_updates_lose_nothing(store):
    ledgers = LedgerStore(store)
    ledgers.update("d", "r", lambda cur: cur or Ledger("d", "r", "2026-12-02T00:00:00Z"))
    start = threading.Barrier(6)

    def add(i: int) -> None:
        start.wait()
        ledgers.update("d", "r", lambda cur: cur.with_entry(LedgerEntry("instance", f"i-{i}", "launch")))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(e.resource_id for e in ledgers.load("d", "r").entries) == [f"i-{i}" for i in range(6)]


def test_a_reader_never_sees_a_torn_write(store):
    docs = [json.dumps({"v": v, "pad": "x" * 400_000}).encode() for v in "ab"]
    store.put("runs/d/big.json", docs[0])
    seen, stop = set(), threading.Event()

    def read() -> None:
        while not stop.is_set():
            got = store.get("runs/d/big.json")
            seen.add(got.data if got else None)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(12):
        store.put("runs/d/big.json", docs[i % 2])
    stop.set()
    reader.join(30)
    assert seen and seen <= set(docs)


def test_a_folder_pushed_by_one_worker_is_pulled_whole_by_another(store, tmp_path, request):
    folder = store.local_root / "runs/d/r/bench"
    (folder / "raw").mkdir(parents=True)
    (folder / "results.json").write_text('{"ok": true}')
    (folder / "raw" / "short-c4-r0.json").write_bytes(b"\x00" * 1000)
    store.push("runs/d/r/bench")
    assert store.keys("runs/d/r") == ["runs/d/r/bench/raw/short-c4-r0.json", "runs/d/r/bench/results.json"]
    assert store.keys("runs/d/r/be") == []  # a prefix is a folder, not a string prefix
    other = store if isinstance(store, LocalStore) else S3Store(store.uri, request.getfixturevalue("s3_state"),
                                                                tmp_path / "elsewhere")
    pulled = other.pull("runs/d/r/bench")
    assert (pulled / "results.json").read_text() == '{"ok": true}'
    assert (pulled / "raw" / "short-c4-r0.json").stat().st_size == 1000


def test_a_folder_pushed_again_sends_only_what_changed(s3_state, tmp_path):
    store = S3Store(f"s3://pdlift-state/p-{tmp_path.name[-8:]}", s3_state, cache_root=tmp_path / "cache")
    folder = store.local_root / "runs/d/r/bench"
    folder.mkdir(parents=True)
    (folder / "a.json").write_text("a")
    (folder / "b.json").write_text("b")
    assert store.push("runs/d/r/bench") == 2
    assert store.push("runs/d/r/bench") == 0
    (folder / "b.json").write_text("b2")
    assert store.push("runs/d/r/bench") == 1
    assert store.get("runs/d/r/bench/b.json").data == b"b2"
    (folder / "a.json").write_text("stale local copy")
    store.pull("runs/d/r/bench")  # what differs from the store is fetched again, the rest kept
    assert (folder / "a.json").read_text() == "a" and (folder / "b.json").read_text() == "b2"


def test_keys_that_are_not_relative_names_are_refused(store):
    for bad in ("", "/abs", "a/../b", "a//b"):
        with pytest.raises(ConfigError, match="not a relative path"):
            store.put(bad, b"x")


def test_a_missing_bucket_is_a_config_error_naming_it(s3_state):
    store = S3Store("s3://no-such-state-bucket/p", s3_state)
    with pytest.raises(ConfigError, match="bucket no-such-state-bucket does not exist"):
        store.get("runs/d/r.json")


def test_open_store_picks_the_store_by_uri(tmp_path):
    assert isinstance(open_store(None, tmp_path), LocalStore)
    assert open_store(None, tmp_path).local_root == tmp_path
    assert open_store(f"file://{tmp_path}/x", tmp_path).local_root == tmp_path / "x"
    assert isinstance(open_store("s3://b/p", tmp_path, object()), S3Store)
    with pytest.raises(ConfigError, match="s3://bucket/prefix"):
        open_store("gs://b/p", tmp_path)
